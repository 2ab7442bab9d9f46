package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/internal/tools/explain"
)

func init() {
	commands = append(commands, command{"explain", "tell a pod's story from the bus and which stage holds it now: explain POD (name, namespace/name or UID)", runExplain})
}

func runExplain(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	in := newInvocation("explain")
	flags := in.Flags
	timeout := flags.Duration("timeout", 30*time.Second, "give up reading the bus after this long")
	if code, ok := in.parse(args); !ok {
		return code
	}
	if flags.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "nodelet explain: name one pod: its name, namespace/name or UID")
		return config.ExitCode
	}
	cfg, code, ok := in.load()
	if !ok {
		return code
	}
	c, err := connectTap(cfg, slog.LevelWarn, false)
	if err != nil {
		return in.fail(1, err)
	}
	defer closeQuietly(c)
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	story, err := explain.Explain(ctx, c, flags.Arg(0))
	if err != nil {
		return in.fail(1, err)
	}
	if err := story.Write(os.Stdout); err != nil {
		return in.fail(1, err)
	}
	return 0
}

// closeQuietly closes a one-shot tool's bus connection without the
// "Disconnected from bus" warning meant for daemons.
func closeQuietly(c *bus.Conn) {
	c.NC.SetDisconnectErrHandler(nil)
	c.NC.Close()
}
