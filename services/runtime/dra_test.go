package runtime

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/schemas"
)

// TestClaimCDIDevices is the DRA manager's GetResources: a container gets
// the CDI devices of the claims (and requests) it names, from the record
// nodelet-devices wrote; a claim not prepared is an error, never a
// container without its devices.
func TestClaimCDIDevices(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "u1"},
		Spec: corev1.PodSpec{ResourceClaims: []corev1.PodResourceClaim{
			{Name: "gpu", ResourceClaimName: ptr.To("c1")},
			{Name: "nic", ResourceClaimTemplateName: ptr.To("tmpl")},
		}}}
	pod.Status.ResourceClaimStatuses = []corev1.PodResourceClaimStatus{{Name: "nic", ResourceClaimName: ptr.To("p-nic-x")}}
	// The scheduler's claim for the extended resources backed by DRA.
	pod.Status.ExtendedResourceClaimStatus = &corev1.PodExtendedResourceClaimStatus{ResourceClaimName: "p-ext-y",
		RequestMappings: []corev1.ContainerExtendedResourceRequest{
			{ContainerName: "c", ResourceName: "example.com/gpu", RequestName: "container-0-request-0"},
			{ContainerName: "other", ResourceName: "example.com/gpu", RequestName: "container-1-request-0"}}}
	rec := &schemas.PodClaims{UID: "u1", Namespace: "ns", Name: "p", Prepared: true, Claims: []schemas.PreparedClaim{
		{PodClaimName: "gpu", Name: "c1", UID: "c1u", Prepared: true, Devices: []schemas.PreparedDevice{
			{Driver: "d", Pool: "p", Device: "a", Requests: []string{"one"}, CDIDeviceIDs: []string{"v.com/gpu=a"}},
			{Driver: "d", Pool: "p", Device: "b", Requests: []string{"two"}, CDIDeviceIDs: []string{"v.com/gpu=b"}}}},
		{PodClaimName: "nic", Name: "p-nic-x", UID: "n1u", Prepared: true, Devices: []schemas.PreparedDevice{
			{Driver: "n", Pool: "p", Device: "eth", CDIDeviceIDs: []string{"v.com/nic=eth"}}}},
		{Name: "p-ext-y", UID: "e1u", Prepared: true, Devices: []schemas.PreparedDevice{
			{Driver: "d", Pool: "p", Device: "c", Requests: []string{"container-0-request-0"}, CDIDeviceIDs: []string{"v.com/gpu=c"}},
			{Driver: "d", Pool: "p", Device: "d", Requests: []string{"container-1-request-0"}, CDIDeviceIDs: []string{"v.com/gpu=d"}}}},
	}}
	gpu := corev1.ResourceList{"example.com/gpu": resource.MustParse("1")}
	for _, tc := range []struct {
		name    string
		claims  []corev1.ResourceClaim
		req     corev1.ResourceList
		rec     *schemas.PodClaims
		want    []string
		wantErr string
	}{
		{name: "none", want: nil},
		{name: "whole claim", claims: []corev1.ResourceClaim{{Name: "gpu"}}, rec: rec, want: []string{"v.com/gpu=a", "v.com/gpu=b"}},
		{name: "one request", claims: []corev1.ResourceClaim{{Name: "gpu", Request: "two"}}, rec: rec, want: []string{"v.com/gpu=b"}},
		{name: "templated claim", claims: []corev1.ResourceClaim{{Name: "nic"}, {Name: "gpu", Request: "one"}}, rec: rec,
			want: []string{"v.com/nic=eth", "v.com/gpu=a"}},
		{name: "not prepared", claims: []corev1.ResourceClaim{{Name: "gpu"}},
			wantErr: "internal error: unable to get claim info for ResourceClaim c1 in namespace ns"},
		{name: "extended resource: the request mapped to this container", req: gpu, rec: rec, want: []string{"v.com/gpu=c"}},
		{name: "extended resource and a claim", req: gpu, claims: []corev1.ResourceClaim{{Name: "nic"}}, rec: rec,
			want: []string{"v.com/gpu=c", "v.com/nic=eth"}},
		{name: "extended resource not asked for by the container", rec: rec, want: nil},
		{name: "extended resource not prepared", req: gpu,
			wantErr: "internal error: unable to get claim info for ResourceClaim p-ext-y in namespace ns"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newDRAClaims()
			if tc.rec != nil {
				d.onClaims(bus.Update[schemas.PodClaims]{Kind: bus.Put, Key: "claims.u1", Value: tc.rec})
			}
			c := &corev1.Container{Name: "c", Resources: corev1.ResourceRequirements{Claims: tc.claims, Requests: tc.req, Limits: tc.req}}
			got, err := d.cdiDevices(pod, c)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, g := range got {
				names = append(names, g.Name)
			}
			if !slices.Equal(names, tc.want) {
				t.Fatalf("CDI devices %v, want %v", names, tc.want)
			}
		})
	}
}
