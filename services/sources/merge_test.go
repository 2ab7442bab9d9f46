package sources

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/podutil"
	"github.com/nodelet/nodelet/schemas"
)

func apiPod(uid, name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid), Name: name, Namespace: "ns", ResourceVersion: "1",
			Labels: map[string]string{"app": name}, Annotations: map[string]string{"a": "1"}},
		Spec: corev1.PodSpec{NodeName: "n", Containers: []corev1.Container{{Name: "c", Image: "i",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
}

func ops(cs []Change) string {
	var s []string
	for _, c := range cs {
		s = append(s, string(c.Op)+":"+c.Pod.Name)
	}
	return strings.Join(s, ",")
}

// TestStoreOps walks one source through every kind of change, as the
// kubelet's PodConfig tells them apart.
func TestStoreOps(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	s := newStore(clk, discardLogger())
	api := schemas.SourceAPI
	steps := []struct {
		name string
		pods func() []*corev1.Pod
		want string
	}{
		{"first list adds", func() []*corev1.Pod { return []*corev1.Pod{apiPod("u1", "a"), apiPod("u2", "b")} }, "ADD:a,ADD:b"},
		{"same list again: nothing", func() []*corev1.Pod { return []*corev1.Pod{apiPod("u1", "a"), apiPod("u2", "b")} }, ""},
		{"bookkeeping only: nothing", func() []*corev1.Pod {
			a := apiPod("u1", "a")
			a.ResourceVersion = "7"
			a.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "x"}}
			a.Annotations[podutil.AnnotationConfigSeen] = "whenever"
			return []*corev1.Pod{a, apiPod("u2", "b")}
		}, ""},
		{"status only: reconcile", func() []*corev1.Pod {
			a := apiPod("u1", "a")
			a.Status.Phase = corev1.PodRunning
			return []*corev1.Pod{a, apiPod("u2", "b")}
		}, "RECONCILE:a"},
		{"spec change: update", func() []*corev1.Pod {
			a := apiPod("u1", "a")
			a.Status.Phase = corev1.PodRunning
			a.Spec.Containers[0].Image = "j"
			return []*corev1.Pod{a, apiPod("u2", "b")}
		}, "UPDATE:a"},
		{"label change: update", func() []*corev1.Pod {
			a := apiPod("u1", "a")
			a.Status.Phase = corev1.PodRunning
			a.Spec.Containers[0].Image = "j"
			a.Labels["tier"] = "x"
			return []*corev1.Pod{a, apiPod("u2", "b")}
		}, "UPDATE:a"},
		{"deletion timestamp: graceful delete", func() []*corev1.Pod {
			a := apiPod("u1", "a")
			a.Status.Phase = corev1.PodRunning
			a.Spec.Containers[0].Image = "j"
			a.Labels["tier"] = "x"
			a.DeletionTimestamp = &metav1.Time{Time: time.Date(2030, 1, 1, 0, 1, 0, 0, time.UTC)}
			a.DeletionGracePeriodSeconds = ptrInt64(30)
			return []*corev1.Pod{a, apiPod("u2", "b")}
		}, "DELETE:a"},
		{"gone: remove", func() []*corev1.Pod { return []*corev1.Pod{apiPod("u2", "b")} }, "REMOVE:a"},
		{"empty list: remove the rest", func() []*corev1.Pod { return nil }, "REMOVE:b"},
	}
	for _, st := range steps {
		clk.Step(time.Second)
		got := ops(s.set(api, st.pods()))
		if got != st.want {
			t.Fatalf("%s: changes %q, want %q", st.name, got, st.want)
		}
	}
}

func ptrInt64(v int64) *int64 { return &v }

// The stored pod keeps the kubelet's local annotations and its first-seen
// time across updates.
func TestStoreKeepsFirstSeen(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(t0)
	s := newStore(clk, discardLogger())
	s.set(schemas.SourceAPI, []*corev1.Pod{apiPod("u1", "a")})
	clk.Step(time.Hour)
	b := apiPod("u1", "a")
	b.Spec.Containers[0].Image = "new"
	s.set(schemas.SourceAPI, []*corev1.Pod{b})
	out, _ := s.merged()
	e := out["u1"]
	if !e.firstSeen.Equal(t0) || e.pod.Annotations[podutil.AnnotationConfigSeen] != t0.Format(time.RFC3339Nano) {
		t.Errorf("firstSeen %v, config.seen %q, want %v", e.firstSeen, e.pod.Annotations[podutil.AnnotationConfigSeen], t0)
	}
	if e.pod.Annotations[podutil.AnnotationConfigSource] != schemas.SourceAPI || e.pod.Spec.Containers[0].Image != "new" {
		t.Errorf("pod = %+v", e.pod)
	}
}

// Of two pods with one full name, the one seen first is published, across
// sources and within one; pods restored from the bucket count as seen at
// their recorded time.
func TestMergedDuplicates(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(t0)
	s := newStore(clk, discardLogger())

	s.set(schemas.SourceFile, []*corev1.Pod{apiPod("f1", "web")})
	clk.Step(time.Second)
	s.set(schemas.SourceAPI, []*corev1.Pod{apiPod("a1", "web"), apiPod("a2", "other")})
	out, dups := s.merged()
	if _, ok := out["f1"]; !ok || len(out) != 2 || len(dups) != 1 || dups[0].entry.pod.UID != "a1" || dups[0].by.pod.UID != "f1" {
		t.Fatalf("out %v dups %+v: want f1 and a2 published, a1 rejected for f1", keys(out), dups)
	}
	if msg := duplicateMessage(dups[0]); !strings.Contains(msg, `duplicate pod name "web"`) || !strings.Contains(msg, "from api") {
		t.Errorf("message %q", msg)
	}
	// The first goes away: the duplicate takes its place.
	s.set(schemas.SourceFile, nil)
	out, dups = s.merged()
	if _, ok := out["a1"]; !ok || len(dups) != 0 {
		t.Fatalf("after the file pod left: out %v dups %+v", keys(out), dups)
	}

	// Within one source, the first listed wins.
	s2 := newStore(clk, discardLogger())
	s2.set(schemas.SourceFile, []*corev1.Pod{apiPod("z", "dup"), apiPod("y", "dup")})
	out, dups = s2.merged()
	if _, ok := out["z"]; !ok || len(dups) != 1 {
		t.Fatalf("within a source: out %v dups %+v, want z", keys(out), dups)
	}

	// After a restart, the restored pod is older than anything new.
	s3 := newStore(clk, discardLogger())
	s3.restore(schemas.SourceAPI, apiPod("a1", "web"), t0)
	clk.Step(time.Minute)
	s3.set(schemas.SourceFile, []*corev1.Pod{apiPod("f9", "web")})
	out, dups = s3.merged()
	if _, ok := out["a1"]; !ok || len(dups) != 1 || dups[0].entry.pod.UID != "f9" {
		t.Fatalf("restored: out %v dups %+v, want a1 kept", keys(out), dups)
	}
}

// A restored pod that its source lists unchanged is left exactly as it was,
// even though it went through JSON on the way.
func TestRestoredPodUnchanged(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	s := newStore(clk, discardLogger())
	p := apiPod("u1", "a")
	p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{} // empty, not nil: JSON drops it
	p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("0.1")}
	s.set(schemas.SourceAPI, []*corev1.Pod{p.DeepCopy()})
	out, _ := s.merged()
	d := schemas.PodDesired{Pod: out["u1"].pod, Source: schemas.SourceAPI, FirstSeen: out["u1"].firstSeen}
	b, err := schemas.Encode("sources", d)
	if err != nil {
		t.Fatal(err)
	}
	_, back, err := schemas.Decode[schemas.PodDesired](b)
	if err != nil {
		t.Fatal(err)
	}
	s2 := newStore(clk, discardLogger())
	s2.restore(back.Source, back.Pod, back.FirstSeen)
	clk.Step(time.Hour)
	if got := ops(s2.set(schemas.SourceAPI, []*corev1.Pod{p.DeepCopy()})); got != "" {
		t.Fatalf("restored pod listed again gives %q, want no change", got)
	}
}

func keys(m map[types.UID]*entry) []string {
	var s []string
	for k := range m {
		s = append(s, string(k))
	}
	return s
}
