package bench

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/tools/tap"
	"github.com/nodelet/nodelet/schemas"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func at(msec int) time.Time { return t0.Add(time.Duration(msec) * time.Millisecond) }

func TestStageDurations(t *testing.T) {
	tests := []struct {
		name    string
		tl      Timeline
		want    []time.Duration
		end     time.Time
		missing int
	}{
		{
			name: "every moment seen",
			tl:   Timeline{Written: at(0), Desired: at(100), Admitted: at(110), SandboxReady: at(600), Started: at(900), Observed: at(920), Status: at(930)},
			want: ms(100, 10, 490, 300, 20, 10), end: at(930),
		},
		{
			name: "a missing moment makes the next stage longer and is counted",
			tl:   Timeline{Written: at(0), Desired: at(100), Admitted: at(110), Started: at(900), Observed: at(920), Status: at(930)},
			want: ms(100, 10, 0, 790, 20, 10), end: at(930), missing: 1,
		},
		{
			name: "a moment before the one before counts as the one before",
			tl:   Timeline{Written: at(0), Desired: at(100), Admitted: at(99), SandboxReady: at(600), Started: at(900), Observed: at(920), Status: at(930)},
			want: ms(100, 0, 500, 300, 20, 10), end: at(930),
		},
		{
			name: "the floor ends at Started: no trailing moments are missing",
			tl:   Timeline{Written: at(0), Desired: at(0), Admitted: at(0), SandboxReady: at(400), Started: at(700)},
			want: ms(0, 0, 400, 300, 0, 0), end: at(700),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, end, missing := tc.tl.StageDurations()
			if len(got) != len(Stages) {
				t.Fatalf("%d stages, want %d", len(got), len(Stages))
			}
			var sum time.Duration
			for i := range got {
				sum += got[i]
				if got[i] != tc.want[i] {
					t.Errorf("stage %s = %v, want %v", Stages[i].Name, got[i], tc.want[i])
				}
			}
			if !end.Equal(tc.end) || missing != tc.missing {
				t.Errorf("end %v missing %d, want %v %d", end, missing, tc.end, tc.missing)
			}
			if sum != end.Sub(tc.tl.Written) {
				t.Errorf("stages add up to %v, not end − written %v", sum, end.Sub(tc.tl.Written))
			}
		})
	}
}

func TestComputeBreakdownAddsUp(t *testing.T) {
	pods := []Timeline{
		{Written: at(0), Desired: at(120), Admitted: at(130), SandboxReady: at(700), Started: at(1000), Observed: at(1010), Status: at(1020), Measured: at(1030)},
		{Written: at(0), Desired: at(110), Admitted: at(125), SandboxReady: at(1500), Started: at(1900), Observed: at(1950), Status: at(1960), Measured: at(1970)},
		{Written: at(0), Desired: at(115), Admitted: at(118), Started: at(3000), Observed: at(3040), Status: at(3050), Measured: at(3060)},
	}
	b := ComputeBreakdown(pods, 0.10)
	if b.Pods != 3 || b.Incomplete != 1 {
		t.Fatalf("pods %d incomplete %d, want 3 and 1", b.Pods, b.Incomplete)
	}
	var sum Dur
	for _, s := range b.Stages {
		sum += s.Mean
	}
	if sum != b.Sum {
		t.Fatalf("stage means add up to %v, Sum says %v", sum, b.Sum)
	}
	// Mean of Status − Written = (1020+1960+3050)/3 = 2010 ms (the stage
	// means are whole nanoseconds: a few of rounding).
	if d := b.Sum.D() - 2010*time.Millisecond; d < -10 || d > 10 || b.Measured.D() != 2020*time.Millisecond {
		t.Fatalf("sum %v measured %v, want 2.01s and 2.02s", b.Sum, b.Measured)
	}
	if !b.Within || b.Deviation > 0.01 {
		t.Fatalf("deviation %v within %v", b.Deviation, b.Within)
	}
	if b.Stages[0].Name != "sources" || b.Stages[0].P50.D() != 115*time.Millisecond {
		t.Fatalf("sources stage %+v", b.Stages[0])
	}

	// A measured start far beyond the stages: the breakdown misses time.
	pods[0].Measured = at(9000)
	if b := ComputeBreakdown(pods, 0.10); b.Within || b.Deviation < 0.10 {
		t.Fatalf("a breakdown 2.6 s short of the measured start is within tolerance: %+v", b)
	}
	if b := ComputeBreakdown(nil, 0.10); b.Pods != 0 || b.Within {
		t.Fatalf("empty breakdown %+v", b)
	}
}

func encode(t *testing.T, producer string, when time.Time, m schemas.Message) []byte {
	t.Helper()
	b, err := schemas.EncodeAt(producer, when, m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The timelines come from what the daemons put on the bus, read back in
// stream order (not time order), so the earliest qualifying message wins.
func TestTimelinesFromBus(t *testing.T) {
	const uid = "u1"
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p000-bench", Namespace: Namespace, UID: types.UID(uid)}}
	running := corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	ready := corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	notReady := corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}}
	kv := tap.BucketStream
	msgs := []struct {
		stream string
		data   []byte
	}{
		{kv(bus.BucketDesired), encode(t, "sources", at(300), &schemas.PodDesired{Pod: pod})}, // a later update
		{kv(bus.BucketDesired), encode(t, "sources", at(100), &schemas.PodDesired{Pod: pod})},
		{kv(bus.BucketDesired), nil}, // a delete
		{kv(bus.BucketAdmission), encode(t, "admission", at(105), &schemas.AdmissionVerdict{UID: uid, Admitted: false})},
		{kv(bus.BucketAdmission), encode(t, "admission", at(110), &schemas.AdmissionVerdict{UID: uid, Admitted: true})},
		{kv(bus.BucketObserved), encode(t, "runtime", at(200), &schemas.PodObserved{UID: uid,
			Containers: []schemas.ContainerObserved{{Name: "sleep"}}})},
		{kv(bus.BucketObserved), encode(t, "runtime", at(950), &schemas.PodObserved{UID: uid, Sandbox: &schemas.SandboxObserved{Ready: true},
			Containers: []schemas.ContainerObserved{{Name: "sleep", State: running}}})},
		{kv(bus.BucketObserved), encode(t, "runtime", at(5000), &schemas.PodObserved{UID: uid, Terminating: true,
			Containers: []schemas.ContainerObserved{{Name: "sleep", State: running}}})},
		{bus.EventsStream(bus.Runtime), encode(t, "runtime", at(610), &schemas.Event{Component: "runtime", Reason: "Pulled", Time: at(610),
			Object: corev1.ObjectReference{UID: types.UID(uid)}})},
		{bus.EventsStream(bus.Runtime), encode(t, "runtime", at(700), &schemas.Event{Component: "runtime", Reason: "Created", Time: at(700),
			Object: corev1.ObjectReference{UID: types.UID(uid)}})},
		{bus.EventsStream(bus.Runtime), encode(t, "runtime", at(900), &schemas.Event{Component: "runtime", Reason: "Started", Time: at(900),
			Object: corev1.ObjectReference{UID: types.UID(uid)}})},
		{bus.EventsStream(bus.Status), encode(t, "status", at(50), &schemas.Event{Component: "status", Reason: "Started", Time: at(50),
			Object: corev1.ObjectReference{UID: types.UID(uid)}})}, // not the runtime's
		{kv(bus.BucketStatus), encode(t, "status", at(960), &schemas.PodStatusRecord{UID: uid, Status: notReady})},
		{kv(bus.BucketStatus), encode(t, "status", at(980), &schemas.PodStatusRecord{UID: uid, Status: ready})},
		{kv(bus.BucketObserved), []byte(`{"schema":"nodelet.v1.PodObserved","time":"x"}`)}, // garbage is skipped
		{kv(bus.BucketStatus), encode(t, "status", at(1), &schemas.PodStatusRecord{UID: "someone-else", Status: ready})},
	}
	tl := newTimelines()
	for _, m := range msgs {
		feed(tl, m.stream, m.data)
	}
	got := tl.byPod()
	if len(got) != 1 {
		t.Fatalf("timelines of %d pods, want only the one in the desired bucket: %+v", len(got), got)
	}
	x := got[Namespace+"/p000-bench"]
	if x == nil {
		t.Fatalf("no timeline for the pod: %+v", got)
	}
	want := Timeline{Pod: Namespace + "/p000-bench", UID: uid, Desired: at(100), Admitted: at(110), SandboxReady: at(610),
		Started: at(900), Observed: at(950), Status: at(980)}
	if *x != want {
		t.Fatalf("timeline\n got %+v\nwant %+v", *x, want)
	}
}
