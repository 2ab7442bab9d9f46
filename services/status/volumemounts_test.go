package status

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/schemas"
)

// Issue 32: status.containerStatuses[].volumeMounts[].recursiveReadOnly
// says what the runtime applied, as the kubelet's
// convertToAPIContainerStatuses resolves it against the runtime handler's
// support (PodObserved.recursiveReadOnlyMounts): Enabled is never claimed
// where the runtime cannot do it.
func TestVolumeMountStatuses(t *testing.T) {
	pod := testPod(corev1.RestartPolicyAlways, "app")
	mode := func(m corev1.RecursiveReadOnlyMode) *corev1.RecursiveReadOnlyMode { return &m }
	pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{
		{Name: "enabled", MountPath: "/a", ReadOnly: true, RecursiveReadOnly: mode(corev1.RecursiveReadOnlyEnabled)},
		{Name: "ifpossible", MountPath: "/b", ReadOnly: true, RecursiveReadOnly: mode(corev1.RecursiveReadOnlyIfPossible)},
		{Name: "disabled", MountPath: "/c", ReadOnly: true, RecursiveReadOnly: mode(corev1.RecursiveReadOnlyDisabled)},
		{Name: "plain-ro", MountPath: "/d", ReadOnly: true},
		{Name: "rw", MountPath: "/e"},
		{Name: "propagated", MountPath: "/f", ReadOnly: true, RecursiveReadOnly: mode(corev1.RecursiveReadOnlyIfPossible),
			MountPropagation: ptr.To(corev1.MountPropagationHostToContainer)},
	}
	for _, tc := range []struct {
		supported bool
		want      map[string]corev1.RecursiveReadOnlyMode // "" = no field
	}{
		{true, map[string]corev1.RecursiveReadOnlyMode{"enabled": "Enabled", "ifpossible": "Enabled", "disabled": "Disabled",
			"plain-ro": "Disabled", "rw": "", "propagated": "Disabled"}},
		{false, map[string]corev1.RecursiveReadOnlyMode{"enabled": "Disabled", "ifpossible": "Disabled", "disabled": "Disabled",
			"plain-ro": "Disabled", "rw": "", "propagated": "Disabled"}},
	} {
		obs := &schemas.PodObserved{UID: "uid-1", Containers: []schemas.ContainerObserved{running("app")}, RecursiveReadOnlyMounts: tc.supported}
		s := ComputePodStatus(PodInputs{Pod: pod, Observed: obs, Now: t0})
		got := s.ContainerStatuses[0].VolumeMounts
		if len(got) != len(tc.want) {
			t.Fatalf("supported=%v: %d mount statuses", tc.supported, len(got))
		}
		for _, vs := range got {
			var m corev1.RecursiveReadOnlyMode
			if vs.RecursiveReadOnly != nil {
				m = *vs.RecursiveReadOnly
			}
			if m != tc.want[vs.Name] {
				t.Errorf("supported=%v: %s recursiveReadOnly %q, want %q", tc.supported, vs.Name, m, tc.want[vs.Name])
			}
		}
	}
}
