package prober

import (
	"sort"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/schemas"
)

func desiredPut(pod *corev1.Pod) bus.Update[schemas.PodDesired] {
	return bus.Update[schemas.PodDesired]{Kind: bus.Put, Key: string(pod.UID), Value: &schemas.PodDesired{Pod: pod, Source: schemas.SourceFile}}
}

func observedPut(o *schemas.PodObserved) bus.Update[schemas.PodObserved] {
	return bus.Update[schemas.PodObserved]{Kind: bus.Put, Key: o.UID, Value: o}
}

func (h *harness) workerKeys() []string {
	h.m.mu.Lock()
	defer h.m.mu.Unlock()
	var out []string
	for _, ps := range h.m.pods {
		for k := range ps.workers {
			out = append(out, k.busKey())
		}
	}
	sort.Strings(out)
	return out
}

func (h *harness) resultKeys() []string {
	var out []string
	for _, k := range h.m.results.keys() {
		out = append(out, k.busKey())
	}
	sort.Strings(out)
	return out
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// stopAll stops every worker and waits for them (the test's cleanup).
func (h *harness) stopAll() {
	h.m.mu.Lock()
	for _, ps := range h.m.pods {
		for _, w := range ps.workers {
			w.stop()
		}
	}
	h.m.mu.Unlock()
	h.m.wg.Wait()
}

// Workers follow containers: one per probe of every created container of a
// desired, running pod (sidecars included); they stop and their results go
// when the container or the pod is gone.
func TestManagerWorkerLifecycle(t *testing.T) {
	h := newHarness(t)
	t.Cleanup(h.stopAll)
	h.m.desiredSynced, h.m.observedSynced = false, false

	pod := testPod("u1", corev1.Container{Name: "app", LivenessProbe: execProbe(nil), ReadinessProbe: execProbe(nil)})
	pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: "plain"})
	pod.Spec.InitContainers = []corev1.Container{
		{Name: "init", ReadinessProbe: execProbe(nil)}, // not a sidecar: never probed
		{Name: "side", RestartPolicy: ptr(corev1.ContainerRestartPolicyAlways), StartupProbe: execProbe(nil)},
	}
	obs := observed("u1",
		running("app", "a1", t0),
		schemas.ContainerObserved{Name: "plain", Kind: schemas.ContainerKindApp,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}})
	side := running("side", "s1", t0)
	side.Kind = schemas.ContainerKindSidecar
	obs.InitContainers = []schemas.ContainerObserved{{Name: "init", Kind: schemas.ContainerKindInit, ContainerID: "containerd://i1",
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}}, side}

	// A result stored for a pod that went away while the prober was down.
	h.m.results.seed(probeKey{"gone", "c", schemas.ProbeLiveness}, schemas.ProbeResult{UID: "gone", Result: schemas.ProbeSuccess})

	h.m.onDesired(desiredPut(pod))
	h.m.onObserved(observedPut(obs))
	if n := h.m.workerCount(); n != 0 {
		t.Fatalf("%d workers before both buckets were loaded", n)
	}
	h.m.onDesired(bus.Update[schemas.PodDesired]{Kind: bus.Synced})
	h.m.onObserved(bus.Update[schemas.PodObserved]{Kind: bus.Synced})
	want := []string{"u1.app.liveness", "u1.app.readiness", "u1.side.startup"}
	if got := h.workerKeys(); !equal(got, want) {
		t.Fatalf("workers = %v, want %v", got, want)
	}
	if got := h.resultKeys(); len(got) != 0 {
		t.Errorf("results = %v: the stale one should be deleted", got)
	}

	// The pod leaves the desired bucket but still runs: workers stay.
	for _, k := range []string{"u1.app.liveness", "u1.app.readiness"} {
		pk, _ := parseBusKey(k)
		h.m.results.seed(pk, schemas.ProbeResult{UID: "u1", ContainerID: "containerd://a1", Result: schemas.ProbeSuccess})
	}
	h.m.onDesired(bus.Update[schemas.PodDesired]{Kind: bus.Deleted, Key: "u1"})
	if got := h.workerKeys(); !equal(got, want) {
		t.Fatalf("workers of a terminating pod = %v, want %v", got, want)
	}
	// Its app container exits; the pod's restart policy would restart it,
	// so its probes stay.
	o2 := *obs
	o2.Containers = []schemas.ContainerObserved{{Name: "app", ContainerID: "containerd://a1",
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137}}}}
	h.m.onObserved(observedPut(&o2))
	if got := h.workerKeys(); !equal(got, want) {
		t.Fatalf("workers = %v, want %v", got, want)
	}
	// The runtime says the pod is terminated: everything goes.
	o3 := o2
	o3.Terminated = true
	h.m.onObserved(observedPut(&o3))
	if got := h.workerKeys(); len(got) != 0 {
		t.Fatalf("workers of a terminated pod = %v", got)
	}
	if got := h.resultKeys(); len(got) != 0 {
		t.Fatalf("results of a terminated pod = %v", got)
	}
	h.m.onObserved(bus.Update[schemas.PodObserved]{Kind: bus.Deleted, Key: "u1"})
	h.m.mu.Lock()
	n := len(h.m.pods)
	h.m.mu.Unlock()
	if n != 0 {
		t.Errorf("%d pods still known after the pod went", n)
	}
}

// A container that exited and will not be restarted (restartPolicy Never,
// OnFailure with exit 0, restart rules) loses its workers and results.
func TestManagerFinishedContainer(t *testing.T) {
	cases := []struct {
		name     string
		policy   corev1.RestartPolicy
		cpolicy  *corev1.ContainerRestartPolicy
		rules    []corev1.ContainerRestartRule
		exitCode int32
		finished bool
	}{
		{"Always", corev1.RestartPolicyAlways, nil, nil, 0, false},
		{"Never", corev1.RestartPolicyNever, nil, nil, 1, true},
		{"OnFailure exit 0", corev1.RestartPolicyOnFailure, nil, nil, 0, true},
		{"OnFailure exit 1", corev1.RestartPolicyOnFailure, nil, nil, 1, false},
		{"container Never overrides pod Always", corev1.RestartPolicyAlways, ptr(corev1.ContainerRestartPolicyNever), nil, 1, true},
		{"restart rule In matches", corev1.RestartPolicyNever, ptr(corev1.ContainerRestartPolicyNever), []corev1.ContainerRestartRule{{
			Action: corev1.ContainerRestartRuleActionRestart, ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{
				Operator: corev1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}}}}, 42, false},
		{"restart rule In does not match", corev1.RestartPolicyNever, ptr(corev1.ContainerRestartPolicyNever), []corev1.ContainerRestartRule{{
			Action: corev1.ContainerRestartRuleActionRestart, ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{
				Operator: corev1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}}}}, 1, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			t.Cleanup(h.stopAll)
			pod := testPod("u1", corev1.Container{Name: "c", ReadinessProbe: execProbe(nil),
				RestartPolicy: tc.cpolicy, RestartPolicyRules: tc.rules})
			pod.Spec.RestartPolicy = tc.policy
			h.m.onDesired(desiredPut(pod))
			h.m.onObserved(observedPut(observed("u1", running("c", "a", t0))))
			if h.m.workerCount() != 1 {
				t.Fatalf("no worker for a running container")
			}
			h.m.results.seed(probeKey{"u1", "c", schemas.ProbeReadiness}, schemas.ProbeResult{UID: "u1", Result: schemas.ProbeSuccess})
			o := observed("u1", schemas.ContainerObserved{Name: "c", ContainerID: "containerd://a",
				State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: tc.exitCode}}})
			h.m.onObserved(observedPut(o))
			gotFinished := h.m.workerCount() == 0 && len(h.resultKeys()) == 0
			if gotFinished != tc.finished {
				t.Errorf("finished = %v (workers %v, results %v), want %v", gotFinished, h.workerKeys(), h.resultKeys(), tc.finished)
			}
		})
	}
}

// A wiped desired bucket (Reset) is not taken for "every pod was deleted":
// nothing is stopped or deleted until it is loaded again.
func TestManagerResetWaitsForSync(t *testing.T) {
	h := newHarness(t)
	t.Cleanup(h.stopAll)
	pod := testPod("u1", corev1.Container{Name: "c", LivenessProbe: execProbe(nil)})
	h.m.onDesired(desiredPut(pod))
	h.m.onObserved(observedPut(observed("u1", running("c", "a", t0))))
	h.m.results.seed(probeKey{"u1", "c", schemas.ProbeLiveness}, schemas.ProbeResult{UID: "u1", Result: schemas.ProbeSuccess})
	h.m.onDesired(bus.Update[schemas.PodDesired]{Kind: bus.Reset})
	if h.m.workerCount() != 1 || len(h.resultKeys()) != 1 {
		t.Fatalf("after Reset: workers %v results %v", h.workerKeys(), h.resultKeys())
	}
	v, _ := h.m.view(probeKey{"u1", "c", schemas.ProbeLiveness})
	if v.deleting {
		t.Errorf("a pod is taken for deleted while the desired bucket reloads")
	}
	h.m.onDesired(desiredPut(pod))
	h.m.onDesired(bus.Update[schemas.PodDesired]{Kind: bus.Synced})
	if h.m.workerCount() != 1 || len(h.resultKeys()) != 1 {
		t.Fatalf("after reload: workers %v results %v", h.workerKeys(), h.resultKeys())
	}
	// Loaded again without the pod: now it is gone.
	h.m.onDesired(bus.Update[schemas.PodDesired]{Kind: bus.Reset})
	h.m.onDesired(bus.Update[schemas.PodDesired]{Kind: bus.Synced})
	v, _ = h.m.view(probeKey{"u1", "c", schemas.ProbeLiveness})
	if !v.deleting {
		t.Errorf("a pod missing from the reloaded desired bucket is not taken for deleted")
	}
}

// The run loop: a random part of a period first when the prober just
// started, then every period; a poke probes at once and restarts the period.
func TestWorkerRunLoop(t *testing.T) {
	h := newHarness(t)
	h.m.jitter = func() float64 { return 0.5 }
	probed := make(chan struct{}, 10)
	h.runner.onCall = func(target) { probed <- struct{}{} }
	h.runner.set(schemas.ProbeReadiness, outcomeSuccess, "", nil)
	pod := testPod("u1", corev1.Container{Name: "c", ReadinessProbe: execProbe(nil)}) // period 10s
	h.m.onDesired(desiredPut(pod))
	h.m.onObserved(observedPut(observed("u1", running("c", "a", t0))))
	t.Cleanup(h.stopAll)

	waitWaiters := func() {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !h.clock.HasWaiters() {
			if time.Now().After(deadline) {
				t.Fatal("worker never waited on the clock")
			}
			time.Sleep(time.Millisecond)
		}
	}
	expectProbe := func(want bool, what string) {
		t.Helper()
		if want {
			select {
			case <-probed:
			case <-time.After(10 * time.Second):
				t.Fatalf("%s: no probe", what)
			}
			return
		}
		select {
		case <-probed:
			t.Fatalf("%s: probed", what)
		case <-time.After(50 * time.Millisecond):
		}
	}
	waitWaiters()
	h.clock.Step(4 * time.Second)
	expectProbe(false, "before the jitter (5s)")
	h.clock.Step(time.Second)
	expectProbe(true, "after the jitter")
	waitWaiters()
	h.clock.Step(9 * time.Second)
	expectProbe(false, "9s into the period")
	h.clock.Step(time.Second)
	expectProbe(true, "after a period")

	// A new container ID pokes the worker: it probes at once.
	waitWaiters()
	h.m.onObserved(observedPut(observed("u1", running("c", "b", t0))))
	expectProbe(true, "after the container was replaced")
	// The runner is called before the worker stores what it answered.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		r, _ := h.result("u1", "c", schemas.ProbeReadiness)
		if r.ContainerID == "containerd://b" && r.Result == schemas.ProbeSuccess {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("result after replacement = %+v", r)
		}
	}

	// A worker made long after the prober started does not wait.
	h2 := newHarness(t)
	h2.clock.Step(time.Hour)
	probed2 := make(chan struct{}, 10)
	h2.runner.onCall = func(target) { probed2 <- struct{}{} }
	h2.m.onDesired(desiredPut(pod))
	h2.m.onObserved(observedPut(observed("u1", running("c", "a", t0))))
	t.Cleanup(h2.stopAll)
	select {
	case <-probed2:
	case <-time.After(10 * time.Second):
		t.Fatal("a worker of a pod that came later waited")
	}
}
