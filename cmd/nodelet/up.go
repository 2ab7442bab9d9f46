package main

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

func init() {
	commands = append(commands, command{"up", "run the node: bus first, then every daemon in dependency order", runUp})
}

// runUp becomes the supervisor: nodeletd (next to this executable) run as
// nodelet-supervisor with the same arguments. The supervisor lives in the
// daemons' executable so that its process shares their pages in memory,
// and the operator's tool stays small.
func runUp(args []string) int {
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintf(os.Stderr, "nodelet up: %v\n", err)
		return 1
	}
	nodeletd := filepath.Join(filepath.Dir(exe), "nodeletd")
	argv := append([]string{"nodelet-supervisor"}, args...)
	err = syscall.Exec(nodeletd, argv, os.Environ())
	fmt.Fprintf(os.Stderr, "nodelet up: cannot run %s (scripts/setup.sh builds it beside nodelet): %v\n", nodeletd, err)
	return 1
}
