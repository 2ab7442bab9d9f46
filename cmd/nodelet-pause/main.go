// Command nodelet-pause is the pause process of every nodelet pod sandbox.
//
// It is PID 1 of the pod: it holds the sandbox's namespaces open by simply
// existing, reaps any zombie that is reparented to it, and exits 0 when asked
// to stop (SIGTERM or SIGINT). It is built static (CGO_ENABLED=0) and packed
// into the image nodelet.local/pause:3.10 by internal/images (bump
// its recipe constant when this file changes, or cached images stay old).
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	// Install the handlers first: a SIGTERM that arrives while we start must
	// still end the process cleanly.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	// The kernel spares a namespace's init the signals it has no handler
	// for, but the Go runtime has a handler for all of them, and would exit
	// on SIGHUP or SIGQUIT from any process of a pod sharing its PID
	// namespace. A C pause ignores them; so do we.
	signal.Ignore(syscall.SIGHUP, syscall.SIGQUIT)
	for sig := range sigs {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		reap()
	}
}

// reap collects every exited child. Signals coalesce, so one SIGCHLD may
// stand for several children: loop until wait4 reports none left.
func reap() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if pid <= 0 || err != nil {
			return
		}
	}
}
