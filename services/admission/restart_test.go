package admission

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/testenv"
	"github.com/nodelet/nodelet/schemas"
)

// The order trap: "big" arrives first and takes the whole node, "older"
// was created earlier but arrives second and is refused. Deciding again in
// creation order would flip them. After a restart both verdicts must be the
// very same messages (same revisions: nothing rewritten), a pod removed
// while admission was down loses its verdict, and a newcomer is decided
// against the pods admitted before.
func TestRestartKeepsVerdicts(t *testing.T) {
	h := newHarness(t)
	h.start()
	big, older, small := makePod("big", 20, withCPU("2")), makePod("older", 10, withCPU("1")), makePod("small", 5)
	h.put(big)
	h.admitted(big)
	h.put(older)
	h.rejected(older, "OutOfcpu", "Node didn't have enough resource: cpu, requested: 1000, used: 2000, capacity: 2000")
	h.put(small)
	h.admitted(small)
	h.waitEvent(older)
	before := h.snapshot(big, older)

	h.stop()
	h.remove(small)
	newcomer := makePod("newcomer", 1, withCPU("1"))
	h.put(newcomer)
	h.start()

	h.rejected(newcomer, "OutOfcpu", "")
	h.waitGone(small)
	h.sameSnapshot(before, h.snapshot(big, older))
	h.barrier("after-restart")
	if n := h.eventCount(older); n != 1 {
		t.Errorf("%d events for older, want 1 (no event again on restart)", n)
	}
}

// The bus's store is wiped under a running admission: the verdicts it holds
// are written again, unchanged, and sources putting the pods back in
// another order flips nothing.
func TestBusWipeKeepsVerdicts(t *testing.T) {
	h := newHarness(t)
	h.start()
	big, older := makePod("big", 20, withCPU("2")), makePod("older", 10, withCPU("1"))
	h.put(big)
	h.admitted(big)
	h.put(older)
	h.rejected(older, "OutOfcpu", "")
	before := h.snapshot(big, older)

	h.b.Restart(true)
	// Sources put their pods back, oldest first this time.
	for _, p := range []*corev1.Pod{older, big} {
		h.putRetry(p)
	}
	after := h.snapshot(big, older)
	for uid, b := range before {
		a := after[uid]
		// New bucket, new revisions; the content is the same fact.
		if a.V.Admitted != b.V.Admitted || a.V.Reason != b.V.Reason || a.V.Message != b.V.Message ||
			a.V.DesiredRevision != b.V.DesiredRevision || !a.V.DecidedAt.Equal(b.V.DecidedAt) {
			t.Errorf("%s changed across the wipe:\n before %+v\n after  %+v", uid, b.V, a.V)
		}
	}
	// And admission goes on deciding.
	p := makePod("late", 30, withCPU("100m"))
	h.putRetry(p)
	h.rejected(p, "OutOfcpu", "")
}

// putRetry puts p, retrying while the clients reconnect to a restarted bus.
func (h *harness) putRetry(p *corev1.Pod) {
	h.t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := h.sources.Put(ctx, bus.BucketDesired, string(p.UID), schemas.PodDesired{Pod: p, Source: schemas.SourceAPI})
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("put %s: %v", p.Name, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// buildBinary is nodelet-admission, built once per test binary.
func buildBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the nodelet-admission binary")
	}
	return testenv.MustDaemonBinary(t, "admission")
}

// process is the real nodelet-admission binary on the test's bus.
type process struct {
	cmd    *exec.Cmd
	stderr *bytes.Buffer
}

func startBinary(t *testing.T, bin, configPath string) *process {
	t.Helper()
	p := &process{stderr: &bytes.Buffer{}}
	p.cmd = exec.Command(bin, "--config", configPath, "--log-level", "debug")
	p.cmd.Stderr = &syncWriter{w: p.stderr}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
			_ = p.cmd.Wait()
		}
		if t.Failed() {
			t.Logf("nodelet-admission (pid %d) said:\n%s", p.cmd.Process.Pid, p.stderr.String())
		}
	})
	return p
}

func (p *process) kill(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err := p.cmd.Wait()
	if ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("process did not die of SIGKILL: %v", err)
	}
}

type syncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(b)
}

// The real binary, on this machine's real capacity, is killed with
// SIGKILL and started again: every verdict is the same message at the same
// revision, and no admitted pod is rejected.
func TestSIGKILLKeepsVerdicts(t *testing.T) {
	bin := buildBinary(t)
	h := newHarness(t)
	configPath := filepath.Join(t.TempDir(), "node.yaml")
	cfgYAML := fmt.Sprintf("node:\n  name: node-a\n  stateDir: %s\nbus:\n  listen: %s\n", h.b.StateDir, h.b.Server.Addr())
	if err := os.WriteFile(configPath, []byte(cfgYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	// The binary measures the machine itself: fill whatever cpu it has.
	capacity, err := MachineCapacity{Dir: h.b.StateDir}.Capacity()
	if err != nil {
		t.Fatal(err)
	}
	cpu := capacity[corev1.ResourceCPU]

	proc := startBinary(t, bin, configPath)
	big := makePod("big", 20, withCPU(cpu.String()))
	older := makePod("older", 10, withCPU("1"))
	selector := makePod("selector", 15, withNodeSelector("disk", "ssd"))
	h.put(big)
	h.admitted(big)
	h.put(older)
	h.rejected(older, "OutOfcpu", "")
	h.put(selector)
	h.rejected(selector, "NodeAffinity", "")
	h.waitEvent(older)
	before := h.snapshot(big, older, selector)

	proc.kill(t)
	newcomer := makePod("newcomer", 1, withCPU("1"))
	h.put(newcomer)
	startBinary(t, bin, configPath)

	h.rejected(newcomer, "OutOfcpu", "")
	h.sameSnapshot(before, h.snapshot(big, older, selector))
	h.admitted(big)
	h.barrier("after-kill")
	if n := h.eventCount(older); n != 1 {
		t.Errorf("%d events for older, want 1", n)
	}
}
