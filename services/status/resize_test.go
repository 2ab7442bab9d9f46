package status

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/schemas"
)

// A resize as the runtime reports it: the spec asks for 2 CPUs, the node
// deferred it, so allocatedResources and resources stay the running
// container's (1 CPU) and the PodResizePending condition is reported as
// the kubelet's status manager does; once carried out both follow.
func TestResizeStatus(t *testing.T) {
	pod := testPod(corev1.RestartPolicyAlways, "app")
	pod.Generation = 2
	want := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")},
	}
	pod.Spec.Containers[0].Resources = want
	old := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")},
	}
	app := running("app")
	app.Resources, app.Allocated = old.DeepCopy(), old.DeepCopy()
	pending := corev1.PodCondition{
		Type: corev1.PodResizePending, Status: corev1.ConditionTrue, Reason: corev1.PodReasonDeferred,
		Message: "Node didn't have enough resource: cpu, requested: 2000, used: 500, capacity: 2000", ObservedGeneration: 2,
		LastTransitionTime: metav1.NewTime(t0),
	}
	obs := &schemas.PodObserved{UID: "uid-1", Sandbox: readySandbox(), Containers: []schemas.ContainerObserved{app},
		ResizeConditions: []corev1.PodCondition{pending}}
	s := ComputePodStatus(PodInputs{Pod: pod, Verdict: admitted(), Observed: obs, Now: t0})
	cs := s.ContainerStatuses[0]
	if cs.AllocatedResources.Cpu().String() != "1" || cs.Resources.Limits.Cpu().String() != "1" {
		t.Fatalf("deferred: allocated %v, resources %v", cs.AllocatedResources, cs.Resources)
	}
	c := cond(s, corev1.PodResizePending)
	if c == nil || c.Reason != corev1.PodReasonDeferred || c.Message != pending.Message || c.ObservedGeneration != 2 {
		t.Fatalf("PodResizePending: %+v", c)
	}

	app.Resources, app.Allocated = want.DeepCopy(), want.DeepCopy()
	obs.Containers, obs.ResizeConditions = []schemas.ContainerObserved{app}, nil
	s = ComputePodStatus(PodInputs{Pod: pod, Verdict: admitted(), Observed: obs, Now: t0, Old: &s})
	cs = s.ContainerStatuses[0]
	if cs.AllocatedResources.Cpu().String() != "2" || cs.Resources.Limits.Cpu().String() != "2" {
		t.Fatalf("resized: allocated %v, resources %v", cs.AllocatedResources, cs.Resources)
	}
	if cond(s, corev1.PodResizePending) != nil || cond(s, corev1.PodResizeInProgress) != nil {
		t.Fatalf("resize conditions left: %v", s.Conditions)
	}
}

// A spec change the runtime has not synced yet is not observed: with the
// runtime's last sync at generation 1, a resize to generation 2 reports
// observedGeneration 1 (on the status and its conditions), so a client
// waiting for "observedGeneration caught up, no resize condition" does not
// take the old resources for the resize's outcome; once the runtime
// reports generation 2, it is 2. It never goes back.
func TestObservedGenerationIsTheRuntimes(t *testing.T) {
	pod := testPod(corev1.RestartPolicyAlways, "app")
	pod.Generation = 2
	app := running("app")
	obs := &schemas.PodObserved{UID: "uid-1", Sandbox: readySandbox(), Containers: []schemas.ContainerObserved{app}, PodGeneration: 1}
	for _, tc := range []struct {
		name              string
		synced, old       int64
		want, wantCondGen int64
	}{
		{"runtime behind", 1, 0, 1, 1},
		{"runtime caught up", 2, 1, 2, 2},
		{"runtime reports none (a spec without generation)", 0, 0, 2, 2},
		{"never backwards", 1, 2, 2, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obs.PodGeneration = tc.synced
			old := &corev1.PodStatus{ObservedGeneration: tc.old}
			s := ComputePodStatus(PodInputs{Pod: pod, Verdict: admitted(), Observed: obs, Now: t0, Old: old})
			if s.ObservedGeneration != tc.want {
				t.Errorf("observedGeneration %d, want %d", s.ObservedGeneration, tc.want)
			}
			if c := cond(s, corev1.PodReady); c == nil || c.ObservedGeneration != tc.wantCondGen {
				t.Errorf("Ready condition %+v, want observedGeneration %d", c, tc.wantCondGen)
			}
		})
	}
}
