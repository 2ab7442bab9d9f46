// Command nodeletd is every nodelet daemon in one executable. Each daemon
// still runs as a process of its own (its own unit, credential, lock and
// restarts); nodeletd picks the daemon from the name it is run as
// (nodelet-runtime, a link to nodeletd) or from its first argument
// (`nodeletd runtime --config …`); `nodelet up` runs it as the
// supervisor. One executable for all of them lets
// their processes share its pages in memory: most of a Go daemon's
// resident memory is its executable's text and tables, which separate
// binaries would each load again (see docs/performance.md).
//
// `nodeletd link DIR` makes the nodelet-<daemon> links in DIR, next to
// nodeletd; scripts/setup.sh, the image build and the tests' binaries do.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/busd"
	"github.com/nodelet/nodelet/internal/daemon"
	"github.com/nodelet/nodelet/internal/supervisor"
	"github.com/nodelet/nodelet/services/admission"
	"github.com/nodelet/nodelet/services/devices"
	"github.com/nodelet/nodelet/services/gc"
	"github.com/nodelet/nodelet/services/prober"
	"github.com/nodelet/nodelet/services/runtime"
	"github.com/nodelet/nodelet/services/server"
	"github.com/nodelet/nodelet/services/sources"
	"github.com/nodelet/nodelet/services/status"
	"github.com/prometheus/client_golang/prometheus"
)

// daemons maps each component's name to its main: the daemon frame
// (internal/daemon) around the package's Run, with its metrics when it has
// any.
var daemons = map[string]func(args []string, stderr io.Writer) int{
	"bus":       busd.Run,
	"sources":   frame(bus.Sources, sources.Run, nil),
	"admission": frame(bus.Admission, admission.Run, nil),
	"runtime":   frame(bus.Runtime, runtime.Run, nil),
	"prober":    frame(bus.Prober, prober.Run, prober.Gatherer()),
	"status":    frame(bus.Status, status.Run, nil),
	"server":    frame(bus.KubeletServer, server.Run, nil),
	"gc":        frame(bus.GC, gc.Run, gc.Gatherer()),
	"devices":   frame(bus.Devices, devices.Run, nil),
}

// tools are the other processes nodeletd runs: the supervisor (what
// `nodelet up` becomes).
var tools = map[string]func(args []string, stderr io.Writer) int{
	"supervisor": supervisor.Main,
}

func frame(component string, run func(context.Context, *daemon.Env) error, metrics prometheus.Gatherer) func([]string, io.Writer) int {
	s := daemon.Spec{Component: component, Run: run, Metrics: metrics}
	return func(args []string, stderr io.Writer) int { return daemon.Run(s, args, stderr) }
}

// binaryPrefix is what a daemon's executable name starts with.
const binaryPrefix = "nodelet-"

func main() {
	// Every package of every daemon has run its initialisers by now; only
	// what this process goes on to use should stay mapped.
	if err := daemon.DropExecutablePages(); err != nil {
		fmt.Fprintf(os.Stderr, "nodeletd: start-up pages stay mapped: %v\n", err)
	}
	os.Exit(run(os.Args, os.Stderr))
}

func run(argv []string, stderr io.Writer) int {
	if name, ok := strings.CutPrefix(filepath.Base(argv[0]), binaryPrefix); ok {
		if d, ok := lookup(name); ok {
			return d(argv[1:], stderr)
		}
	}
	if len(argv) > 1 {
		if d, ok := lookup(argv[1]); ok {
			return d(argv[2:], stderr)
		}
		if argv[1] == "link" && len(argv) == 3 {
			if err := link(argv[2]); err != nil {
				fmt.Fprintf(stderr, "nodeletd link: %v\n", err)
				return 1
			}
			return 0
		}
	}
	fmt.Fprintf(stderr, "usage: nodeletd DAEMON [flags], or run as %sDAEMON; nodeletd supervisor [flags] (nodelet up); nodeletd link DIR\ndaemons: %s\n",
		binaryPrefix, strings.Join(names(), ", "))
	return 2
}

func lookup(name string) (func([]string, io.Writer) int, bool) {
	if d, ok := daemons[name]; ok {
		return d, true
	}
	d, ok := tools[name]
	return d, ok
}

// names are the daemons' names (those with a nodelet-<name> link).
func names() []string {
	out := make([]string, 0, len(daemons))
	for n := range daemons {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// link makes dir/nodelet-<daemon> a relative symlink to nodeletd for every
// daemon, replacing whatever was there (an older build's binary).
func link(dir string) error {
	if _, err := os.Stat(filepath.Join(dir, "nodeletd")); err != nil {
		return err
	}
	for _, n := range names() {
		p := filepath.Join(dir, binaryPrefix+n)
		if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
			return err
		}
		if err := os.Symlink("nodeletd", p); err != nil {
			return err
		}
	}
	return nil
}
