// Command e2etools stands in, inside the conformance images that
// internal/images builds, for the network tools the Kubernetes e2e specs run
// in agnhost and glibc-dns-testing containers: curl, nc (netcat-openbsd's
// flags), dig and getent. The real images get them from Alpine and Debian
// packages (curl, netcat-openbsd, bind-tools or dnsutils, the libc's getent);
// Debian's static busybox has no such tools (its nc has no -u, its wget
// crashes on -T), and no static builds of the real ones exist on the
// machine.
//
// One static binary (CGO_ENABLED=0, so the Go resolver reads
// /etc/resolv.conf and /etc/hosts itself); the name it is run by picks the
// tool, as with busybox: /usr/bin/curl is a link to it. `e2etools TOOL ARGS`
// works too. Each tool does what the specs' commands ask of it (see each
// file), not everything the real one does.
package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// tool runs one tool with its arguments (without the tool's name) and returns
// the exit status.
type tool func(args []string, stdin io.Reader, stdout, stderr io.Writer) int

var tools = map[string]tool{
	"curl":           curl,
	"hostpathplugin": hostpathplugin,
	"nc":             nc,
	"dig":            dig,
	"getent":         getent,
}

// names lists the tools, for the usage message.
func names() []string {
	var n []string
	for k := range tools {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}

func main() {
	os.Exit(run(os.Args, os.Stdin, os.Stdout, os.Stderr))
}

func run(argv []string, stdin io.Reader, stdout, stderr io.Writer) int {
	name, args := filepath.Base(argv[0]), argv[1:]
	if _, ok := tools[name]; !ok && len(args) > 0 {
		name, args = args[0], args[1:]
	}
	t, ok := tools[name]
	if !ok {
		fmt.Fprintf(stderr, "e2etools: run as (or with a first argument of) one of: %s\n", strings.Join(names(), ", "))
		return 2
	}
	return t(args, stdin, stdout, stderr)
}
