package admission

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/internal/podutil"
	"github.com/nodelet/nodelet/schemas"
)

// Three pods of one cpu arrive in order on a 2-cpu node: the first two are
// admitted, the third is OutOfcpu with the kubelet's message and a Warning
// event. Deleting the first frees its cpu for a fourth.
func TestOutOfCPUOnTwoCPUNode(t *testing.T) {
	h := newHarness(t)
	h.start()
	p1, p2, p3 := makePod("p1", 1, withCPU("1")), makePod("p2", 2, withCPU("1")), makePod("p3", 3, withCPU("1"))
	rev1 := h.put(p1)
	v1 := h.admitted(p1)
	if v1.DesiredRevision != rev1 || v1.Namespace != "default" || v1.Name != "p1" || v1.UID != "uid-p1" || v1.DecidedAt.IsZero() {
		t.Errorf("verdict fields: %+v (desired revision %d)", v1, rev1)
	}
	h.put(p2)
	h.admitted(p2)
	h.put(p3)
	msg := "Node didn't have enough resource: cpu, requested: 1000, used: 2000, capacity: 2000"
	h.rejected(p3, "OutOfcpu", msg)
	ev := h.waitEvent(p3)
	if ev.Type != corev1.EventTypeWarning || ev.Reason != "OutOfcpu" || ev.Message != msg || ev.Component != bus.Admission ||
		ev.Object.Kind != "Pod" || ev.Object.Namespace != "default" || ev.Object.Name != "p3" {
		t.Errorf("event: %+v", ev)
	}
	if h.eventCount(p1) != 0 || h.eventCount(p2) != 0 {
		t.Error("admitted pods got events")
	}

	h.remove(p1)
	h.waitGone(p1)
	p4 := makePod("p4", 4, withCPU("1"))
	h.put(p4)
	h.admitted(p4)
	// A rejection is final, as for the kubelet: freed cpu does not revive p3.
	h.rejected(p3, "OutOfcpu", msg)
	if n := h.eventCount(p3); n != 1 {
		t.Errorf("%d events for p3, want 1", n)
	}
}

// The node has a label and a NoExecute taint: a pod whose selector does
// not match is NodeAffinity, a matching one without toleration is
// TaintToleration, a matching one tolerating the taint is admitted.
func TestNodeSelectorAndTaint(t *testing.T) {
	h := newHarness(t, func(c *config.Config) {
		c.Node.Labels = map[string]string{"disk": "ssd"}
		c.Node.Taints = []config.Taint{{Key: "dedicated", Value: "db", Effect: "NoExecute"}}
	})
	h.start()
	tolerate := withToleration("dedicated", "db", corev1.TaintEffectNoExecute)
	mismatch := makePod("hdd", 1, withNodeSelector("disk", "hdd"), tolerate)
	untolerated := makePod("plain", 2, withNodeSelector("disk", "ssd"))
	tolerating := makePod("db", 3, withNodeSelector("disk", "ssd"), tolerate)
	for _, p := range []*corev1.Pod{mismatch, untolerated, tolerating} {
		h.put(p)
	}
	h.rejected(mismatch, "NodeAffinity", "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector")
	h.rejected(untolerated, "TaintToleration", "Predicate TaintToleration failed: node(s) had taints that the pod didn't tolerate")
	h.admitted(tolerating)
	if ev := h.waitEvent(mismatch); ev.Reason != "NodeAffinity" {
		t.Errorf("event: %+v", ev)
	}
}

// Pods that arrive together are decided oldest first, whatever order the
// bus delivers them in.
func TestBatchDecidedInCreationOrder(t *testing.T) {
	h := newHarness(t)
	// Put before the daemon starts: its first load is one batch.
	late, early := makePod("late", 20, withCPU("2")), makePod("early", 10, withCPU("2"))
	h.put(late)
	h.put(early)
	h.start()
	h.admitted(early)
	h.rejected(late, "OutOfcpu", "Node didn't have enough resource: cpu, requested: 2000, used: 2000, capacity: 2000")

	// Same creation time: the UID decides.
	// Pods removed while admission is down lose their verdict when it
	// starts again.
	b, a, c := makePod("b", 30, withCPU("1")), makePod("a", 30, withCPU("1")), makePod("c", 30, withCPU("1"))
	h.stop()
	h.remove(early)
	h.remove(late)
	h.put(b)
	h.put(c)
	h.put(a)
	h.start()
	h.admitted(a)
	h.admitted(b)
	h.rejected(c, "OutOfcpu", "")
	h.waitGone(early)
	h.waitGone(late)
}

// An update of an admitted pod passes through: the verdict is not
// rewritten, even when the update would no longer fit.
func TestUpdatePassesThrough(t *testing.T) {
	h := newHarness(t)
	h.start()
	p := makePod("p", 1, withCPU("1"))
	h.put(p)
	before := h.snapshot(p)
	grown := makePod("p", 1, withCPU("3"), withLabel("version", "2"))
	h.put(grown)
	h.barrier("marker")
	h.sameSnapshot(before, h.snapshot(p))
	// The update counts: the pod now holds 3 cpus, so nothing else fits.
	q := makePod("q", 2, withCPU("100m"))
	h.put(q)
	h.rejected(q, "OutOfcpu", "Node didn't have enough resource: cpu, requested: 100, used: 3000, capacity: 2000")
}

// Memory pressure from nodelet-gc refuses BestEffort pods only; the
// verdict carries the pressure revision it was decided under.
func TestPressureFromGC(t *testing.T) {
	h := newHarness(t)
	h.start()
	rev := h.pressure(corev1.NodeMemoryPressure)
	h.pressureSeen(rev)
	be, burst := makePod("besteffort", 1), makePod("burstable", 2, withCPU("100m"))
	h.put(be)
	h.put(burst)
	v := h.rejected(be, "Evicted", "The node had condition: [MemoryPressure]. ")
	if v.PressureRevision != rev {
		t.Errorf("pressure revision %d, want %d", v.PressureRevision, rev)
	}
	h.admitted(burst)

	h.pressureSeen(h.pressure(corev1.NodeDiskPressure))
	d := makePod("disk", 3, withCPU("100m"))
	h.put(d)
	h.rejected(d, "Evicted", "The node had condition: [DiskPressure]. ")

	h.pressureSeen(h.pressure())
	after := makePod("after", 4)
	h.put(after)
	h.admitted(after)
}

// A pod the runtime reports terminated no longer holds resources.
func TestTerminatedPodFreesResources(t *testing.T) {
	h := newHarness(t)
	h.start()
	job := makePod("job", 1, withCPU("2"), withRestartPolicy(corev1.RestartPolicyNever))
	h.put(job)
	h.admitted(job)
	blocked := makePod("blocked", 2, withCPU("1"))
	h.put(blocked)
	h.rejected(blocked, "OutOfcpu", "")

	// All its containers exited under restartPolicy Never: it is done.
	h.observe(schemas.PodObserved{UID: "uid-job", Namespace: "default", Name: "job", Generation: 1,
		Containers: []schemas.ContainerObserved{{Name: "c", Kind: schemas.ContainerKindApp,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}}}})
	deadline := time.Now().Add(waitFor)
	for i := 0; ; i++ {
		// The observed and desired watches are independent: retry with
		// new pods until the runtime's report has been seen.
		next := makePod("next-"+string(rune('a'+i)), 3+i, withCPU("1"))
		h.put(next)
		if v, _ := h.wait(next); v.Admitted {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the finished pod still holds its cpu")
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The admitted job keeps its verdict: it is a fact.
	h.admitted(job)
}

// A desired message that is not valid is logged and skipped; the others
// are decided.
func TestBadDesiredPodDisturbsNothing(t *testing.T) {
	h := newHarness(t)
	h.start()
	bad := makePod("bad", 1)
	if _, err := h.sources.Put(context.Background(), bus.BucketDesired, "not-its-uid", schemas.PodDesired{Pod: bad}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.sources.Put(context.Background(), bus.BucketDesired, "no-pod", schemas.PodDesired{}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.sources.PutRaw(context.Background(), bus.BucketDesired, "garbage", []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	good := makePod("good", 2)
	h.put(good)
	h.admitted(good)
	for _, key := range []string{"not-its-uid", "no-pod", "garbage"} {
		if v, _, err := bus.Get[schemas.AdmissionVerdict](context.Background(), h.reader, bus.BucketAdmission, key); err != nil || v != nil {
			t.Errorf("%s: verdict %+v, err %v", key, v, err)
		}
	}
}

// A static pod (file source) is critical: its taints are not checked, and
// when the node is full it preempts other pods to fit (the filler's verdict
// turns into a preemption, stored before the static pod's, with the
// kubelet's event); when no set of pods would free enough it is refused
// with UnexpectedAdmissionError.
func TestStaticPodIsCritical(t *testing.T) {
	h := newHarness(t, func(c *config.Config) { c.Node.Taints = []config.Taint{{Key: "k", Effect: "NoExecute"}} })
	h.start()
	filler := makePod("filler", 1, withCPU("2"), withToleration("k", "", ""))
	h.put(filler)
	h.admitted(filler)
	putStatic := func(p *corev1.Pod) {
		t.Helper()
		if _, err := h.sources.Put(context.Background(), bus.BucketDesired, string(p.UID),
			schemas.PodDesired{Pod: p, Source: schemas.SourceFile}); err != nil {
			t.Fatal(err)
		}
	}
	huge := makePod("huge", 2, withCPU("1000"), withAnnotation(podutil.AnnotationConfigSource, schemas.SourceFile))
	putStatic(huge)
	h.rejected(huge, "UnexpectedAdmissionError", "Unexpected error while attempting to recover from admission failure: "+
		"preemption: error finding a set of pods to preempt: no set of running pods found to reclaim resources: [(res: cpu, q: 998000), ]")
	if v, _ := h.verdict(filler); !v.Admitted {
		t.Fatalf("a refused critical pod preempted the filler: %+v", v)
	}

	static := makePod("static", 3, withCPU("1"), withAnnotation(podutil.AnnotationConfigSource, schemas.SourceFile))
	putStatic(static)
	h.admitted(static)
	v, fillerRev := h.verdict(filler)
	if v.Admitted || !v.Preempted || v.Reason != schemas.ReasonPreempting || v.Message != schemas.MessagePreempted {
		t.Fatalf("filler: want preempted, got %+v", v)
	}
	if _, staticRev := h.verdict(static); fillerRev > staticRev {
		t.Errorf("the preemption (rev %d) was stored after the critical pod's verdict (rev %d)", fillerRev, staticRev)
	}
	if ev := h.waitEvent(filler); ev.Type != corev1.EventTypeWarning || ev.Reason != schemas.ReasonPreempting || ev.Message != schemas.MessagePreempted {
		t.Errorf("filler event = %+v", ev)
	}
}

// admission.disabled admits everything.
func TestDisabled(t *testing.T) {
	h := newHarness(t, func(c *config.Config) { c.Admission.Disabled = true })
	h.start()
	p := makePod("huge", 1, withCPU("64"), withNodeSelector("no", "such"))
	h.put(p)
	h.admitted(p)
}
