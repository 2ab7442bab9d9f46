// Package daemon is the frame every nodelet daemon runs in: signal handling
// first, configuration, the start-up permission check (the kubelet's
// checkPermission), the bus connection with the daemon's own credential,
// heartbeats, systemd notification, and a clean drain on SIGTERM.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	sddaemon "github.com/coreos/go-systemd/v22/daemon"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/component"
	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/internal/cri"
	"github.com/nodelet/nodelet/internal/kubeletmetrics"
	"github.com/nodelet/nodelet/internal/version"
	"github.com/nodelet/nodelet/schemas"
)

// Spec describes one daemon to Main.
type Spec struct {
	// Component is the daemon's bus identity: sources, admission, ...
	// What it needs at start (CRI, its directories, its seed) comes from
	// its declaration in internal/component.
	Component string
	// Run does the daemon's work until ctx is done. Returning nil before
	// that, or an error, ends the process (exit 0 or 1).
	Run func(ctx context.Context, env *Env) error
	// Metrics, when set, is served on the daemon's metrics socket
	// (MetricsSocket) for nodelet-server to federate into /metrics; a
	// daemon whose registry is made in Run gives it with Env.SetMetrics.
	// The socket is served either way, with the Go runtime's profiles.
	Metrics prometheus.Gatherer
}

// Env is what a running daemon gets from the frame.
type Env struct {
	Config    *config.Config
	Log       *slog.Logger
	Bus       *bus.Conn
	Component string
	Started   time.Time

	mu      sync.Mutex
	ready   bool
	message string
	beat    chan struct{}
	metrics prometheus.Gatherer
}

// SetMetrics makes g the metrics served on the daemon's metrics socket.
func (e *Env) SetMetrics(g prometheus.Gatherer) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.metrics = g
}

// Gather serves the metrics SetMetrics (or the Spec) gave (none before)
// and the process-wide kubelet families every daemon has
// (kubeletmetrics.Process: the CRI operations and API requests it made).
func (e *Env) Gather() ([]*dto.MetricFamily, error) {
	e.mu.Lock()
	g := e.metrics
	e.mu.Unlock()
	if g == nil {
		return kubeletmetrics.Process().Gather()
	}
	return prometheus.Gatherers{g, kubeletmetrics.Process()}.Gather()
}

// SetHealth changes what the daemon's heartbeats say: ready or not, and why.
// The next heartbeat goes out at once.
func (e *Env) SetHealth(ready bool, message string) {
	e.mu.Lock()
	changed := e.ready != ready || e.message != message
	e.ready, e.message = ready, message
	e.mu.Unlock()
	if changed {
		select {
		case e.beat <- struct{}{}:
		default:
		}
	}
}

// Health is what the next heartbeat says: what SetHealth said, and not
// ready while a bus mirror's watch is lost past its grace (bus.Mirror), each
// outage named in the message.
func (e *Env) Health() (bool, string) {
	e.mu.Lock()
	ready, msg := e.ready, e.message
	e.mu.Unlock()
	if e.Bus == nil {
		return ready, msg
	}
	return withOutages(ready, msg, e.Bus.Outages())
}

func withOutages(ready bool, msg string, outages []string) (bool, string) {
	if len(outages) == 0 {
		return ready, msg
	}
	if msg != "" {
		outages = append([]string{msg}, outages...)
	}
	return false, strings.Join(outages, "; ")
}

// Main runs spec as the process and exits with its status.
func Main(spec Spec) {
	os.Exit(Run(spec, os.Args[1:], os.Stderr))
}

// Run is Main without the exit: 0 after a clean stop, 1 when the daemon
// cannot do its job, config.ExitCode (2) for a bad configuration or when
// another copy of the daemon runs on the same state dir.
func Run(spec Spec, args []string, stderr io.Writer) int {
	// The signal handler comes first: a SIGTERM during slow start-up work
	// still ends in a clean drain.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	flags := pflag.NewFlagSet("nodelet-"+spec.Component, pflag.ContinueOnError)
	flags.SetOutput(stderr)
	loader := config.NewLoader(flags)
	logLevel := flags.String("log-level", "info", "debug, info, warn or error")
	if err := flags.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, err)
		return config.ExitCode
	}
	cfg, err := loader.Load()
	if err != nil {
		fmt.Fprintf(stderr, "nodelet-%s: %v\n", spec.Component, err)
		return config.ExitCode
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		fmt.Fprintf(stderr, "nodelet-%s: --log-level: %v\n", spec.Component, err)
		return config.ExitCode
	}
	mem := ManageMemory(ctx, cfg, spec.Component)
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})).With("component", spec.Component)
	slog.SetDefault(log)
	klog.SetSlogLogger(log)
	for _, d := range cfg.Deprecations() {
		log.Warn("Deprecated configuration", "problem", d)
	}

	// The lock before anything slow: a second copy says so at once.
	lock, err := Lock(cfg.Node.StateDir, spec.Component)
	if err != nil {
		log.Error("Cannot start", "err", err)
		fmt.Fprintf(stderr, "nodelet-%s: cannot start: %v\n", spec.Component, err)
		if errors.Is(err, ErrAlreadyRunning) {
			return config.ExitCode
		}
		return 1
	}
	defer lock.Close()

	decl, ok := component.Get(spec.Component)
	if !ok || !decl.Process {
		fmt.Fprintf(stderr, "nodelet-%s: no such process in internal/component\n", spec.Component)
		return config.ExitCode
	}
	if err := CheckPermission(ctx, decl, cfg); err != nil {
		log.Error("Cannot start", "err", err)
		fmt.Fprintf(stderr, "nodelet-%s: cannot start: %v\n", spec.Component, err)
		return 1
	}
	conn, err := bus.Connect(bus.ConnectOptions{
		URL: bus.URLFor(cfg.Bus.Listen), Component: spec.Component, StateDir: cfg.Node.StateDir, Log: log,
	})
	if err != nil {
		log.Error("Cannot connect to the bus", "err", err)
		return 1
	}
	env := &Env{Config: cfg, Log: log, Bus: conn, Component: spec.Component, Started: time.Now().UTC(),
		ready: true, beat: make(chan struct{}, 1), metrics: spec.Metrics}

	// Wait for the first connection before saying READY, so the supervisor
	// starts dependents only when this daemon is on the bus.
	for !conn.NC.IsConnected() {
		select {
		case <-ctx.Done():
			conn.NC.Close()
			return 0
		case <-time.After(20 * time.Millisecond):
		}
	}
	go heartbeats(ctx, env)
	if err := ServeMetrics(ctx, cfg.Node.StateDir, spec.Component, env); err != nil {
		log.Warn("Metrics not served", "err", err)
	}
	_, _ = sddaemon.SdNotify(false, sddaemon.SdNotifyReady)
	log.Info("Started", append([]any{"version", version.Version, "pid", os.Getpid(), "bus", cfg.Bus.Listen}, mem.Args()...)...)

	runErr := spec.Run(ctx, env)
	_, _ = sddaemon.SdNotify(false, sddaemon.SdNotifyStopping)
	conn.Close()
	if runErr != nil && ctx.Err() == nil {
		log.Error("Stopped", "err", runErr)
		return 1
	}
	log.Info("Stopped")
	return 0
}

// heartbeats publishes the daemon's heartbeat every bus.heartbeatInterval
// (and at once when health or a mirror's outage changes) and pets the
// systemd watchdog.
func heartbeats(ctx context.Context, env *Env) {
	interval := env.Config.Bus.HeartbeatInterval
	if wd, err := sddaemon.SdWatchdogEnabled(false); err == nil && wd > 0 && wd/2 < interval {
		interval = wd / 2
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		ready, msg := env.Health()
		hb := schemas.Heartbeat{Component: env.Component, Version: version.Version, PID: os.Getpid(),
			StartTime: env.Started, Ready: ready, Message: msg}
		if err := env.Bus.PublishHeartbeat(hb); err != nil {
			env.Log.Debug("Heartbeat not sent", "err", err)
		}
		_, _ = sddaemon.SdNotify(false, sddaemon.SdNotifyWatchdog)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-env.beat:
		case <-env.Bus.OutagesChanged():
		}
	}
}

// CheckPermission makes sure the daemon can do its job before it starts:
// its own directory in the state dir is writable (a daemon running as its
// own user writes nowhere else there), its bus credential readable, and
// for daemons that talk to CRI (NeedsCRI in its declaration), the runtime
// answers. The error says what is missing and as which user.
func CheckPermission(ctx context.Context, c component.Component, cfg *config.Config) error {
	dir := cfg.Node.StateDir
	own := ComponentDir(dir, c.Name)
	if err := MkdirRun(dir, c.Name); err != nil {
		return fmt.Errorf("state dir %s (node.stateDir): %s cannot be created as uid %d: %w", dir, own, os.Geteuid(), err)
	}
	f, err := os.CreateTemp(own, ".write-check-*")
	if err != nil {
		return fmt.Errorf("state dir %s (node.stateDir): %s is not writable as uid %d: %w", dir, own, os.Geteuid(), err)
	}
	name := f.Name()
	_ = f.Close()
	_ = os.Remove(name)
	cred := bus.SeedPath(dir, c.Name)
	if _, err := os.ReadFile(cred); err != nil {
		return fmt.Errorf("bus credential %s is not readable (is nodelet-bus started with node.stateDir %s?): %w", cred, filepath.Clean(dir), err)
	}
	if c.NeedsCRI {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if _, err := cri.Check(cctx, cfg.Runtime.EndpointURL()); err != nil {
			return fmt.Errorf("%w (runtime.endpoint)", err)
		}
	}
	return nil
}
