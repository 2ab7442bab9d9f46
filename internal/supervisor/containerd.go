package supervisor

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/nodelet/nodelet/internal/component"
	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/internal/containerd"
)

// managedContainerd is the private containerd for the node's configuration.
// Its state dir is the socket's, and only setup.sh's socket
// (/run/nodelet/containerd/containerd.sock) writes setup.sh's config file;
// any other socket renders its config into its own state dir, so two
// configurations never overwrite each other's config.toml. Each major
// keeps the root it has always had (2.x, the default, its own; 1.6 the one
// nodelet used before): moving it would hide the running pods from the new
// containerd and restart them, so a node set up on 1.6 keeps
// runtime.containerdVersion 1 until it is drained. Two containerds on that
// root are refused instead (rootHeld, here and in scripts/setup.sh): the
// second would wait on the root's lock, fail, and on exit remove the
// socket it made.
func managedContainerd(cfg *config.Config) containerd.Config {
	socket := cfg.Runtime.SocketPath()
	binDir := containerd.DefaultCNIBinDir
	if len(cfg.Runtime.CNIBinDirs) > 0 {
		binDir = cfg.Runtime.CNIBinDirs[0]
	}
	c := containerd.Config{
		// Each major keeps its own root (containerd.DefaultRoot2 for 2.x):
		// the two never share content or metadata.
		Root:         containerd.DefaultRoot,
		Major:        cfg.Runtime.ContainerdVersion,
		Binary:       cfg.Runtime.ContainerdBinary,
		Socket:       socket,
		State:        filepath.Dir(socket),
		CNIConfDir:   cfg.Runtime.CNIConfDir,
		CNIBinDir:    binDir,
		SandboxImage: cfg.Runtime.SandboxImage,
		// runc's driver is the node's (runtime.cgroupDriver).
		SystemdCgroup: cfg.Runtime.CgroupDriver == "systemd",
	}
	if c.Major >= 2 {
		c.Root = containerd.DefaultRoot2
	}
	if socket == filepath.Join(containerd.DefaultState, "containerd.sock") {
		c.ConfigFile = cfg.Runtime.ContainerdConfig
	}
	// With supervisor.componentUsers the daemons of their own users that
	// talk to CRI reach the socket through its group.
	if cfg.Supervisor.ComponentUsers {
		if gid, err := containerd.CRIGroupGID(component.CRIGroup); err == nil {
			c.GID = gid
		}
	}
	return c
}

// rootHeld tells whether a containerd holds root's metadata lock, and who.
func rootHeld(root string) (string, bool) {
	meta := filepath.Join(root, "io.containerd.metadata.v1.bolt", "meta.db")
	f, err := os.Open(meta)
	if err != nil {
		return "", false
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err != nil {
		return holderOf(meta), true
	}
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return "", false
}

// holderOf names the processes that have path open, from /proc.
func holderOf(path string) string {
	var pids []string
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		fds, err := os.ReadDir(filepath.Join("/proc", p.Name(), "fd"))
		if err != nil {
			continue
		}
		for _, fd := range fds {
			if l, err := os.Readlink(filepath.Join("/proc", p.Name(), "fd", fd.Name())); err == nil && l == path {
				pids = append(pids, p.Name())
				break
			}
		}
	}
	if len(pids) == 0 {
		return "pid unknown"
	}
	return "pid " + strings.Join(pids, ", ")
}

// withContainerd makes the supervisor start a private containerd first and
// stop it last (runtime.manageContainerd). Its config is rendered from the
// node's configuration, so socket, CNI dirs and pause image always agree
// with what the daemons use. A containerd already answering on the socket
// is used as it is. Stopping containerd leaves the pods running in their
// shims.
func withContainerd(o *Options, cfg *config.Config) {
	var proc *containerd.Process
	socket := cfg.Runtime.SocketPath()
	o.BeforeStart = func(ctx context.Context) error {
		if c, err := net.DialTimeout("unix", socket, time.Second); err == nil {
			c.Close()
			fmt.Fprintf(os.Stderr, "nodelet up: containerd already answers on %s; using it\n", socket)
			return nil
		}
		ccfg := managedContainerd(cfg)
		if holder, held := rootHeld(ccfg.Root); held {
			return fmt.Errorf("runtime.manageContainerd: a containerd (%s) already uses %s but does not answer on %s (runtime.endpoint)",
				holder, ccfg.Root, socket)
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
