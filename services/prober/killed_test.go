package prober

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/daemon"
	"github.com/nodelet/nodelet/internal/testenv"
	"github.com/nodelet/nodelet/internal/testenv/eventually"
	"github.com/nodelet/nodelet/schemas"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// SIGKILL the nodelet-prober process: after it is started again no probe
// result goes backwards or fails (nothing for the runtime to restart), no
// result is even written again, and probing resumes: a readiness and a
// liveness change made after the restart are published.
func TestContainerdProberKilled(t *testing.T) {
	c := containerd(t)
	e := newBusEnv(t)
	bin := testenv.MustDaemonBinary(t, "prober")

	pod := criPodSpec(t, corev1.Container{Name: "web", Image: "busybox",
		Command:        []string{"sh", "-c", "touch /tmp/healthy /www/ready.html; exec httpd -f -p 8080 -h /www"},
		LivenessProbe:  fast(execH("cat", "/tmp/healthy"), 3),
		ReadinessProbe: fast(corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready.html", Port: intstr.FromInt32(8080)}}, 2)})
	uid := string(pod.UID)
	p := runPod(t, c.RuntimeClient(t), pod)
	p.start("web", 0)
	e.putDesired(pod)
	e.putObserved(p.observed(1))
	id := p.containerID("web")
	live := bus.ProbeKey(uid, "web", schemas.ProbeLiveness)
	ready := bus.ProbeKey(uid, "web", schemas.ProbeReadiness)

	start := func(name string) (*exec.Cmd, *testenv.Buffer) {
		t.Helper()
		out := &testenv.Buffer{}
		cmd := exec.Command(bin, "--bus.listen", strings.TrimPrefix(e.b.URL, "nats://"), "--node.stateDir", e.b.StateDir,
			"--runtime.endpoint", c.Endpoint, "--log-level", "debug")
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			if t.Failed() {
				t.Logf("%s output:\n%s", name, out.String())
			}
		})
		return cmd, out
	}

	first, _ := start("first nodelet-prober")
	e.waitResult(live, id, schemas.ProbeSuccess, wait)
	e.waitResult(ready, id, schemas.ProbeSuccess, wait)
	// A few probes more, counted by the process itself.
	waitProbes(t, e.b.StateDir, uid, "web", probesRun(e.b.StateDir, uid, "web")+4, wait)
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()
	livePuts, readyPuts := e.puts(live), e.puts(ready)

	second, out := start("second nodelet-prober")
	deadline := time.Now().Add(wait)
	for !strings.Contains(out.String(), "Loaded probe results") {
		if time.Now().After(deadline) {
			t.Fatalf("the restarted prober did not load its results:\n%s", out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Five periods of both probes, counted by the new process.
	waitProbes(t, e.b.StateDir, uid, "web", 10, wait)
	if e.puts(live) != livePuts || e.puts(ready) != readyPuts {
		t.Errorf("the restart rewrote results:\nliveness%s\nreadiness%s", e.describe(live), e.describe(ready))
	}
	for _, k := range []string{live, ready} {
		for _, r := range e.published(k) {
			if r.ContainerID == id && r.Result == schemas.ProbeFailure && k == live {
				t.Errorf("a liveness failure was published for the healthy container: %+v", r)
			}
		}
	}
	if r, _ := e.get(ready); r.Result != schemas.ProbeSuccess {
		t.Errorf("readiness after the restart = %+v, want it to stay success", r)
	}

	// Results resume: the new process sees changes.
	p.exec("web", "rm /www/ready.html")
	e.waitResult(ready, id, schemas.ProbeFailure, wait)
	p.exec("web", "rm /tmp/healthy")
	r := e.waitResult(live, id, schemas.ProbeFailure, wait)
	if !strings.HasPrefix(r.Message, "Liveness probe failed: cat: can't open '/tmp/healthy'") {
		t.Errorf("message = %q", r.Message)
	}
	if err := second.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- second.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("nodelet-prober after SIGTERM: %v\n%s", err, out.String())
		}
	case <-time.After(30 * time.Second):
		t.Errorf("nodelet-prober did not stop on SIGTERM")
	}
}

// probesRun is how many probes of (uid, container), of every kind, the
// running nodelet-prober has done: its prober_probe_total from its metrics
// socket.
func probesRun(stateDir, uid, container string) float64 {
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", daemon.MetricsSocket(stateDir, bus.Prober))
	}}}
	resp, err := c.Get("http://prober/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return 0
	}
	n := 0.0
	for _, m := range fams["nodelet_prober_probe_total"].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["pod_uid"] == uid && labels["container"] == container {
			n += m.GetCounter().GetValue()
		}
	}
	return n
}

// waitProbes waits until the running nodelet-prober has done n probes of
// (uid, container).
func waitProbes(t *testing.T, stateDir, uid, container string, n float64, timeout time.Duration) {
	t.Helper()
	eventually.True(t, timeout, fmt.Sprintf("%v probes of %s", n, container), func() bool { return probesRun(stateDir, uid, container) >= n })
}
