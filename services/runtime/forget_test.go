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

// wakes records the pods whose workers were woken.
type wakes []string

func (w *wakes) Update(uid string) { *w = append(*w, uid) }

// newLoadedStore is a store whose input buckets are all loaded, waking
// the workers it records.
func newLoadedStore() (*store, *wakes) {
	s := newStore()
	woken := &wakes{}
	s.workers = woken
	for _, b := range watchedBuckets {
		s.setSynced(b, true)
	}
	return s, woken
}

// TestRecordsWithoutADesiredPodAreForgotten: a record that a verdict or
// an eviction made, or kept, goes once they are deleted too. A verdict of a
// pod never desired made a record no forget dropped (it was never Gone),
// and an eviction's deletion did not wake the gone pod's worker, whose
// record stayed: one of each per such pod, for good.
func TestRecordsWithoutADesiredPodAreForgotten(t *testing.T) {
	s, woken := newLoadedStore()
	pod := newPod("evicted", busybox("app", ""))
	uid := string(pod.UID)

	s.onVerdict(bus.Update[schemas.AdmissionVerdict]{Kind: bus.Put, Key: "never-desired", Value: &schemas.AdmissionVerdict{Admitted: true}})
	s.forget("never-desired")
	if s.get("never-desired") == nil {
		t.Fatal("a record with its verdict still on the bus was forgotten")
	}
	s.onVerdict(bus.Update[schemas.AdmissionVerdict]{Kind: bus.Deleted, Key: "never-desired"})
	s.forget("never-desired")
	if r := s.get("never-desired"); r != nil {
		t.Errorf("the record of a pod never desired outlived its verdict: %+v", r)
	}

	s.onDesired(context.Background(), bus.Update[schemas.PodDesired]{Kind: bus.Put, Key: uid, Value: &schemas.PodDesired{Pod: pod}})
	s.onEviction(bus.Update[schemas.PodEviction]{Kind: bus.Put, Key: uid, Value: &schemas.PodEviction{Reason: "Evicted"}})
	s.onDesired(context.Background(), bus.Update[schemas.PodDesired]{Kind: bus.Deleted, Key: uid})
	s.forget(uid)
	if s.get(uid) == nil {
		t.Fatal("a gone pod's record was forgotten with its eviction still on the bus")
	}
	*woken = nil
	s.onEviction(bus.Update[schemas.PodEviction]{Kind: bus.Deleted, Key: uid})
	if len(*woken) != 1 || (*woken)[0] != uid {
		t.Fatalf("the eviction's deletion woke %v, want the gone pod's worker", *woken)
	}
	s.forget(uid) // what the woken worker's syncGone does
	if r := s.get(uid); r != nil {
		t.Errorf("the gone pod's record outlived its eviction: %+v", r)
	}
}
