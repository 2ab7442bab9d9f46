package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/services/common/config"
	"github.com/nodelet/nodelet/services/explain"
)

func init() {
	commands = append(commands, command{"explain", "tell a pod's story from the bus and which stage holds it now: explain POD (name, namespace/name or UID)", runExplain})
}

func runExplain(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	flags := pflag.NewFlagSet("nodelet explain", pflag.ContinueOnError)
	loader := config.NewLoader(flags)
	timeout := flags.Duration("timeout", 30*time.Second, "give up reading the bus after this long")
	if err := flags.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		return config.ExitCode
	}
	if flags.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "nodelet explain: name one pod: its name, namespace/name or UID")
		return config.ExitCode
	}
	cfg, err := loader.Load()
	if err != nil {
		fmt.Fprintf(os.Stderr, "nodelet explain: %v\n", err)
		return config.ExitCode
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	c, err := bus.Connect(bus.ConnectOptions{URL: bus.URLFor(cfg.Bus.Listen), Component: bus.Tap, StateDir: cfg.Node.StateDir, Log: log, NoRetry: true})
	if err != nil {
		fmt.Fprintf(os.Stderr, "nodelet explain: %v\n", err)
		return 1
	}
	defer closeQuietly(c)
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	story, err := explain.Explain(ctx, c, flags.Arg(0))
	if err != nil {
		fmt.Fprintf(os.Stderr, "nodelet explain: %v\n", err)
		return 1
	}
	if err := story.Write(os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "nodelet explain: %v\n", err)
		return 1
	}
	return 0
}

// closeQuietly closes a one-shot tool's bus connection without the
// "Disconnected from bus" warning meant for daemons.
func closeQuietly(c *bus.Conn) {
	c.NC.SetDisconnectErrHandler(nil)
	c.NC.Close()
}
