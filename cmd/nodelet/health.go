package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/component"
	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/schemas"
)

func init() {
	commands = append(commands, command{"health", "exit 0 when a component is up: health COMPONENT [--timeout D] (the compose health check)", runHealth})
}

// runHealth answers whether one component is up, for container health
// checks and scripts: the bus when it serves nodelet's events stream to
// the tap credential; a daemon when its heartbeat arrives within the
// timeout and says ready. Exit 0 healthy, 1 not, 2 bad usage.
func runHealth(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	in := newInvocation("health")
	flags := in.Flags
	timeout := flags.Duration("timeout", 0, "how long to wait for a heartbeat (default: two bus.heartbeatInterval and a second)")
	if code, ok := in.parse(args); !ok {
		return code
	}
	var names []string
	for _, c := range component.Declared.Processes() {
		names = append(names, c.Name)
	}
	if flags.NArg() != 1 {
		fmt.Fprintf(os.Stderr, "nodelet health: name one component: %s\n", strings.Join(names, ", "))
		return config.ExitCode
	}
	name := flags.Arg(0)
	if _, ok := component.Declared.Processes().Get(name); !ok {
		fmt.Fprintf(os.Stderr, "nodelet health: unknown component %q (one of %s)\n", name, strings.Join(names, ", "))
		return config.ExitCode
	}
	cfg, code, ok := in.load()
	if !ok {
		return code
	}
	wait := *timeout
	if wait <= 0 {
		wait = 2*cfg.Bus.HeartbeatInterval + time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	c, err := connectTap(cfg, slog.LevelError, false)
	if err != nil {
		fmt.Fprintf(os.Stderr, "nodelet health: %s: bus unreachable: %v\n", name, err)
		return 1
	}
	defer closeQuietly(c)
	msg, err := health(ctx, c, name)
	if err != nil {
		fmt.Fprintf(os.Stderr, "nodelet health: %s: %v\n", name, err)
		return 1
	}
	fmt.Printf("%s: %s\n", name, msg)
	return 0
}

// health checks one component; the error says why it is not healthy.
func health(ctx context.Context, c *bus.Conn, name string) (string, error) {
	if name == bus.BusAdmin {
		// Ready means what nodelet-bus's READY=1 means: the streams exist.
		var n uint64
		for _, name := range bus.EventStreams() {
			s, err := c.JS.Stream(ctx, name)
			if err != nil {
				return "", fmt.Errorf("stream %s: %w", name, err)
			}
			n += s.CachedInfo().State.Msgs
		}
		return fmt.Sprintf("up, the events streams hold %d events", n), nil
	}
	sub, err := c.NC.SubscribeSync(bus.HealthSubject(name))
	if err != nil {
		return "", err
	}
	defer func() { _ = sub.Unsubscribe() }()
	m, err := sub.NextMsgWithContext(ctx)
	if err != nil {
		return "", fmt.Errorf("no heartbeat on %s: %w", bus.HealthSubject(name), err)
	}
	_, hb, err := schemas.Decode[schemas.Heartbeat](m.Data)
	if err != nil {
		return "", fmt.Errorf("heartbeat on %s: %w", m.Subject, err)
	}
	up := time.Since(hb.StartTime).Round(time.Second)
	if !hb.Ready {
		return "", fmt.Errorf("up for %s (pid %d) but not ready: %s", up, hb.PID, hb.Message)
	}
	return fmt.Sprintf("up for %s, ready (pid %d, version %s)", up, hb.PID, hb.Version), nil
}
