package soak

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// The tracker counts a lifecycle for each pod of the node deleted from the
// API, and names those the drain leaves there.
func TestPodTracker(t *testing.T) {
	tr := newPodTracker("node-1")
	now := time.Date(2026, 12, 5, 5, 30, 0, 0, time.UTC)
	pod := func(name, node string, phase corev1.PodPhase, restarts int32) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)},
			Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: phase,
				ContainerStatuses: []corev1.ContainerStatus{{RestartCount: restarts}}}}
	}
	tr.set(pod("a", "node-1", corev1.PodRunning, 2))
	tr.set(pod("b", "node-1", corev1.PodSucceeded, 0))
	tr.set(pod("c", "", corev1.PodPending, 0))
	stuck := pod("d", "node-1", corev1.PodPending, 0)
	stuck.DeletionTimestamp = &metav1.Time{Time: now.Add(-90 * time.Second)}
	tr.set(stuck)
	// A delete the informer missed comes as its last known state; the
	// highest restart count seen stays.
	tr.deleted(cache.DeletedFinalStateUnknown{Key: "a", Obj: pod("a", "node-1", corev1.PodRunning, 1)})
	tr.deleted(pod("c", "", corev1.PodPending, 0)) // never bound: no lifecycle
	got := tr.counts()
	if got.Lifecycles != 1 || got.Restarts != 2 || got.Live != 1 || got.Bound != 1 || got.Total != 2 {
		t.Errorf("counts %+v", got)
	}
	want := []string{"b Succeeded uid uid-b", "d Pending uid uid-d, grace period over 90s ago"}
	if r := tr.remaining(now); !reflect.DeepEqual(r, want) {
		t.Errorf("remaining %q, want %q", r, want)
	}
}

// A pod's start latency is from its binding to its first container's
// start (an init container's included), counted once per pod of the node.
func TestPodStartLatency(t *testing.T) {
	tr := newPodTracker("node-1")
	t0 := time.Date(2026, 12, 6, 17, 0, 0, 0, time.UTC)
	at := func(s int) metav1.Time { return metav1.Time{Time: t0.Add(time.Duration(s) * time.Second)} }
	pod := func(name, node string, scheduled int, init, main *corev1.ContainerState) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)}, Spec: corev1.PodSpec{NodeName: node}}
		if scheduled >= 0 {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: at(scheduled)}}
		}
		if init != nil {
			p.Status.InitContainerStatuses = []corev1.ContainerStatus{{State: *init}}
		}
		if main != nil {
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{State: *main}}
		}
		return p
	}
	running := func(s int) *corev1.ContainerState {
		return &corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: at(s)}}
	}
	done := func(s int) *corev1.ContainerState {
		return &corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{StartedAt: at(s), FinishedAt: at(s + 1)}}
	}
	waiting := &corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}

	tr.set(pod("before", "node-1", -60, nil, running(-50))) // bound before the window: left out
	tr.set(pod("a", "node-1", 0, nil, waiting))             // not started yet
	tr.set(pod("a", "node-1", 0, nil, running(5)))          // now 5 s
	tr.set(pod("a", "node-1", 0, nil, running(40)))         // restarted: still 5 s, counted once
	tr.set(pod("b", "node-1", 10, done(12), running(20)))   // its init container started first: 2 s
	tr.set(pod("c", "node-2", 0, nil, running(1)))          // another node's
	tr.set(pod("d", "node-1", -1, nil, nil))                // never scheduled nor started
	for i := range 7 {
		tr.set(pod(fmt.Sprint("e", i), "node-1", 20, nil, running(20+60*(i+1)))) // 60 … 420 s
	}
	got := tr.startLatency(t0)
	want := &Latency{N: 9, P50: 180, P90: 420, P99: 420, Max: 420}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("start latency %+v, want %+v", got, want)
	}
	if l := tr.startLatency(t0.Add(time.Hour)); l != nil {
		t.Errorf("no pod bound after the window's start: %+v", l)
	}
}

func TestLatencyOf(t *testing.T) {
	v := make([]float64, 100)
	for i := range v {
		v[i] = float64(100 - i) // 100 … 1, unsorted
	}
	if got, want := latencyOf(v), (&Latency{N: 100, P50: 50, P90: 90, P99: 99, Max: 100}); !reflect.DeepEqual(got, want) {
		t.Errorf("%+v, want %+v", got, want)
	}
	if v[0] != 100 {
		t.Error("latencyOf sorted its argument")
	}
	if latencyOf(nil) != nil || (*Latency)(nil).String() != "-" {
		t.Error("no values: want nil, shown as -")
	}
}
