package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/term"

	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/internal/tools/tap"
)

func init() {
	commands = append(commands, command{"tap", "print every message on the bus: tap [SUBJECT-FILTER] [--pod P] [--schema S] [--since D] [--json] [--no-color]", runTap})
}

func runTap(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	in := newInvocation("tap")
	flags := in.Flags
	var o tap.Options
	flags.StringVar(&o.Pod, "pod", "", "only messages about this pod (name, namespace/name or UID)")
	flags.StringVar(&o.Schema, "schema", "", "only messages of this schema (e.g. PodObserved)")
	flags.BoolVar(&o.JSON, "json", false, "one JSON object per line")
	flags.DurationVar(&o.Since, "since", 0, "first replay the events and bucket updates stored in this recent window (e.g. 10m), then follow live")
	noColor := flags.Bool("no-color", false, "no colours, even on a terminal (also: NO_COLOR set)")
	if code, ok := in.parse(args); !ok {
		return code
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
	cfg, code, ok := in.load()
	if !ok {
		return code
	}
	c, err := connectTap(cfg, slog.LevelWarn, true)
	if err != nil {
		return in.fail(1, err)
	}
	defer closeQuietly(c)
	if err := tap.Run(ctx, c, o, os.Stdout); err != nil {
		return in.fail(1, err)
	}
	return 0
}
