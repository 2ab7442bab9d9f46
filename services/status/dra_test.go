package status

import (
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/schemas"
)

// TestAllocatedResourcesStatus is the DRA manager's
// UpdateAllocatedResourcesStatus: a container naming claims reports each
// claim (and request) with its prepared devices and the health their
// driver reported (Unknown when none); a claim not prepared, or a
// container naming none, reports nothing.
func TestAllocatedResourcesStatus(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "u1"},
		Spec: corev1.PodSpec{
			ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To("c1")}, {Name: "nic", ResourceClaimName: ptr.To("c2")}},
			Containers: []corev1.Container{
				{Name: "a", Image: "i", Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu", Request: "two"}, {Name: "nic"}}}},
				{Name: "b", Image: "i", Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}},
				{Name: "plain", Image: "i"},
			}}}
	rec := &schemas.PodClaims{UID: "u1", Claims: []schemas.PreparedClaim{
		{PodClaimName: "gpu", Name: "c1", Prepared: true, Devices: []schemas.PreparedDevice{
			{Driver: "d", Pool: "p", Device: "x", Requests: []string{"one"}, CDIDeviceIDs: []string{"v.com/gpu=x"}},
			{Driver: "d", Pool: "p", Device: "y", Requests: []string{"two"}}}},
		{PodClaimName: "nic", Name: "c2"}, // not prepared: no devices
	}}
	unknown, healthy, unhealthy := corev1.ResourceHealthStatusUnknown, corev1.ResourceHealthStatusHealthy, corev1.ResourceHealthStatusUnhealthy
	for _, tc := range []struct {
		name   string
		health *schemas.DRAHealth
		want   map[string][]corev1.ResourceStatus
	}{
		{"no health reported", nil, map[string][]corev1.ResourceStatus{
			"a":     {{Name: "claim:gpu/two", Resources: []corev1.ResourceHealth{{ResourceID: "d/p/y", Health: unknown}}}},
			"b":     {{Name: "claim:gpu", Resources: []corev1.ResourceHealth{{ResourceID: "v.com/gpu=x", Health: unknown}, {ResourceID: "d/p/y", Health: unknown}}}},
			"plain": nil,
		}},
		// The driver's health per device, its message; a device of
		// another driver with the same pool and name is not ours.
		{"reported", &schemas.DRAHealth{Devices: []schemas.DRADeviceHealth{
			{Driver: "d", Pool: "p", Device: "x", Health: "Healthy"},
			{Driver: "d", Pool: "p", Device: "y", Health: "Unhealthy", Message: "ECC errors"},
			{Driver: "other", Pool: "p", Device: "x", Health: "Unhealthy"},
		}}, map[string][]corev1.ResourceStatus{
			"a": {{Name: "claim:gpu/two", Resources: []corev1.ResourceHealth{{ResourceID: "d/p/y", Health: unhealthy, Message: ptr.To("ECC errors")}}}},
			"b": {{Name: "claim:gpu", Resources: []corev1.ResourceHealth{{ResourceID: "v.com/gpu=x", Health: healthy},
				{ResourceID: "d/p/y", Health: unhealthy, Message: ptr.To("ECC errors")}}}},
			"plain": nil,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := ComputePodStatus(PodInputs{Pod: pod, Verdict: admitted(), Claims: rec, DRAHealth: tc.health, Now: time.Unix(1000, 0)})
			for _, cs := range s.ContainerStatuses {
				if !reflect.DeepEqual(cs.AllocatedResourcesStatus, tc.want[cs.Name]) {
					t.Errorf("%s: %+v, want %+v", cs.Name, cs.AllocatedResourcesStatus, tc.want[cs.Name])
				}
			}
		})
	}
	// No record (devices not there yet): nothing.
	s := ComputePodStatus(PodInputs{Pod: pod, Verdict: admitted(), Now: time.Unix(1000, 0)})
	for _, cs := range s.ContainerStatuses {
		if cs.AllocatedResourcesStatus != nil {
			t.Errorf("%s without a record: %+v", cs.Name, cs.AllocatedResourcesStatus)
		}
	}
}
