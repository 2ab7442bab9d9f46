// Package bustest starts a real embedded bus for tests, on a random loopback
// port with a temporary state dir, and hands out component connections.
package bustest

import (
	"context"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/nodelet/nodelet/bus"
)

// Bus is a running bus for one test.
type Bus struct {
	t        testing.TB
	StateDir string
	Server   *bus.Server
	URL      string
	listen   string
	limits   bus.Limits
}

// Logger is the logger tests give the bus and connections: quiet unless
// NODELET_TEST_LOG is set.
func Logger() *slog.Logger {
	if os.Getenv("NODELET_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// Start starts a bus and stops it at the end of the test.
func Start(t testing.TB) *Bus {
	t.Helper()
	return StartIn(t, t.TempDir())
}

// StartIn starts a bus with the given state dir.
func StartIn(t testing.TB, stateDir string) *Bus {
	t.Helper()
	return StartWithLimits(t, stateDir, bus.Limits{})
}

// StartWithLimits starts a bus with the given state dir and store limits.
func StartWithLimits(t testing.TB, stateDir string, l bus.Limits) *Bus {
	t.Helper()
	b := &Bus{t: t, StateDir: stateDir, listen: "127.0.0.1:0", limits: l}
	b.start()
	t.Cleanup(func() { b.Server.Shutdown() })
	return b
}

func (b *Bus) start() {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := bus.StartServer(ctx, bus.ServerOptions{StateDir: b.StateDir, Listen: b.listen, Log: Logger(), Limits: b.limits})
	if err != nil {
		b.t.Fatalf("start bus: %v", err)
	}
	b.Server = s
	b.URL = s.ClientURL()
	// Restarts keep the port so clients reconnect to the same URL.
	b.listen = s.Addr()
}

// Restart stops the bus and starts it again on the same port and store.
// With wipe, the store is deleted in between.
func (b *Bus) Restart(wipe bool) {
	b.t.Helper()
	b.Server.Shutdown()
	if wipe {
		if err := os.RemoveAll(b.StateDir + "/bus"); err != nil {
			b.t.Fatal(err)
		}
	}
	b.start()
}

// Connect connects as component; the connection closes with the test.
func (b *Bus) Connect(component string) *bus.Conn {
	b.t.Helper()
	c, err := bus.Connect(bus.ConnectOptions{URL: b.URL, Component: component, StateDir: b.StateDir, Log: Logger()})
	if err != nil {
		b.t.Fatalf("connect as %s: %v", component, err)
	}
	b.t.Cleanup(c.Close)
	return c
}
