package gc

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/cri"
	"github.com/nodelet/nodelet/internal/daemon"
	"github.com/nodelet/nodelet/internal/testenv"
)

// buildDaemon is nodelet-gc, built once per test binary.
func buildDaemon(t *testing.T) string { return testenv.MustDaemonBinary(t, "gc") }

// The real nodelet-gc process, SIGKILLed while its first container GC pass
// is removing the dead instances of a pod, is started again: it finishes
// the pass and keeps the last dead instance and the running container; a
// SIGTERM then stops it cleanly.
func TestKilledDaemonResumes(t *testing.T) {
	e := newTestEnv(t)
	bin := buildDaemon(t)

	live := newPod("live", corev1.Container{Name: "app"}, corev1.Container{Name: "side"})
	pl := e.runSandbox(live, 0)
	const crashes = 12 // enough dead instances for the pass to take a while
	var last string
	for attempt := range uint32(crashes) {
		last = e.crash(pl, "app", attempt)
	}
	side := e.startContainer(pl, "side", 0, "sleep", "3600")
	e.desire(live)
	e.observe(live, false)
	e.sourcesReady(true)

	conf := filepath.Join(t.TempDir(), "node.yaml")
	yaml := fmt.Sprintf(`node:
  name: node-1
  stateDir: %s
  podLogsDir: %s
bus:
  listen: %s
runtime:
  endpoint: %s
gc:
  containerGCPeriod: 1h
  imageGCHighThresholdPercent: 100
  containerLogMonitorInterval: 1h
  evictionMonitoringPeriod: 1h
`, e.bus.StateDir, e.cfg.Node.PodLogsDir, strings.TrimPrefix(e.bus.URL, "nats://"), e.ctr.Endpoint)
	if err := os.WriteFile(conf, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	start := func() (*exec.Cmd, *testenv.Buffer) {
		out := &testenv.Buffer{}
		cmd := exec.Command(bin, "--config", conf, "--log-level", "debug")
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd, out
	}
	dead := func() int {
		cs, err := e.cri.Runtime.ListContainers(context.Background(), &runtimeapi.ContainerFilter{
			State:         &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_EXITED},
			LabelSelector: map[string]string{cri.LabelPodUID: string(live.UID)}})
		if err != nil {
			t.Fatal(err)
		}
		return len(cs)
	}

	cmd, out := start()
	deadline := time.Now().Add(time.Minute)
	for dead() == crashes {
		if time.Now().After(deadline) {
			t.Fatalf("nodelet-gc removed nothing in a minute:\n%s", out)
		}
		time.Sleep(2 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	n := dead()
	t.Logf("SIGKILL with %d of %d dead instances left (mid-pass: %v)", n, crashes, n > 1)
	if n < 1 {
		t.Fatalf("the killed gc removed every dead instance, the last one included")
	}

	cmd, out = start()
	// The pass is over when the daemon counts it: anything more it would
	// wrongly remove is gone by then.
	metrics := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", daemon.MetricsSocket(e.bus.StateDir, "gc"))
	}}}
	waitFor(t, "the restarted gc to finish its container pass", func() bool {
		resp, err := metrics.Get("http://gc/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(b), `nodelet_gc_pass_duration_seconds_count{pass="container"} 1`)
	})
	if n := dead(); n != 1 {
		t.Errorf("%d dead instances after the pass, want the last one", n)
	}
	got := map[string]bool{}
	for _, c := range e.containersOf(string(live.UID)) {
		got[c.Id] = true
	}
	if len(got) != 2 || !got[last] || !got[side] {
		t.Errorf("containers after the restart %v, want the last dead instance %s and the running %s", got, last, side)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("nodelet-gc did not stop cleanly on SIGTERM: %v\n%s", err, out)
	}
	if !strings.Contains(out.String(), "Removed dead container") {
		t.Errorf("no removal in the restarted gc's log:\n%s", out)
	}
}
