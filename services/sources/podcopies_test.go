package sources

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
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
