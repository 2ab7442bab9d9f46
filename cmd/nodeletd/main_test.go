package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nodelet/nodelet/internal/component"
)

// nodeletd holds exactly the components of the declaration (internal/component): a new
// component cannot be forgotten here, nor a removed one linger.
func TestEveryComponentOnce(t *testing.T) {
	var want []string
	for _, c := range component.Declared.Processes() {
		want = append(want, c.Name)
		if c.Binary() != binaryPrefix+c.Name {
			t.Errorf("component %s runs as %s, not %s%s", c.Name, c.Binary(), binaryPrefix, c.Name)
		}
	}
	slices.Sort(want)
	if got := names(); !slices.Equal(got, want) {
		t.Fatalf("nodeletd's daemons %v, the declared processes %v", got, want)
	}
}

func TestRunChoosesTheDaemon(t *testing.T) {
	for _, tc := range []struct {
		name string
		argv []string
		code int
		out  string
	}{
		// --help of the daemon frame exits 0 and names the daemon's flags.
		{"by link name", []string{"/usr/local/bin/nodelet-prober", "--help"}, 0, "nodelet-prober"},
		{"by argument", []string{"nodeletd", "admission", "--help"}, 0, "nodelet-admission"},
		{"the bus", []string{"nodelet-bus", "--help"}, 0, "--config"},
		{"the supervisor", []string{"nodelet-supervisor", "--help"}, 0, "nodelet up"},
		{"a supervisor's bad flag", []string{"nodelet-supervisor", "--no-such-flag"}, 2, "no-such-flag"},
		{"unknown link name", []string{"nodelet-kubelet"}, 2, "usage: nodeletd"},
		{"unknown argument", []string{"nodeletd", "kubelet"}, 2, "daemons: admission, bus, devices, gc"},
		{"nothing", []string{"nodeletd"}, 2, "usage: nodeletd"},
		{"a daemon's bad flag", []string{"nodelet-gc", "--no-such-flag"}, 2, "no-such-flag"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			if code := run(tc.argv, &out); code != tc.code {
				t.Fatalf("run(%q) = %d, want %d; output %q", tc.argv, code, tc.code, out.String())
			}
			if !strings.Contains(out.String(), tc.out) {
				t.Fatalf("run(%q) said %q, want it to mention %q", tc.argv, out.String(), tc.out)
			}
		})
	}
}

func TestLink(t *testing.T) {
	dir := t.TempDir()
	if err := link(dir); err == nil {
		t.Fatal("link without nodeletd in the directory: no error")
	}
	if err := os.WriteFile(filepath.Join(dir, "nodeletd"), []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	// An older build's separate binary is replaced.
	if err := os.WriteFile(filepath.Join(dir, "nodelet-runtime"), []byte("old"), 0o755); err != nil {
		t.Fatal(err)
	}
	for range 2 { // idempotent
		if err := link(dir); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range names() {
		target, err := os.Readlink(filepath.Join(dir, binaryPrefix+n))
		if err != nil || target != "nodeletd" {
			t.Errorf("%s%s → %q, %v; want a link to nodeletd", binaryPrefix, n, target, err)
		}
	}
}
