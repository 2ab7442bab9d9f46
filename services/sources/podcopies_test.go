package sources

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/schemas"
)

func listed(pods ...*corev1.Pod) []any {
	out := make([]any, len(pods))
	for i, p := range pods {
		out[i] = p
	}
	return out
}

func TestPodCopiesCopyOnlyWhatChanged(t *testing.T) {
	a, b := boundPod("a", "n"), boundPod("b", "n")
	a.UID, b.UID = "uid-a", "uid-b"
	var c podCopies

	first := c.take(append(listed(a, b), "not a pod"))
	if len(first) != 2 {
		t.Fatalf("first list: %d pods, want 2 (a non-pod is left out)", len(first))
	}
	for i, p := range []*corev1.Pod{a, b} {
		if first[i] == p {
			t.Fatalf("pod %s handed over as the informer's own object", p.Name)
		}
	}

	// b changes: the informer replaces its object; a stays.
	b2 := b.DeepCopy()
	b2.Status.Phase = corev1.PodRunning
	second := c.take(listed(a, b2))
	if second[0] != first[0] {
		t.Error("unchanged pod a copied again")
	}
	if second[1] == first[1] || second[1] == b2 || second[1].Status.Phase != corev1.PodRunning {
		t.Errorf("changed pod b: got %p (phase %q), want a new copy of the new object", second[1], second[1].Status.Phase)
	}

	// a leaves: its copy is forgotten; should its old object come back
	// (it cannot, but a relist may return an equal new one), it is copied.
	third := c.take(listed(b2))
	if len(third) != 1 || third[0] != second[1] || len(c.last) != 1 {
		t.Fatalf("after a left: %d pods, %d copies kept", len(third), len(c.last))
	}
	if again := c.take(listed(a, b2)); again[0] == first[0] {
		t.Error("copy of a pod no longer listed was kept")
	}
}

// BenchmarkPodCopies is one pod's status update at 110 pods: the list
// handed over, copying every pod (as before) against copying what changed.
func BenchmarkPodCopies(b *testing.B) {
	pods := make([]*corev1.Pod, 110)
	for i := range pods {
		pods[i] = boundPod(fmt.Sprintf("p-%d", i), "n")
		pods[i].UID = types.UID(fmt.Sprintf("uid-%d", i))
		pods[i].Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "c", Ready: true}}
	}
	update := func(i int) []any {
		p := pods[i%len(pods)].DeepCopy()
		p.ResourceVersion = fmt.Sprint(i)
		pods[i%len(pods)] = p
		return listed(pods...)
	}
	b.Run("every pod", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			objs := update(i)
			out := make([]*corev1.Pod, 0, len(objs))
			for _, o := range objs {
				out = append(out, o.(*corev1.Pod).DeepCopy())
			}
		}
	})
	b.Run("what changed", func(b *testing.B) {
		b.ReportAllocs()
		var c podCopies
		c.take(listed(pods...))
		for i := 0; b.Loop(); i++ {
			c.take(update(i))
		}
	})
}

// The store compares a pod with the source's object only when the object
// is new: the same object again is no change and keeps the entry's gen; a
// new object with a change is one, and moves the gen the flush writes by.
func TestStoreComparesOnlyNewObjects(t *testing.T) {
	s := newStore(clocktesting.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)), discardLogger())
	api := schemas.SourceAPI
	a, b := apiPod("u1", "a"), apiPod("u2", "b")
	gens := func() (uint64, uint64) {
		m := s.sources[api]
		return m["u1"].gen, m["u2"].gen
	}
	if got := ops(s.set(api, []*corev1.Pod{a, b})); got != "ADD:a,ADD:b" {
		t.Fatalf("first list: %q", got)
	}
	ga, gb := gens()
	if got := ops(s.set(api, []*corev1.Pod{a, b})); got != "" {
		t.Fatalf("the same objects again: %q, want no change", got)
	}
	if a2, b2 := gens(); a2 != ga || b2 != gb {
		t.Fatalf("gens moved without a change: %d,%d → %d,%d", ga, gb, a2, b2)
	}
	b2 := b.DeepCopy()
	b2.Status.Phase = corev1.PodRunning
	if got := ops(s.set(api, []*corev1.Pod{a, b2})); got != "RECONCILE:b" {
		t.Fatalf("b's new object: %q, want RECONCILE:b", got)
	}
	if a3, b3 := gens(); a3 != ga || b3 == gb {
		t.Fatalf("gens after b changed: a %d→%d, b %d→%d", ga, a3, gb, b3)
	}
	// An equal new object (a relist) is compared and is no change.
	if got := ops(s.set(api, []*corev1.Pod{a.DeepCopy(), b2})); got != "" {
		t.Fatalf("an equal new object of a: %q, want no change", got)
	}
}

// BenchmarkStoreSet is a list of 110 pods of which one changed, handed
// over as podCopies does: the same objects but one.
func BenchmarkStoreSet(b *testing.B) {
	s := newStore(clocktesting.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)), discardLogger())
	pods := make([]*corev1.Pod, 110)
	for i := range pods {
		pods[i] = apiPod(fmt.Sprintf("u%d", i), fmt.Sprintf("p%d", i))
	}
	s.set(schemas.SourceAPI, pods)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		p := pods[i%len(pods)].DeepCopy()
		p.Status.Message = fmt.Sprint(i)
		pods[i%len(pods)] = p
		s.set(schemas.SourceAPI, pods)
	}
}
