package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/nodelet/nodelet/services/common/config"
	"github.com/nodelet/nodelet/services/supervisor"
)

func init() {
	commands = append(commands, command{"up", "run the node: bus first, then every daemon in dependency order", runUp})
}

func runUp(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	in := newInvocation("up")
	flags := in.Flags
	if code, ok := in.parse(args); !ok {
		return code
	}
	cfg, code, ok := in.load()
	if !ok {
		return code
	}
	configPath, _ := flags.GetString("config")
	if configPath != "" {
		abs, err := filepath.Abs(configPath)
		if err != nil {
			return in.fail(1, err)
		}
		configPath = abs
	}
	binDir := cfg.Supervisor.BinDir
	if binDir == "" {
		exe, err := os.Executable()
		if err != nil {
			fmt.Fprintf(os.Stderr, "nodelet up: %v\n", err)
			return 1
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
	opts := supervisor.Options{Config: cfg, ConfigPath: configPath, BinDir: binDir, Out: os.Stderr, ExtraEnv: extraEnv}
	if cfg.Runtime.ManageContainerd {
		withContainerd(&opts, cfg)
	}
	s, err := supervisor.New(opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "nodelet up: %v\n", err)
		return 1
	}
	if err := s.Run(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "nodelet up: %v\n", err)
		return 1
	}
	return 0
}
