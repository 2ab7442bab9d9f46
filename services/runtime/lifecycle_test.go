package runtime

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/google/uuid"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/schemas"
)

// A container that exits 1 under restartPolicy Always is restarted with
// CrashLoopBackOff in between; its restart count grows. As the kubelet's
// doBackOff, the first exit restarts at once (no BackOff before the second
// start) and the second waits the initial 10 s from the exit, with one
// BackOff event: the kubelet syncs once per PLEG event, and the task event
// and the relist that both report the exit make one sync here. (The
// periodic resync, which may record one more, is set out of the way.)
func TestCrashLoopRestartCountGrows(t *testing.T) {
	h := newHarness(t, harnessOptions{options: func(o *Options) { o.ResyncPeriod = 10 * time.Minute }})
	pod := newPod("crasher", busybox("app", "echo crashed >/dev/termination-log; exit 1"))
	h.run(pod)
	sawBackOff := false
	o := h.waitObserved(pod, 3*time.Minute, "restart count 2", func(o *schemas.PodObserved) bool {
		c := container(o, "app")
		if w := c.State.Waiting; w != nil && w.Reason == reasonCrashLoopBackOff {
			last := c.LastTerminationState.Terminated
			if last == nil || last.ExitCode != 1 || !strings.Contains(last.Message, "crashed") {
				t.Errorf("CrashLoopBackOff without the last termination: %+v", c.LastTerminationState)
			}
			sawBackOff = true
		}
		return c.RestartCount >= 2
	})
	if !sawBackOff {
		t.Fatalf("never saw CrashLoopBackOff: %s", describe(o))
	}
	h.events.await(t, pod.UID, "BackOff", 1)
	h.events.await(t, pod.UID, "Started", 3)
	// The pod's events come in the order the runtime recorded them.
	started, before := 0, map[int]int{}
	for _, r := range h.events.reasons(pod.UID) {
		switch r {
		case "Started":
			started++
		case "BackOff":
			before[started]++
		}
	}
	if before[1] != 0 || before[2] != 1 {
		t.Errorf("BackOff events after each start: %v; want none after the first (the first exit restarts at once), one after the second", before)
	}
	// One instance per restart, all in the one sandbox.
	cs := h.containers(pod.UID)
	if len(cs) < 3 {
		t.Fatalf("%d container instances, want 3", len(cs))
	}
	times := map[uint32]*runtimeapi.ContainerStatus{}
	for _, c := range cs {
		st, err := h.cri.Runtime.ContainerStatus(h.ctx, &runtimeapi.ContainerStatusRequest{ContainerId: c.Id})
		if err != nil {
			t.Fatal(err)
		}
		times[c.Metadata.Attempt] = st.Status
	}
	if times[1] == nil || times[2] == nil {
		t.Fatalf("attempts 1 and 2 not both in CRI: %v", times)
	}
	if wait := time.Duration(times[2].StartedAt - times[1].FinishedAt); wait < initialBackOff {
		t.Errorf("the second restart came %v after the exit, want at least %v", wait, initialBackOff)
	}
	if sbs := h.sandboxes(pod.UID); len(sbs) != 1 {
		t.Fatalf("%d sandboxes", len(sbs))
	}
}

// A liveness probe failure the prober publishes for the running container
// kills and restarts it, with the kubelet's message and the probe's grace.
func TestLivenessFailureRestartsContainer(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	pod := newPod("unhealthy", busybox("app", "exec sleep 3600"))
	h.run(pod)
	o := h.waitObserved(pod, 2*time.Minute, "running", func(o *schemas.PodObserved) bool { return running(o, "app") })
	first := container(o, "app").ContainerID

	// A result about another instance changes nothing.
	put := func(id string) {
		grace := int64(1)
		if _, err := h.prober.Put(h.ctx, bus.BucketProbes, bus.ProbeKey(string(pod.UID), "app", schemas.ProbeLiveness), &schemas.ProbeResult{
			UID: string(pod.UID), Namespace: pod.Namespace, Name: pod.Name, Container: "app", ContainerID: id,
			Probe: schemas.ProbeLiveness, Result: schemas.ProbeFailure, Message: "Liveness probe failed: boom",
			Since: time.Now().UTC(), TerminationGracePeriodSeconds: &grace,
		}); err != nil {
			t.Fatal(err)
		}
	}
	put("containerd://not-this-one")
	h.probeBarrier()
	if c := container(h.obs.get(pod.UID), "app"); c.ContainerID != first || c.State.Running == nil {
		t.Fatalf("a result about another container restarted it: %+v", c)
	}
	put(first)
	o = h.waitObserved(pod, time.Minute, "restarted", func(o *schemas.PodObserved) bool {
		c := container(o, "app")
		return c.RestartCount == 1 && c.State.Running != nil
	})
	if c := container(o, "app"); c.ContainerID == first || c.LastTerminationState.Terminated == nil {
		t.Fatalf("after the restart: %+v", c)
	}
	var msgs []string
	for _, e := range h.events.await(t, pod.UID, "Killing", 1) {
		msgs = append(msgs, e.Message)
	}
	if len(msgs) != 1 || msgs[0] != "Container app failed liveness probe, will be restarted" {
		t.Fatalf("Killing events: %q", msgs)
	}
}

// A pod without a verdict waits; a rejected pod never runs; an admitted
// one runs.
func TestOnlyAdmittedPodsRun(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	waiting := newPod("waiting", busybox("app", "exec sleep 3600"))
	rejected := newPod("rejected", busybox("app", "exec sleep 3600"))
	h.desire(waiting)
	h.desire(rejected)
	h.admit(rejected, false)
	h.barrier()
	for _, p := range []*corev1.Pod{waiting, rejected} {
		if n := len(h.sandboxes(p.UID)); n != 0 {
			t.Fatalf("pod %s has %d sandboxes before admission", p.Name, n)
		}
	}
	h.admit(waiting, true)
	h.waitObserved(waiting, 2*time.Minute, "running", func(o *schemas.PodObserved) bool { return running(o, "app") })
	if n := len(h.sandboxes(rejected.UID)); n != 0 {
		t.Fatalf("rejected pod has %d sandboxes", n)
	}
}

// An eviction kills the pod and the observed state says why.
func TestEvictionKillsPod(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	pod := newPod("evicted", busybox("app", "exec sleep 3600"))
	grace := int64(1)
	pod.Spec.TerminationGracePeriodSeconds = &grace
	h.run(pod)
	h.waitObserved(pod, 2*time.Minute, "running", func(o *schemas.PodObserved) bool { return running(o, "app") })
	if _, err := h.gc.Put(h.ctx, bus.BucketEvictions, string(pod.UID), &schemas.PodEviction{
		UID: string(pod.UID), Namespace: pod.Namespace, Name: pod.Name, Reason: "Evicted",
		Message: "The node was low on resource: memory.", Time: time.Now().UTC(),
	}); err != nil {
		t.Fatal(err)
	}
	o := h.waitObserved(pod, time.Minute, "terminated", func(o *schemas.PodObserved) bool { return o.Terminated })
	if o.Reason != "Evicted" || container(o, "app").State.Terminated == nil {
		t.Fatalf("after eviction: %s", describe(o))
	}
}

// Pods in the runtime that carry nodelet's label but that no source
// knows are killed, only once the sources are ready; others are left.
func TestOrphansKilledAfterSourcesReady(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	pod := newPod("orphan", busybox("app", "exec sleep 3600"))
	grace := int64(1)
	pod.Spec.TerminationGracePeriodSeconds = &grace
	h.run(pod)
	h.waitObserved(pod, 2*time.Minute, "running", func(o *schemas.PodObserved) bool { return running(o, "app") })

	// nodelet-runtime stops; meanwhile the pod leaves the sources (the
	// bus store could equally have been wiped).
	h.stop()
	h.remove(pod)
	h.start(nil)
	h.barrier()
	if sbs := h.sandboxes(pod.UID); len(sbs) != 1 {
		t.Fatalf("orphan touched before the sources are ready: %d sandboxes", len(sbs))
	}
	if cs := h.containers(pod.UID); len(cs) != 1 || cs[0].State.String() != "CONTAINER_RUNNING" {
		t.Fatalf("orphan's container before the sources are ready: %v", cs)
	}
	h.setSourcesReady()
	waitFor(t, time.Minute, "orphan removed", func() (bool, string) {
		n := len(h.sandboxes(pod.UID))
		return n == 0 && h.obs.wasDeleted(pod.UID), fmt.Sprintf("%d sandboxes", n)
	})
}

// The bus restarts with its store wiped: nothing is killed while the
// buckets are empty, the observed state is written again, and once the
// sources and admission deliver the pod again it runs on in the same
// container.
func TestBusStoreWiped(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.setSourcesReady()
	pod := newPod("survivor", busybox("app", "exec sleep 3600"))
	grace := int64(1)
	pod.Spec.TerminationGracePeriodSeconds = &grace
	h.run(pod)
	o := h.waitObserved(pod, 2*time.Minute, "running", func(o *schemas.PodObserved) bool { return running(o, "app") })
	id := container(o, "app").ContainerID

	began := time.Now()
	h.bus.Restart(true)
	t.Logf("bus restarted in %v", time.Since(began))
	// The runtime writes its observed state again by itself.
	waitFor(t, time.Minute, "observed state written again", func() (bool, string) { return h.obs.putSinceReset(pod.UID, 1), "" })
	o = h.waitObserved(pod, time.Minute, "observed again", func(o *schemas.PodObserved) bool { return running(o, "app") })
	t.Logf("observed again %v after the wipe", time.Since(began))
	if container(o, "app").ContainerID != id {
		t.Fatalf("container changed: %s", describe(o))
	}
	h.barrier() // a wrong implementation has killed by now
	if cs := h.containers(pod.UID); len(cs) != 1 || cs[0].State.String() != "CONTAINER_RUNNING" {
		t.Fatalf("containers after the wipe: %v", cs)
	}
	// Sources and admission deliver again.
	h.run(pod)
	h.setSourcesReady()
	h.barrier()
	o = h.waitObserved(pod, time.Minute, "running", func(o *schemas.PodObserved) bool { return running(o, "app") })
	if c := container(o, "app"); c.ContainerID != id || c.RestartCount != 0 {
		t.Fatalf("after the wipe: %s id %s, was %s", describe(o), c.ContainerID, id)
	}
	if cs := h.containers(pod.UID); len(cs) != 1 {
		t.Fatalf("%d containers", len(cs))
	}

	// A pod the sources no longer deliver after a wipe goes, once they are ready.
	began = time.Now()
	h.bus.Restart(true)
	h.setSourcesReady()
	defer func() { t.Logf("dropped pod removed %v after the second wipe", time.Since(began)) }()
	waitFor(t, time.Minute, "dropped pod removed", func() (bool, string) {
		n := len(h.sandboxes(pod.UID))
		return n == 0, fmt.Sprintf("%d sandboxes", n)
	})
}

// hangingRuntime is the real runtime, except that RunPodSandbox of one pod
// hangs until its deadline (a hung CRI call).
type hangingRuntime struct {
	internalapi.RuntimeService
	pod    string
	hangs  atomic.Int32
	budget time.Duration
}

func (r *hangingRuntime) RunPodSandbox(ctx context.Context, cfg *runtimeapi.PodSandboxConfig, handler string) (string, error) {
	if cfg.Metadata.Name == r.pod && r.hangs.Add(1) == 1 {
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(r.budget):
			return "", status.Error(codes.DeadlineExceeded, "context deadline exceeded (simulated hung call)")
		}
	}
	return r.RuntimeService.RunPodSandbox(ctx, cfg, handler)
}

// A CRI call that hangs for one pod stalls neither the other pods nor the
// relist; the hung pod is retried once the call times out.
func TestHungCRICallStallsOnlyItsPod(t *testing.T) {
	var hr *hangingRuntime
	h := newHarness(t, harnessOptions{options: func(o *Options) {
		hr = &hangingRuntime{RuntimeService: o.Runtime, pod: "hung", budget: 15 * time.Second}
		o.Runtime = hr
	}})
	hung := newPod("hung", busybox("app", "exec sleep 3600"))
	other := newPod("other", busybox("app", "exec sleep 3600"))
	grace := int64(1)
	hung.Spec.TerminationGracePeriodSeconds = &grace
	other.Spec.TerminationGracePeriodSeconds = &grace
	h.run(hung)
	waitFor(t, time.Minute, "the hung call", func() (bool, string) { return hr.hangs.Load() > 0, "" })
	began := time.Now()
	h.run(other)
	h.waitObserved(other, time.Minute, "running", func(o *schemas.PodObserved) bool { return running(o, "app") })
	if took := time.Since(began); took >= hr.budget {
		t.Fatalf("the other pod waited for the hung call (%v)", took)
	}
	// The other pod's changes are still relisted while the call hangs.
	if _, err := h.cri.Runtime.StopContainer(h.ctx, &runtimeapi.StopContainerRequest{
		ContainerId: trimContainerID(container(h.obs.get(other.UID), "app").ContainerID)}); err != nil {
		t.Fatal(err)
	}
	h.waitObserved(other, time.Minute, "restart seen", func(o *schemas.PodObserved) bool {
		c := container(o, "app")
		return c.LastTerminationState.Terminated != nil || c.State.Terminated != nil || c.State.Waiting != nil
	})
	h.waitObserved(hung, 2*time.Minute, "running after the timeout", func(o *schemas.PodObserved) bool { return running(o, "app") })
	if n := len(h.sandboxes(hung.UID)); n != 1 {
		t.Fatalf("%d sandboxes for the pod whose call hung", n)
	}
}

// A pod whose API status is already terminal (Failed, Succeeded) is
// admitted but never started: the kubelet's UpdatePod tears it down.
func TestTerminalPodNotStarted(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	for _, phase := range []corev1.PodPhase{corev1.PodFailed, corev1.PodSucceeded} {
		pod := newPod("finished-"+strings.ToLower(string(phase)), busybox("app", "exec sleep 3600"))
		pod.Status.Phase = phase
		h.run(pod)
		h.barrier()
		if n := len(h.sandboxes(pod.UID)); n != 0 {
			t.Errorf("%s pod: %d sandboxes, want none", phase, n)
		}
		if n := len(h.containers(pod.UID)); n != 0 {
			t.Errorf("%s pod: %d containers, want none", phase, n)
		}
	}
}

// barrier runs a marker pod and waits until it runs: the runtime has
// handled every desired pod and verdict put before it (each bucket is
// watched in order) and is working, so what a test asserts it did not do
// because of them, it did not do.
func (h *harness) barrier() {
	h.t.Helper()
	marker := newPod("barrier-"+uuid.NewString()[:8], busybox("app", "exec sleep 3600"))
	h.run(marker)
	h.waitObserved(marker, 2*time.Minute, "the barrier pod running", func(o *schemas.PodObserved) bool { return running(o, "app") })
}

// probeBarrier is barrier for probe results: a marker pod's liveness
// failure, put after the results under test, restarts its container, so
// the runtime has handled the earlier results by then.
func (h *harness) probeBarrier() {
	h.t.Helper()
	marker := newPod("probe-barrier-"+uuid.NewString()[:8], busybox("app", "exec sleep 3600"))
	h.run(marker)
	o := h.waitObserved(marker, 2*time.Minute, "the barrier pod running", func(o *schemas.PodObserved) bool { return running(o, "app") })
	first := container(o, "app").ContainerID
	grace := int64(1)
	if _, err := h.prober.Put(h.ctx, bus.BucketProbes, bus.ProbeKey(string(marker.UID), "app", schemas.ProbeLiveness), &schemas.ProbeResult{
		UID: string(marker.UID), Namespace: marker.Namespace, Name: marker.Name, Container: "app", ContainerID: first,
		Probe: schemas.ProbeLiveness, Result: schemas.ProbeFailure, Message: "Liveness probe failed: barrier",
		Since: time.Now().UTC(), TerminationGracePeriodSeconds: &grace,
	}); err != nil {
		h.t.Fatal(err)
	}
	h.waitObserved(marker, time.Minute, "the barrier pod restarted", func(o *schemas.PodObserved) bool {
		c := container(o, "app")
		return c.ContainerID != first && c.State.Running != nil
	})
}
