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

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/services/common/config"
	"github.com/nodelet/nodelet/services/tap"
)

func init() {
	commands = append(commands, command{"tap", "print every message on the bus: tap [SUBJECT-FILTER] [--pod P] [--schema S] [--json]", runTap})
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
	defer c.NC.Close()
	if err := tap.Run(ctx, c, o, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "nodelet tap: %v\n", err)
		return 1
	}
	return 0
}
