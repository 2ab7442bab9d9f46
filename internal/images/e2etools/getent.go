package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"
)

// The files getent reads (variables for tests).
var (
	hostsFile  = "/etc/hosts"
	passwdFile = "/etc/passwd"
	groupFile  = "/etc/group"
)

// resolver answers what /etc/hosts does not (a variable for tests).
var resolver = net.DefaultResolver

// getent answers `getent hosts NAME` as glibc's does with "hosts: files
// dns" (the DNS specs' /etc/hosts probe: `test -n "$(getent hosts NAME)"`),
// and `getent passwd|group [KEY]` from the files. Exit 2 when a key is not
// found, as glibc's.
func getent(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "Usage: getent hosts|passwd|group [KEY...]")
		return 1
	}
	db, keys := args[0], args[1:]
	switch db {
	case "hosts", "ahosts", "ahostsv4", "ahostsv6":
		if len(keys) == 0 {
			return dumpFile(hostsFile, stdout)
		}
		code := 0
		for _, k := range keys {
			if !lookupHost(k, stdout) {
				code = 2
			}
		}
		return code
	case "passwd", "group":
		file := passwdFile
		if db == "group" {
			file = groupFile
		}
		if len(keys) == 0 {
			return dumpFile(file, stdout)
		}
		code := 0
		for _, k := range keys {
			if !lookupColonFile(file, k, stdout) {
				code = 2
			}
		}
		return code
	}
	fmt.Fprintf(stderr, "Unknown database: %s\n", db)
	return 1
}

// lookupHost prints one line for each address of name: from /etc/hosts when
// it names it (IPv6 first, as glibc's getent asks AF_INET6 before
// AF_INET), else from DNS through the resolver's search list.
func lookupHost(name string, w io.Writer) bool {
	if ip := net.ParseIP(name); ip != nil {
		return reverseHost(ip, w)
	}
	var v4, v6 []string
	for _, f := range hostsLines() {
		for _, n := range f[1:] {
			if !strings.EqualFold(strings.TrimSuffix(n, "."), strings.TrimSuffix(name, ".")) {
				continue
			}
			line := fmt.Sprintf("%-15s %s", f[0], strings.Join(f[1:], " "))
			if ip := net.ParseIP(f[0]); ip != nil && ip.To4() == nil {
				v6 = append(v6, line)
			} else {
				v4 = append(v4, line)
			}
			break
		}
	}
	lines := v6
	if len(lines) == 0 {
		lines = v4
	}
	if len(lines) == 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		addrs, err := resolver.LookupIPAddr(ctx, name)
		if err != nil {
			return false
		}
		for _, six := range []bool{true, false} {
			for _, a := range addrs {
				if (a.IP.To4() == nil) == six {
					lines = append(lines, fmt.Sprintf("%-15s %s", a.IP, name))
				}
			}
			if len(lines) > 0 {
				break
			}
		}
	}
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
	return len(lines) > 0
}

func reverseHost(ip net.IP, w io.Writer) bool {
	for _, f := range hostsLines() {
		if a := net.ParseIP(f[0]); a != nil && a.Equal(ip) {
			fmt.Fprintf(w, "%-15s %s\n", f[0], strings.Join(f[1:], " "))
			return true
		}
	}
	names, err := resolver.LookupAddr(context.Background(), ip.String())
	if err != nil || len(names) == 0 {
		return false
	}
	fmt.Fprintf(w, "%-15s %s\n", ip, strings.Join(names, " "))
	return true
}

// hostsLines are /etc/hosts's entries, each an address and its names.
func hostsLines() [][]string {
	f, err := os.Open(hostsFile)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out [][]string
	s := bufio.NewScanner(f)
	for s.Scan() {
		line, _, _ := strings.Cut(s.Text(), "#")
		if fields := strings.Fields(line); len(fields) >= 2 {
			out = append(out, fields)
		}
	}
	return out
}

// lookupColonFile prints the line of passwd or group whose name or id is key.
func lookupColonFile(file, key string, w io.Writer) bool {
	f, err := os.Open(file)
	if err != nil {
		return false
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Split(s.Text(), ":")
		if len(fields) >= 3 && (fields[0] == key || fields[2] == key) {
			fmt.Fprintln(w, s.Text())
			return true
		}
	}
	return false
}

func dumpFile(file string, w io.Writer) int {
	b, err := os.ReadFile(file)
	if err != nil {
		return 2
	}
	_, _ = w.Write(b)
	return 0
}
