package soak

import (
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
	tr := &podTracker{node: "node-1", pods: map[types.UID]*corev1.Pod{}, restarts: map[types.UID]int{}}
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
