package runtime

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
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
	rec := &schemas.PodClaims{UID: "u1", Namespace: "ns", Name: "p", Prepared: true, Claims: []schemas.PreparedClaim{
		{PodClaimName: "gpu", Name: "c1", UID: "c1u", Prepared: true, Devices: []schemas.PreparedDevice{
			{Driver: "d", Pool: "p", Device: "a", Requests: []string{"one"}, CDIDeviceIDs: []string{"v.com/gpu=a"}},
			{Driver: "d", Pool: "p", Device: "b", Requests: []string{"two"}, CDIDeviceIDs: []string{"v.com/gpu=b"}}}},
		{PodClaimName: "nic", Name: "p-nic-x", UID: "n1u", Prepared: true, Devices: []schemas.PreparedDevice{
			{Driver: "n", Pool: "p", Device: "eth", CDIDeviceIDs: []string{"v.com/nic=eth"}}}},
	}}
	for _, tc := range []struct {
		name    string
		claims  []corev1.ResourceClaim
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
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newDRAClaims()
			if tc.rec != nil {
				d.onClaims(bus.Update[schemas.PodClaims]{Kind: bus.Put, Key: "claims.u1", Value: tc.rec})
			}
			c := &corev1.Container{Name: "c", Resources: corev1.ResourceRequirements{Claims: tc.claims}}
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
