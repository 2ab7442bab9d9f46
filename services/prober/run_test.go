package prober

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/testenv/eventually"
	"github.com/nodelet/nodelet/schemas"
)

// Run on the real bus: stale and malformed stored results are deleted,
// a stored result is the starting point (not written again), failures are
// published after failureThreshold with Unhealthy events, and a restarted
// prober holds a published liveness failure instead of probing into it
// again, then starts over with the container the runtime made.
func TestRunOnBus(t *testing.T) {
	e := newBusEnv(t)
	prober := e.b.Connect(bus.Prober)
	ctx := busCtx(t)
	live := bus.ProbeKey("u1", "c", schemas.ProbeLiveness)
	// What an earlier prober left: a result for u1's running container, one
	// for a pod that is gone, and a value that does not decode.
	stored := schemas.ProbeResult{UID: "u1", Namespace: "default", Name: "web-u1", Container: "c",
		ContainerID: "containerd://a", Probe: schemas.ProbeLiveness, Result: schemas.ProbeSuccess, Since: time.Now().UTC().Add(-time.Hour)}
	if _, err := prober.Put(ctx, bus.BucketProbes, live, &stored); err != nil {
		t.Fatal(err)
	}
	gone := bus.ProbeKey("gone", "c", schemas.ProbeReadiness)
	if _, err := prober.Put(ctx, bus.BucketProbes, gone, &schemas.ProbeResult{UID: "gone", Result: schemas.ProbeSuccess}); err != nil {
		t.Fatal(err)
	}
	if _, err := prober.PutRaw(ctx, bus.BucketProbes, "junk", []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	e.waitResult(live, "containerd://a", schemas.ProbeSuccess, 10*time.Second)
	putsBefore := e.puts(live)

	pod := testPod("u1", corev1.Container{Name: "c", LivenessProbe: execProbe(func(p *corev1.Probe) { p.PeriodSeconds = 1 })})
	e.putDesired(pod)
	e.putObserved(observed("u1", running("c", "a", time.Now().Add(-time.Minute))))
	// The test's clock: a readiness probe every second in another pod.
	e.putDesired(testPod("clock", corev1.Container{Name: "tick", ReadinessProbe: execProbe(func(p *corev1.Probe) { p.PeriodSeconds = 1 })}))
	e.putObserved(observed("clock", running("tick", "t", time.Now().Add(-time.Minute))))

	r := newScriptRunner()
	r.set(schemas.ProbeLiveness, outcomeSuccess, "", nil)
	_, stop := e.startProber(Options{}, r)
	e.waitGone(gone, 10*time.Second)
	e.waitGone("junk", 10*time.Second)
	deadline := time.Now().Add(30 * time.Second)
	for r.count(schemas.ProbeLiveness) < 3 {
		if time.Now().After(deadline) {
			t.Fatal("liveness did not run")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := e.puts(live); n != putsBefore {
		t.Fatalf("the stored result was written again (%d puts, had %d):%s", n, putsBefore, e.describe(live))
	}

	r.set(schemas.ProbeLiveness, outcomeFailure, "cat: can't open '/tmp/healthy': No such file or directory", nil)
	failed := e.waitResult(live, "containerd://a", schemas.ProbeFailure, 30*time.Second)
	if failed.Message != "Liveness probe failed: cat: can't open '/tmp/healthy': No such file or directory" {
		t.Errorf("message = %q", failed.Message)
	}
	evs := e.eventsFor("u1")
	deadline = time.Now().Add(10 * time.Second)
	for len(evs) < 3 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		evs = e.eventsFor("u1")
	}
	if len(evs) < 3 {
		t.Fatalf("%d Unhealthy events, want one per failure (3)", len(evs))
	}
	for _, ev := range evs {
		if ev.Reason != "Unhealthy" || ev.Type != "Warning" || ev.Component != bus.Prober ||
			ev.Object.FieldPath != "spec.containers{c}" || !strings.Contains(ev.Message, "/tmp/healthy") {
			t.Errorf("event = %+v", ev)
		}
	}
	stop()

	// A new prober holds the failure: no probe runs for container a.
	r2 := newScriptRunner()
	r2.set(schemas.ProbeLiveness, outcomeSuccess, "", nil)
	_, stop2 := e.startProber(Options{}, r2)
	defer stop2()
	// Three periods, counted by the clock pod's readiness probe.
	eventually.True(t, 30*time.Second, "three readiness probes of the clock pod", func() bool { return r2.count(schemas.ProbeReadiness) >= 3 })
	if n := r2.count(schemas.ProbeLiveness); n != 0 {
		t.Fatalf("the restarted prober probed the failed container %d times", n)
	}
	if got, _ := e.get(live); got.Result != schemas.ProbeFailure {
		t.Fatalf("liveness after restart = %+v, want the failure to stand", got)
	}
	// The runtime replaced the container: start over.
	e.putObserved(observed("u1", running("c", "b", time.Now())))
	e.waitResult(live, "containerd://b", schemas.ProbeSuccess, 30*time.Second)
	deadline = time.Now().Add(30 * time.Second)
	for r2.count(schemas.ProbeLiveness) < 1 {
		if time.Now().After(deadline) {
			t.Fatal("liveness did not run on the new container")
		}
		time.Sleep(20 * time.Millisecond)
	}

	// The pod goes: its result goes.
	if err := e.sources.Delete(ctx, bus.BucketDesired, "u1"); err != nil {
		t.Fatal(err)
	}
	o := observed("u1", running("c", "b", time.Now()))
	o.Terminated = true
	e.putObserved(o)
	e.waitGone(live, 30*time.Second)
	for _, p := range e.published(live) {
		if p.ContainerID == "containerd://b" && p.Result == schemas.ProbeFailure {
			t.Errorf("a failure was published for the healthy container b:%s", e.describe(live))
		}
	}
}
