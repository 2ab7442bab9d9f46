package bench

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/bus/bustest"
	"github.com/nodelet/nodelet/internal/testenv"
	"github.com/nodelet/nodelet/schemas"
)

// The floor's pods run on a real containerd, the observer sees them, and
// the teardown leaves nothing behind.
func TestFloorOnContainerd(t *testing.T) {
	ctrd := testenv.NewContainerd(t, testenv.ContainerdOptions{})
	t.Cleanup(func() { removeCgroups(CgroupRoot) })
	c, err := dialCRI(ctrd.Address)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	var pods []*floorPod
	want := map[string]bool{}
	for i, name := range podNames(2) {
		p := &floorPod{name: name + "-" + NodeName, uid: "floor-test-uid-" + string(rune('a'+i)), dir: t.TempDir()}
		pods = append(pods, p)
		want[p.ref()] = true
	}
	t0 := time.Now()
	tls, err := floorStart(ctx, c, pods, 1, t0)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := c.waitRunning(ctx, want)
	if err != nil {
		t.Fatal(err)
	}
	started, err := c.startedAt(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	for _, tl := range tls {
		if !want[tl.Pod] || tl.SandboxReady.Before(t0) || tl.Started.Before(tl.SandboxReady) {
			t.Errorf("timeline out of order: %+v", tl)
		}
		at := started[tl.Pod]
		if at.Before(t0) || at.After(tl.Started.Add(time.Second)) {
			t.Errorf("%s: CRI StartedAt %v outside [%v, %v]", tl.Pod, at, t0, tl.Started)
		}
	}
	st, err := c.rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: pods[0].ctrID})
	if err != nil || st.Status.Labels[labelContainer] != containerName || len(st.Status.Mounts) < 2 {
		t.Fatalf("container status %+v, %v", st, err)
	}

	// The pause process runs under the runtime's default seccomp filter,
	// as the kubelet's and nodelet's sandboxes do.
	sb, err := c.rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: pods[0].sandboxID, Verbose: true})
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		RuntimeSpec struct {
			Linux struct {
				Seccomp *struct {
					DefaultAction string `json:"defaultAction"`
				} `json:"seccomp"`
			} `json:"linux"`
		} `json:"runtimeSpec"`
	}
	if err := json.Unmarshal([]byte(sb.Info["info"]), &info); err != nil {
		t.Fatalf("sandbox info: %v", err)
	}
	if sp := info.RuntimeSpec.Linux.Seccomp; sp == nil || sp.DefaultAction == "SCMP_ACT_ALLOW" {
		t.Fatalf("the floor's sandbox runs without the default seccomp filter: %+v", sp)
	}

	if err := floorStop(ctx, c, pods); err != nil {
		t.Fatal(err)
	}
	if err := c.waitGone(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := c.removeAll(ctx); n != 0 || err != nil {
		t.Fatalf("removeAll after teardown: %d, %v", n, err)
	}
}

// readBurst reads back, with the tap's read-only credential, what the
// daemons stored after a mark: it counts every message and builds the
// pods' timelines; what came before the mark is not counted.
func TestReadBurstOnBus(t *testing.T) {
	bb := bustest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	src, adm, rt, st, tapc := bb.Connect(bus.Sources), bb.Connect(bus.Admission), bb.Connect(bus.Runtime), bb.Connect(bus.Status), bb.Connect(bus.Tap)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p000-bench", Namespace: Namespace, UID: "u1"}}
	if _, err := src.Put(ctx, bus.BucketDesired, "before", &schemas.PodDesired{Pod: pod}); err != nil {
		t.Fatal(err)
	}
	from, err := markStreams(ctx, tapc)
	if err != nil {
		t.Fatal(err)
	}
	mustPut := func(c *bus.Conn, bucket, key string, m schemas.Message) {
		t.Helper()
		if _, err := c.Put(ctx, bucket, key, m); err != nil {
			t.Fatal(err)
		}
	}
	mustPut(src, bus.BucketDesired, "u1", &schemas.PodDesired{Pod: pod})
	mustPut(adm, bus.BucketAdmission, "u1", &schemas.AdmissionVerdict{UID: "u1", Admitted: true})
	rt.Emit(schemas.Event{Reason: "Started", Object: corev1.ObjectReference{UID: "u1"}})
	if err := rt.FlushEvents(ctx); err != nil {
		t.Fatal(err)
	}
	mustPut(rt, bus.BucketObserved, "u1", &schemas.PodObserved{UID: "u1", Sandbox: &schemas.SandboxObserved{Ready: true},
		Containers: []schemas.ContainerObserved{{Name: "sleep", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}})
	mustPut(st, bus.BucketStatus, "u1", &schemas.PodStatusRecord{UID: "u1", Status: corev1.PodStatus{Phase: corev1.PodRunning,
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}})
	until := time.Now()
	to, err := markStreams(ctx, tapc)
	if err != nil {
		t.Fatal(err)
	}
	if err := src.Delete(ctx, bus.BucketDesired, "u1"); err != nil { // after until: not counted
		t.Fatal(err)
	}

	tl, cost, err := readBurst(ctx, tapc, from, until)
	if err != nil {
		t.Fatal(err)
	}
	if total, _ := stored(from, to); cost.Messages != 5 || total != 5 {
		t.Fatalf("counted %d messages (%d stored between the marks), want 5: %+v", cost.Messages, total, cost.ByStream)
	}
	if cost.Bytes < 500 || cost.ByStream[bus.EventsStream(bus.Runtime)] != 1 {
		t.Fatalf("cost %+v", cost)
	}
	x := tl.byPod()[Namespace+"/p000-bench"]
	if x == nil || x.Desired.IsZero() || x.Admitted.IsZero() || x.Started.IsZero() || x.SandboxReady.IsZero() ||
		x.Observed.IsZero() || x.Status.IsZero() {
		t.Fatalf("timeline incomplete: %+v", x)
	}
	if x.Status.Before(x.Desired) || x.Status.After(until) {
		t.Fatalf("timeline out of order: %+v", x)
	}
}
