package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/services/common/config"
	"github.com/nodelet/nodelet/services/tap"
)

func init() {
	commands = append(commands, command{"tap", "print every message on the bus: tap [SUBJECT-FILTER] [--pod P] [--schema S] [--since D] [--json] [--no-color]", runTap})
}

func runTap(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	flags := pflag.NewFlagSet("nodelet tap", pflag.ContinueOnError)
	loader := config.NewLoader(flags)
	var o tap.Options
	flags.StringVar(&o.Pod, "pod", "", "only messages about this pod (name, namespace/name or UID)")
	flags.StringVar(&o.Schema, "schema", "", "only messages of this schema (e.g. PodObserved)")
	flags.BoolVar(&o.JSON, "json", false, "one JSON object per line")
	flags.DurationVar(&o.Since, "since", 0, "first replay the events and bucket updates stored in this recent window (e.g. 10m), then follow live")
	noColor := flags.Bool("no-color", false, "no colours, even on a terminal (also: NO_COLOR set)")
	if err := flags.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		return config.ExitCode
	}
	if flags.NArg() > 1 {
		fmt.Fprintln(os.Stderr, "nodelet tap: at most one subject filter")
		return config.ExitCode
	}
	o.Subject = flags.Arg(0)
	if o.Since < 0 {
		fmt.Fprintln(os.Stderr, "nodelet tap: --since must not be negative")
		return config.ExitCode
	}
	o.Color = !*noColor && !o.JSON && os.Getenv("NO_COLOR") == "" && term.IsTerminal(int(os.Stdout.Fd()))
	cfg, err := loader.Load()
	if err != nil {
		fmt.Fprintf(os.Stderr, "nodelet tap: %v\n", err)
		return config.ExitCode
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	c, err := bus.Connect(bus.ConnectOptions{URL: bus.URLFor(cfg.Bus.Listen), Component: bus.Tap, StateDir: cfg.Node.StateDir, Log: log})
	if err != nil {
		fmt.Fprintf(os.Stderr, "nodelet tap: %v\n", err)
		return 1
	}
	defer closeQuietly(c)
	if err := tap.Run(ctx, c, o, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "nodelet tap: %v\n", err)
		return 1
	}
	return 0
}
