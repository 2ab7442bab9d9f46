package runtime

import (
	"context"
	"testing"
	"time"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/schemas"
)

// TestGonePodWithoutSandboxForgetsItsResizeState: a pod deleted before it
// had a sandbox (a ReplicaSet scaling down a pod still in
// ContainerCreating) has no pod cgroup to remove, which is where its resize
// state used to be forgotten: it stayed for good, one per such pod.
func TestGonePodWithoutSandboxForgetsItsResizeState(t *testing.T) {
	e := newStepEnv(t)
	e.m.images = &imagePuller{backoff: newBackOff(e.clock, initialBackOff, time.Minute)}
	pod := newPod("early", busybox("app", ""))
	s := e.sync(t, pod)
	e.m.resources.podResizeOf(pod)
	if !s.pr.empty() {
		t.Fatalf("the pod has something in CRI: %+v", s.pr)
	}
	if res := s.syncGone(context.Background()); res.RequeueAfter > 0 {
		t.Fatalf("syncGone: %+v", res)
	}
	e.m.resources.resize.mu.Lock()
	defer e.m.resources.resize.mu.Unlock()
	if r, ok := e.m.resources.resize.pods[s.uid]; ok {
		t.Errorf("resize state of the gone pod kept: %+v", r)
	}
}

// TestProbeResultsOfAGonePodLeaveNoEntry: once a pod's last probe result
// is deleted, nothing of the pod is left in the runtime's probe map.
func TestProbeResultsOfAGonePodLeaveNoEntry(t *testing.T) {
	s := newStore()
	for _, k := range []string{"uid-1.app.readiness", "uid-1.app.liveness"} {
		s.onProbeResult(bus.Update[schemas.ProbeResult]{Kind: bus.Put, Key: k, Value: &schemas.ProbeResult{Probe: schemas.ProbeReadiness}})
	}
	s.onProbeResult(bus.Update[schemas.ProbeResult]{Kind: bus.Deleted, Key: "uid-1.app.readiness"})
	if len(s.probes["uid-1"]) != 1 {
		t.Fatalf("one result deleted of two: %v", s.probes)
	}
	s.onProbeResult(bus.Update[schemas.ProbeResult]{Kind: bus.Deleted, Key: "uid-1.app.liveness"})
	if _, ok := s.probes["uid-1"]; ok || len(s.probes) != 0 {
		t.Errorf("the pod's entry outlived its results: %v", s.probes)
	}
}
