// Package busd is nodelet-bus: it runs the embedded bus until SIGTERM.
package busd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	sddaemon "github.com/coreos/go-systemd/v22/daemon"
	"github.com/spf13/pflag"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/internal/daemon"
	"github.com/nodelet/nodelet/internal/version"
)

// Main runs nodelet-bus and exits.
func Main() { os.Exit(Run(os.Args[1:], os.Stderr)) }

// Run starts the bus, signals readiness (sd_notify READY=1 once every
// bucket and stream exists) and serves until SIGTERM or SIGINT.
func Run(args []string, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	flags := pflag.NewFlagSet("nodelet-bus", pflag.ContinueOnError)
	flags.SetOutput(stderr)
	loader := config.NewLoader(flags)
	if err := flags.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		return config.ExitCode
	}
	cfg, err := loader.Load()
	if err != nil {
		fmt.Fprintf(stderr, "nodelet-bus: %v\n", err)
		return config.ExitCode
	}
	mem := daemon.ManageMemory(ctx, cfg, bus.BusAdmin)
	log := slog.New(slog.NewTextHandler(stderr, nil)).With("component", bus.BusAdmin)
	slog.SetDefault(log)
	if err := os.MkdirAll(cfg.Node.StateDir, 0o755); err != nil {
		fmt.Fprintf(stderr, "nodelet-bus: cannot start: state dir %s (node.stateDir): %v\n", cfg.Node.StateDir, err)
		return 1
	}
	lock, err := daemon.Lock(cfg.Node.StateDir, bus.BusAdmin)
	if err != nil {
		fmt.Fprintf(stderr, "nodelet-bus: cannot start: %v\n", err)
		if errors.Is(err, daemon.ErrAlreadyRunning) {
			return config.ExitCode
		}
		return 1
	}
	defer lock.Close()
	sz := cfg.Bus.Sizes()
	srv, err := bus.StartServer(ctx, bus.ServerOptions{
		StateDir: cfg.Node.StateDir, Listen: cfg.Bus.Listen, MonitorListen: cfg.Bus.MonitorListen, Log: log,
		Limits: bus.Limits{MaxStore: sz.MaxStore, BucketMaxBytes: sz.BucketMaxBytes, MaxValueSize: int32(sz.MaxValueSize),
			EventsMaxBytes: sz.EventsMaxBytes, EventsMaxAge: cfg.Bus.EventsMaxAge, DeletedKeyRetention: cfg.Bus.DeletedKeyRetention},
	})
	if err != nil {
		log.Error("Cannot start the bus", "err", err)
		fmt.Fprintf(stderr, "nodelet-bus: cannot start: %v\n", err)
		return 1
	}
	// No metrics of its own (the monitor endpoint has them): the socket
	// serves the Go runtime's profiles.
	if err := daemon.ServeMetrics(ctx, cfg.Node.StateDir, bus.BusAdmin, nil); err != nil {
		log.Warn("Metrics not served", "err", err)
	}
	_, _ = sddaemon.SdNotify(false, sddaemon.SdNotifyReady)
	log.Info("Bus ready", append([]any{"version", version.Version, "listen", srv.Addr(), "store", cfg.Node.StateDir + "/bus"}, mem.Args()...)...)

	unhealthy := make(chan error, 1)
	go watchdog(ctx, cfg.Bus.HeartbeatInterval, storeHealth(srv, log), unhealthy)
	code := 0
	select {
	case <-ctx.Done():
	case err := <-unhealthy:
		// A bus whose JetStream is off keeps accepting connections while
		// every bucket is dead: exit, so systemd or `nodelet up` restarts it
		// (nats-server only turns JetStream on again at start).
		log.Error("Bus unhealthy, exiting to be restarted", "err", err)
		fmt.Fprintf(stderr, "nodelet-bus: unhealthy: %v\n", err)
		code = 1
	}
	_, _ = sddaemon.SdNotify(false, sddaemon.SdNotifyStopping)
	srv.Shutdown()
	log.Info("Bus stopped")
	return code
}

// storeHealth is srv.Healthy, and once a stream's store has failed a write
// (nats-server then refuses that stream's writes until it starts again:
// the filesystem full, typically) it waits for room on the store's
// filesystem and then fails, so that the bus exits and is restarted
// (systemd, `nodelet up`) with every stream loaded again. Meanwhile the
// bus stays up: reads, heartbeats and the other streams go on, and each
// refused write is logged by its writer with its bucket. Exiting at once
// instead would only restart into the same full disk, over and over.
func storeHealth(srv *bus.Server, log *slog.Logger) func() error {
	waiting := false
	return func() error {
		if err := srv.Healthy(); err != nil {
			return err
		}
		werr := srv.StoreWriteError()
		if werr == nil {
			return nil
		}
		free, need, err := storeRoom(srv.StoreDir())
		if err == nil && free >= need {
			return fmt.Errorf("a stream's store failed a write (%w); %d bytes free again on %s: restarting to load it again", werr, free, srv.StoreDir())
		}
		if !waiting {
			waiting = true
			log.Error("Bus store refuses writes, restarting once its filesystem has room", "store", srv.StoreDir(),
				"freeBytes", free, "needBytes", need, "err", werr)
		}
		return nil
	}
}

// storeRoom says how many bytes are free for the store in dir and how many
// it waits for: 16 MiB, or 2% of a smaller filesystem (a few blocks of
// the busiest buckets).
func storeRoom(dir string) (free, need int64, err error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, 0, err
	}
	free = int64(st.Bavail) * int64(st.Bsize)
	need = min(16<<20, int64(st.Blocks)*int64(st.Bsize)/50)
	return free, need, nil
}

// watchdog pets systemd's watchdog while healthy() passes; on the first
// failure it stops petting and reports it.
func watchdog(ctx context.Context, interval time.Duration, healthy func() error, unhealthy chan<- error) {
	if wd, err := sddaemon.SdWatchdogEnabled(false); err == nil && wd > 0 {
		interval = wd / 2
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if err := healthy(); err != nil {
			unhealthy <- err
			return
		}
		_, _ = sddaemon.SdNotify(false, sddaemon.SdNotifyWatchdog)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
