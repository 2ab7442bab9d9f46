package supervisor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/nodelet/nodelet/internal/component"
	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/internal/daemon"
)

// Main is `nodelet up`: it loads the node's configuration from args (the
// config file and overrides as flags), starts the managed containerd when
// asked, and supervises the bus and the daemons until SIGTERM or SIGINT.
// It runs in nodeletd (as nodelet-supervisor), which `nodelet up` becomes,
// so that the supervisor shares the daemons' executable in memory. It
// returns the process's exit code.
func Main(args []string, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	fail := func(code int, err error) int {
		fmt.Fprintf(stderr, "nodelet up: %v\n", err)
		return code
	}
	flags := pflag.NewFlagSet("nodelet up", pflag.ContinueOnError)
	flags.SetOutput(stderr)
	loader := config.NewLoader(flags)
	if err := flags.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		return fail(config.ExitCode, err)
	}
	cfg, err := loader.Load()
	if err != nil {
		return fail(config.ExitCode, err)
	}
	daemon.ManageMemory(ctx, cfg, component.Supervisor)
	configPath, _ := flags.GetString("config")
	if configPath != "" {
		if configPath, err = filepath.Abs(configPath); err != nil {
			return fail(1, err)
		}
	}
	binDir := cfg.Supervisor.BinDir
	if binDir == "" {
		exe, err := os.Executable()
		if err != nil {
			return fail(1, err)
		}
		binDir = filepath.Dir(exe)
	}
	// Flags given to `nodelet up` reach the children through the
	// environment, where the config loader picks them up too.
	var extraEnv []string
	flags.Visit(func(f *pflag.Flag) {
		if f.Name != "config" {
			extraEnv = append(extraEnv, config.EnvName(f.Name)+"="+f.Value.String())
		}
	})
	opts := Options{Config: cfg, ConfigPath: configPath, BinDir: binDir, Out: stderr, ExtraEnv: extraEnv}
	if cfg.Runtime.ManageContainerd {
		withContainerd(&opts, cfg)
	}
	s, err := New(opts)
	if err != nil {
		return fail(1, err)
	}
	if err := s.Run(ctx); err != nil {
		return fail(1, err)
	}
	return 0
}
