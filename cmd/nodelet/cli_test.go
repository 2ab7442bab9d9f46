package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/bus/bustest"
	"github.com/nodelet/nodelet/internal/testenv"
	"github.com/nodelet/nodelet/schemas"
)

// nodeletBin is the real nodelet binary, built once for these tests.
var nodeletBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "nodelet-cli-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	nodeletBin = filepath.Join(dir, "nodelet")
	if err := testenv.BuildBinaries(dir, "./cmd/nodelet"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// configFor writes a node configuration that points at b.
func configFor(t *testing.T, b *bustest.Bus) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "nodelet.yaml")
	cfg := fmt.Sprintf("node:\n  stateDir: %s\nbus:\n  listen: %s\n  heartbeatInterval: 1s\n", b.StateDir, b.Server.Addr())
	if err := os.WriteFile(p, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// run runs the nodelet binary and returns stdout, stderr and exit code.
func run(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, nodeletBin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("nodelet %v: %v", args, err)
	}
	return stdout.String(), stderr.String(), code
}

// TestExplainBinary runs `nodelet explain` against a real bus on which
// sources and admission (each with its own credential) stored a pod and
// rejected it: the last line names admission's reason.
func TestExplainBinary(t *testing.T) {
	b := bustest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	uid := "9c4f0e2a-0000-4000-8000-00000000000a"
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid), Namespace: "default", Name: "hungry"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "nodelet.local/busybox:1.35"}}}}
	if _, err := b.Connect(bus.Sources).Put(ctx, bus.BucketDesired, uid, schemas.PodDesired{Pod: pod, Source: schemas.SourceFile}); err != nil {
		t.Fatal(err)
	}
	adm := b.Connect(bus.Admission)
	v := schemas.AdmissionVerdict{UID: uid, Namespace: "default", Name: "hungry", Reason: "OutOfmemory",
		Message: "Node didn't have enough resource: memory, requested: 68719476736, used: 0, capacity: 8589934592"}
	if _, err := adm.Put(ctx, bus.BucketAdmission, uid, v); err != nil {
		t.Fatal(err)
	}
	adm.Emit(schemas.Event{Object: corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: "hungry", UID: types.UID(uid)},
		Type: corev1.EventTypeWarning, Reason: v.Reason, Message: v.Message})
	if err := adm.FlushEvents(ctx); err != nil {
		t.Fatal(err)
	}
	cfg := configFor(t, b)

	out, errOut, code := run(t, "explain", "default/hungry", "--config", cfg)
	if code != 0 {
		t.Fatalf("explain exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	last := lines[len(lines)-1]
	if !strings.HasPrefix(last, "now") || !strings.Contains(last, "rejected by admission: OutOfmemory: Node didn't have enough resource: memory") {
		t.Errorf("last line %q\n%s", last, out)
	}
	if !strings.Contains(out, "event OutOfmemory") || !strings.Contains(out, "desired, from the file source") {
		t.Errorf("story lacks the desired state or the event:\n%s", out)
	}

	_, errOut, code = run(t, "explain", "nosuch", "--config", cfg)
	if code != 1 || !strings.Contains(errOut, `no pod "nosuch"`) {
		t.Errorf("unknown pod: exit %d, stderr %q", code, errOut)
	}
	if _, _, code = run(t, "explain", "--config", cfg); code != 2 {
		t.Errorf("no pod named: exit %d, want 2", code)
	}
}

// TestHealthBinary: the bus is healthy while it serves; a daemon is healthy
// while its heartbeats arrive and say ready; silence or "not ready" is not.
func TestHealthBinary(t *testing.T) {
	b := bustest.Start(t)
	cfg := configFor(t, b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	beat := func(c *bus.Conn, ready bool, msg string) {
		for ctx.Err() == nil {
			_ = c.PublishHeartbeat(schemas.Heartbeat{Component: c.Component, PID: 42, StartTime: time.Now().Add(-time.Minute), Ready: ready, Message: msg})
			time.Sleep(100 * time.Millisecond)
		}
	}
	go beat(b.Connect(bus.Runtime), true, "")
	go beat(b.Connect(bus.Prober), false, "runtime not ready")

	if out, errOut, code := run(t, "health", "bus", "--config", cfg); code != 0 || !strings.Contains(out, "bus: up") {
		t.Errorf("health bus: exit %d %q %q", code, out, errOut)
	}
	if out, errOut, code := run(t, "health", "runtime", "--config", cfg); code != 0 || !strings.Contains(out, "ready (pid 42") {
		t.Errorf("health runtime: exit %d %q %q", code, out, errOut)
	}
	if _, errOut, code := run(t, "health", "prober", "--config", cfg); code != 1 || !strings.Contains(errOut, "not ready: runtime not ready") {
		t.Errorf("health prober (not ready): exit %d %q", code, errOut)
	}
	if _, errOut, code := run(t, "health", "gc", "--timeout", "1s", "--config", cfg); code != 1 || !strings.Contains(errOut, "no heartbeat") {
		t.Errorf("health gc (silent): exit %d %q", code, errOut)
	}
	if _, _, code := run(t, "health", "nosuch", "--config", cfg); code != 2 {
		t.Errorf("health nosuch: exit %d, want 2", code)
	}
	b.Server.Shutdown()
	if _, errOut, code := run(t, "health", "bus", "--config", cfg); code != 1 || !strings.Contains(errOut, "bus unreachable") {
		t.Errorf("health bus after shutdown: exit %d %q", code, errOut)
	}
}

// TestTapSinceBinary: `nodelet tap --since` shows an event stored before
// it started, then follows live; its output has no colour when stdout is
// not a terminal.
func TestTapSinceBinary(t *testing.T) {
	b := bustest.Start(t)
	cfg := configFor(t, b)
	rt := b.Connect(bus.Runtime)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ev := func(reason string) {
		rt.Emit(schemas.Event{Object: corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: "web", UID: "uid-tap"},
			Type: corev1.EventTypeWarning, Reason: reason, Message: "container app"})
		if err := rt.FlushEvents(ctx); err != nil {
			t.Fatal(err)
		}
	}
	ev("BeforeTap")

	cmd := exec.Command(nodeletBin, "tap", "--since", "5m", "--config", cfg)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var seen []string
	waitLine := func(what string) {
		t.Helper()
		timeout := time.After(time.Minute)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("tap ended before %q: %s\n%s", what, strings.Join(seen, "\n"), stderr.String())
				}
				seen = append(seen, l)
				if strings.Contains(l, what) {
					return
				}
			case <-timeout:
				t.Fatalf("no %q from tap:\n%s\n%s", what, strings.Join(seen, "\n"), stderr.String())
			}
		}
	}
	waitLine("BeforeTap: container app")
	waitLine("live from here")
	ev("WhileTapping")
	waitLine("WhileTapping: container app")
	_ = cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Errorf("tap after SIGTERM: %v\n%s", err, stderr.String())
	}
	if all := strings.Join(seen, "\n"); strings.Contains(all, "\x1b[") {
		t.Errorf("colour escapes on a pipe:\n%q", all)
	}
}

// TestGeneratorsCheck: the checked-in units and compose file are what the
// commands render; --check notices an edited copy.
func TestGeneratorsCheck(t *testing.T) {
	root := filepath.Join("..", "..")
	if _, errOut, code := run(t, "systemd-units", "--check", "--out", filepath.Join(root, "deploy", "systemd")); code != 0 {
		t.Errorf("systemd-units --check: exit %d: %s", code, errOut)
	}
	if _, errOut, code := run(t, "compose", "--check", "--out", filepath.Join(root, "docker-compose.yml")); code != 0 {
		t.Errorf("compose --check: exit %d: %s", code, errOut)
	}
	dir := t.TempDir()
	if _, errOut, code := run(t, "systemd-units", "--out", dir); code != 0 {
		t.Fatalf("systemd-units --out: exit %d: %s", code, errOut)
	}
	p := filepath.Join(dir, "nodelet-gc.service")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, bytes.Replace(b, []byte("WatchdogSec=30s"), []byte("WatchdogSec=3s"), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := run(t, "systemd-units", "--check", "--out", dir); code != 1 || !strings.Contains(errOut, "nodelet-gc.service (differs) is stale") {
		t.Errorf("edited unit: exit %d: %s", code, errOut)
	}
}
