// Command nodelet is the operator's tool: `nodelet up` runs the node's
// daemons under a supervisor, `nodelet tap` watches the bus, and the other
// subcommands give read-only views of the node.
package main

import (
	"fmt"
	"os"
)

type command struct {
	name, usage string
	run         func(args []string) int
}

var commands []command

func main() {
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
