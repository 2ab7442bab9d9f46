// Command nodelet is the operator's tool: `nodelet up` runs the node's
// daemons under a supervisor, `nodelet tap` watches the bus, and the other
// subcommands give read-only views of the node.
package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/spf13/pflag"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/config"
)

type command struct {
	name, usage string
	run         func(args []string) int
}

var commands []command

// linkNames are the commands nodelet runs when its executable is called
// by that name (a link): the command line is all flags.
var linkNames = map[string]func(args []string) int{}

func main() {
	if run, ok := linkNames[filepath.Base(os.Args[0])]; ok {
		os.Exit(run(os.Args[1:]))
	}
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	for _, c := range commands {
		if c.name == os.Args[1] {
			os.Exit(c.run(os.Args[2:]))
		}
	}
	if os.Args[1] == "help" || os.Args[1] == "-h" || os.Args[1] == "--help" {
		usage()
		os.Exit(0)
	}
	fmt.Fprintf(os.Stderr, "nodelet: unknown command %q\n", os.Args[1])
	usage()
	os.Exit(2)
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: nodelet <command> [flags]\n\ncommands:")
	for _, c := range commands {
		fmt.Fprintf(os.Stderr, "  %-14s %s\n", c.name, c.usage)
	}
}

// invocation is one run of a subcommand: its flag set, with --config and
// every configuration override registered, so each subcommand reads the
// node configuration the same way.
type invocation struct {
	name   string
	Flags  *pflag.FlagSet
	loader *config.Loader
}

func newInvocation(name string) *invocation {
	flags := pflag.NewFlagSet("nodelet "+name, pflag.ContinueOnError)
	return &invocation{name: name, Flags: flags, loader: config.NewLoader(flags)}
}

// parse parses args; when ok is false the subcommand exits with code
// (0 for --help, 2 for bad flags).
func (in *invocation) parse(args []string) (code int, ok bool) {
	if err := in.Flags.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0, false
		}
		return config.ExitCode, false
	}
	return 0, true
}

// load loads the configuration; a bad one is reported with exit code 2.
func (in *invocation) load() (*config.Config, int, bool) {
	cfg, err := in.loader.Load()
	if err != nil {
		return nil, in.fail(config.ExitCode, err), false
	}
	return cfg, 0, true
}

// fail prints err as the subcommand's and returns code.
func (in *invocation) fail(code int, err error) int {
	fmt.Fprintf(os.Stderr, "nodelet %s: %v\n", in.name, err)
	return code
}

// connectTap connects with the read-only tap credential, failing at once
// when the bus is not there (a one-shot tool should say so, not wait).
func connectTap(cfg *config.Config, level slog.Level, retry bool) (*bus.Conn, error) {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	return bus.Connect(bus.ConnectOptions{URL: bus.URLFor(cfg.Bus.Listen), Component: bus.Tap,
		StateDir: cfg.Node.StateDir, Log: log, NoRetry: !retry})
}
