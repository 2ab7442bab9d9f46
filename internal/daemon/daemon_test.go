package daemon

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/component"
	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/internal/testenv"
)

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "nodelet.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestBadConfigExitsTwoNamingTheKey(t *testing.T) {
	spec := Spec{Component: bus.Sources, Run: func(ctx context.Context, env *Env) error { return errors.New("must not run") }}
	for _, tc := range []struct{ name, body, want string }{
		{"unknown key", "sources:\n  staticPodPth: /x\n", "sources.staticPodPth: unknown key"},
		{"bad duration", "sources:\n  fileCheckFrequency: soon\n", "sources.fileCheckFrequency: invalid duration"},
		{"bad value", "bus:\n  listen: 10.1.2.3:4250\n", "bus.listen"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			code := Run(spec, []string{"--config", writeConfig(t, tc.body)}, &stderr)
			if code != config.ExitCode || !strings.Contains(stderr.String(), tc.want) {
				t.Fatalf("exit %d, stderr %q; want exit 2 naming %q", code, stderr.String(), tc.want)
			}
		})
	}
}

// The real binary exits 2 too (main is os.Exit(Run(...))).
func TestBinaryExitsTwoOnBadConfig(t *testing.T) {
	bin := testenv.MustDaemonBinary(t, "admission")
	cmd := exec.Command(bin, "--config", writeConfig(t, "gc:\n  minAge: 3 fortnights\n"))
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != config.ExitCode || !strings.Contains(string(out), "gc.minAge") {
		t.Fatalf("err %v, output %q; want exit 2 naming gc.minAge", err, out)
	}
}

func TestCheckPermission(t *testing.T) {
	dir := t.TempDir()
	if _, err := bus.EnsureCredentials(dir); err != nil {
		t.Fatal(err)
	}
	notADir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notADir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	noCreds := t.TempDir()
	for _, tc := range []struct {
		name     string
		stateDir string
		endpoint string
		needsCRI bool
		want     string
	}{
		{"ok without CRI", dir, "", false, ""},
		{"state dir not a dir", notADir, "", false, "node.stateDir"},
		{"no credential", noCreds, "", false, "bus credential"},
		{"runtime socket missing", dir, "unix:///nonexistent/containerd.sock", true, "runtime.endpoint"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config.Defaults()
			cfg.Node.StateDir = tc.stateDir
			if tc.endpoint != "" {
				cfg.Runtime.Endpoint = tc.endpoint
			}
			err := CheckPermission(context.Background(), component.Component{Name: bus.Runtime, NeedsCRI: tc.needsCRI}, cfg)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to name %q", err, tc.want)
			}
		})
	}
}

// TestDeprecationLoggedOnce: a deprecated key is said once, at start,
// naming the key to use instead.
func TestDeprecationLoggedOnce(t *testing.T) {
	spec := Spec{Component: bus.Sources, Run: func(ctx context.Context, env *Env) error { return nil }}
	// A state dir without bus credentials: the daemon stops at its
	// permission check, after the configuration is read and logged.
	body := "node:\n  stateDir: " + t.TempDir() + "\nsources:\n  kubeconfig: /etc/nodelet/node.kubeconfig\n"
	var stderr bytes.Buffer
	Run(spec, []string{"--config", writeConfig(t, body)}, &stderr)
	if n := strings.Count(stderr.String(), "sources.kubeconfig is deprecated: use node.kubeconfig"); n != 1 {
		t.Fatalf("deprecation said %d times, want once:\n%s", n, stderr.String())
	}
}
