package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/nodelet/nodelet/services/common/config"
	"github.com/nodelet/nodelet/services/common/containerd"
	"github.com/nodelet/nodelet/services/supervisor"
)

// withContainerd makes the supervisor start a private containerd first and
// stop it last (runtime.manageContainerd). Its config is rendered from the
// node's configuration, so socket, CNI dirs and pause image always agree
// with what the daemons use. A containerd already answering on the socket
// is used as it is. Stopping containerd leaves the pods running in their
// shims.
func withContainerd(o *supervisor.Options, cfg *config.Config) {
	var proc *containerd.Process
	socket := cfg.Runtime.SocketPath()
	o.BeforeStart = func(ctx context.Context) error {
		if c, err := net.DialTimeout("unix", socket, time.Second); err == nil {
			c.Close()
			fmt.Fprintf(os.Stderr, "nodelet up: containerd already answers on %s; using it\n", socket)
			return nil
		}
		binDir := "/usr/lib/cni"
		if len(cfg.Runtime.CNIBinDirs) > 0 {
			binDir = cfg.Runtime.CNIBinDirs[0]
		}
		ccfg := containerd.Config{
			Socket:       socket,
			State:        filepath.Dir(socket),
			CNIConfDir:   cfg.Runtime.CNIConfDir,
			CNIBinDir:    binDir,
			SandboxImage: cfg.Runtime.SandboxImage,
			ConfigFile:   cfg.Runtime.ContainerdConfig,
		}
		start := time.Now()
		p, err := containerd.Start(ctx, ccfg, "")
		if err != nil {
			return fmt.Errorf("runtime.manageContainerd: %w", err)
		}
		proc = p
		fmt.Fprintf(os.Stderr, "nodelet up: containerd started pid=%d socket=%s in %s\n", p.Pid(), socket, time.Since(start).Round(time.Millisecond))
		return nil
	}
	o.AfterStop = func() {
		if proc == nil {
			return
		}
		if err := proc.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "nodelet up: containerd: %v\n", err)
			return
		}
		fmt.Fprintln(os.Stderr, "nodelet up: containerd stopped (pods keep running in their shims)")
	}
}
