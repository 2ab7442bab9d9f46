package explain

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/bus/bustest"
	"github.com/nodelet/nodelet/schemas"
)

// node plays every component on a real bus, each with its own credential,
// writing what that component writes.
type node struct {
	t                                           *testing.T
	ctx                                         context.Context
	sources, admission, runtime, prober, status *bus.Conn
	tap                                         *bus.Conn
}

func newNode(t *testing.T) *node {
	b := bustest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return &node{t: t, ctx: ctx,
		sources: b.Connect(bus.Sources), admission: b.Connect(bus.Admission), runtime: b.Connect(bus.Runtime),
		prober: b.Connect(bus.Prober), status: b.Connect(bus.Status), tap: b.Connect(bus.Tap)}
}

func (n *node) put(c *bus.Conn, bucket, key string, m schemas.Message) {
	n.t.Helper()
	if _, err := c.Put(n.ctx, bucket, key, m); err != nil {
		n.t.Fatal(err)
	}
	// Distinct stored times, so the story's order is the order written.
	time.Sleep(5 * time.Millisecond)
}

func (n *node) event(c *bus.Conn, uid, ns, name, container, typ, reason, msg string) {
	n.t.Helper()
	ref := corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: name, UID: types.UID(uid)}
	if container != "" {
		ref.FieldPath = "spec.containers{" + container + "}"
	}
	c.Emit(schemas.Event{Object: ref, Type: typ, Reason: reason, Message: msg})
	if err := c.FlushEvents(n.ctx); err != nil {
		n.t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
}

func (n *node) explain(pod string) (*Story, string) {
	n.t.Helper()
	s, err := Explain(n.ctx, n.tap, pod)
	if err != nil {
		n.t.Fatalf("explain %s: %v", pod, err)
	}
	var b strings.Builder
	if err := s.Write(&b); err != nil {
		n.t.Fatal(err)
	}
	return s, b.String()
}

func lastLine(out string) string {
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	return lines[len(lines)-1]
}

func desired(uid, ns, name string, cpu string) schemas.PodDesired {
	c := corev1.Container{Name: "app", Image: "nodelet.local/busybox:1.35"}
	if cpu != "" {
		c.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}
	}
	return schemas.PodDesired{
		Pod: &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid), Namespace: ns, Name: name},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{c}, RestartPolicy: corev1.RestartPolicyAlways},
		},
		Source: schemas.SourceFile, FirstSeen: time.Now().UTC(),
	}
}

// TestRejectedPod: a pod admission rejected is explained by name,
// namespace/name and UID, and the last line names admission and the
// kubelet's reason and message.
func TestRejectedPod(t *testing.T) {
	n := newNode(t)
	uid := "5d1a7d1c-0000-4000-8000-000000000001"
	n.put(n.sources, bus.BucketDesired, uid, desired(uid, "default", "big", "64"))
	v := schemas.AdmissionVerdict{UID: uid, Namespace: "default", Name: "big", Reason: "OutOfcpu",
		Message: "Node didn't have enough resource: cpu, requested: 64000, used: 0, capacity: 2000", DecidedAt: time.Now().UTC()}
	n.put(n.admission, bus.BucketAdmission, uid, v)
	n.event(n.admission, uid, "default", "big", "", corev1.EventTypeWarning, v.Reason, v.Message)

	for _, arg := range []string{"big", "default/big", uid} {
		s, out := n.explain(arg)
		if s.UID != uid || s.Namespace != "default" || s.Name != "big" {
			t.Errorf("explain %s found %s/%s %s", arg, s.Namespace, s.Name, s.UID)
		}
		want := "rejected by admission: OutOfcpu: Node didn't have enough resource: cpu, requested: 64000, used: 0, capacity: 2000"
		if last := lastLine(out); !strings.HasPrefix(last, "now") || !strings.Contains(last, "admission") || !strings.Contains(last, want) {
			t.Errorf("explain %s: last line %q, want admission and %q\n%s", arg, last, want, out)
		}
		for _, w := range []string{"sources   desired, from the file source; containers app", "admission rejected: OutOfcpu", "event OutOfcpu: Node didn't"} {
			if !strings.Contains(out, w) {
				t.Errorf("explain %s: no %q in\n%s", arg, w, out)
			}
		}
	}
}

func running(id string, restarts int32, last *corev1.ContainerStateTerminated) schemas.ContainerObserved {
	c := schemas.ContainerObserved{Name: "app", Kind: schemas.ContainerKindApp, ContainerID: "containerd://" + id, RestartCount: restarts,
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}
	c.LastTerminationState.Terminated = last
	return c
}

func exited(id string, code int32) *corev1.ContainerStateTerminated {
	return &corev1.ContainerStateTerminated{ExitCode: code, Reason: "Error", ContainerID: "containerd://" + id,
		StartedAt: metav1.Now(), FinishedAt: metav1.NewTime(time.Now().Add(time.Duration(code) * time.Millisecond))}
}

// TestCrashLoop: a container that keeps exiting 1 is told as the runtime
// publishes it: each exit with its code once, the back-offs (observed waits
// and BackOff events), and a last line with restarts, exit code and delay.
func TestCrashLoop(t *testing.T) {
	n := newNode(t)
	uid := "5d1a7d1c-0000-4000-8000-000000000002"
	n.put(n.sources, bus.BucketDesired, uid, desired(uid, "default", "crash", ""))
	n.put(n.admission, bus.BucketAdmission, uid, schemas.AdmissionVerdict{UID: uid, Namespace: "default", Name: "crash", Admitted: true})
	sb := &schemas.SandboxObserved{ID: "0123456789abcdef0123", Ready: true, IPs: []string{"10.88.0.7"}, CreatedAt: time.Now().UTC()}
	obs := func(gen uint64, c schemas.ContainerObserved) {
		n.put(n.runtime, bus.BucketObserved, uid, schemas.PodObserved{UID: uid, Namespace: "default", Name: "crash",
			Sandbox: sb, Containers: []schemas.ContainerObserved{c}, Generation: gen})
	}
	obs(1, schemas.ContainerObserved{Name: "app", Kind: schemas.ContainerKindApp,
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}})
	var last *corev1.ContainerStateTerminated
	delays := []string{"10s", "20s", "40s"}
	for i, delay := range delays {
		id := fmt.Sprintf("c%d", i)
		n.event(n.runtime, uid, "default", "crash", "app", corev1.EventTypeNormal, "Started", "Started container app")
		obs(uint64(2+2*i), running(id, int32(i), last))
		last = exited(id, 1)
		n.event(n.runtime, uid, "default", "crash", "app", corev1.EventTypeWarning, "BackOff",
			"Back-off restarting failed container app in pod crash_default("+uid+")")
		obs(uint64(3+2*i), schemas.ContainerObserved{Name: "app", Kind: schemas.ContainerKindApp, ContainerID: "containerd://" + id,
			RestartCount: int32(i), LastTerminationState: corev1.ContainerState{Terminated: last},
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff",
				Message: "back-off " + delay + " restarting failed container=app pod=crash_default(" + uid + ")"}}})
	}

	_, out := n.explain("crash")
	if got := strings.Count(out, "container app exited with code 1 (Error)"); got != len(delays) {
		t.Errorf("%d exits told, want %d (each once)\n%s", got, len(delays), out)
	}
	if got := strings.Count(out, "event container app: BackOff: Back-off restarting failed container app"); got != len(delays) {
		t.Errorf("%d BackOff events, want %d\n%s", got, len(delays), out)
	}
	for _, w := range []string{"sandbox 0123456789ab created", "sandbox ready, IPs 10.88.0.7",
		"container app waiting: CrashLoopBackOff: back-off 20s restarting failed container=app",
		"container app running (restart 2)"} {
		if !strings.Contains(out, w) {
			t.Errorf("no %q in\n%s", w, out)
		}
	}
	last1 := lastLine(out)
	for _, w := range []string{"runtime   running; container app in CrashLoopBackOff: restarted 2 times, last exit code 1 (Error), back-off 40s"} {
		if !strings.Contains(last1, w) {
			t.Errorf("last line %q lacks %q\n%s", last1, w, out)
		}
	}
	// Lines are in time order.
	if i, j := strings.Index(out, "back-off 10s"), strings.Index(out, "back-off 20s"); i < 0 || j < i {
		t.Errorf("back-offs out of order\n%s", out)
	}
}

// TestNames: a name in two namespaces is ambiguous; a name reused by a
// newer pod resolves to the newest and names the older; an unknown pod is
// an error.
func TestNames(t *testing.T) {
	n := newNode(t)
	n.put(n.sources, bus.BucketDesired, "uid-a", desired("uid-a", "a", "web", ""))
	n.put(n.sources, bus.BucketDesired, "uid-b", desired("uid-b", "b", "web", ""))
	n.put(n.sources, bus.BucketDesired, "uid-old", desired("uid-old", "c", "job", ""))
	if err := n.sources.Delete(n.ctx, bus.BucketDesired, "uid-old"); err != nil {
		t.Fatal(err)
	}
	n.put(n.sources, bus.BucketDesired, "uid-new", desired("uid-new", "c", "job", ""))
	n.put(n.sources, bus.BucketDesired, "uid-dots", desired("uid-dots", "c", "web.v1", ""))

	if _, err := Explain(n.ctx, n.tap, "web"); err == nil || !strings.Contains(err.Error(), "a/web, b/web") {
		t.Errorf("ambiguous name: err = %v", err)
	}
	if s, _ := n.explain("b/web"); s.UID != "uid-b" {
		t.Errorf("b/web = %s", s.UID)
	}
	s, out := n.explain("c/job")
	if s.UID != "uid-new" || len(s.Others) != 1 || s.Others[0] != "uid-old" {
		t.Errorf("c/job = %s, others %v", s.UID, s.Others)
	}
	if !strings.Contains(lastLine(out), "waiting for admission") {
		t.Errorf("last line %q", lastLine(out))
	}
	_, out = n.explain("uid-old")
	if last := lastLine(out); !strings.Contains(last, "gone: removed from the desired pods") {
		t.Errorf("deleted pod: last line %q\n%s", last, out)
	}
	if s, _ := n.explain("web.v1"); s.UID != "uid-dots" {
		t.Errorf("web.v1 = %s", s.UID)
	}
	if _, err := Explain(n.ctx, n.tap, "nosuch"); err == nil || !strings.Contains(err.Error(), `no pod "nosuch"`) {
		t.Errorf("unknown pod: err = %v", err)
	}
}
