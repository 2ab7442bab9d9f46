package volumes

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// A driver's NodeExpandVolume error leaves the claim as the kubelet's
// NodeExpander does with recovery: condition NodeResizeError (the other
// conditions kept), NodeResizeInfeasible for an invalid size; a volume the
// driver cannot expand while in use (FailedPrecondition) is not an error
// for the pod and is not expanded again while published.
func TestExpansionFailureMarksTheClaim(t *testing.T) {
	for _, tc := range []struct {
		name       string
		err        error
		wantErr    string
		wantStatus corev1.ClaimResourceStatus
		inUse      bool
	}{
		{"final", status.Error(codes.Internal, "boom"),
			"Expander.NodeExpand failed to expand the volume : rpc error: code = Internal desc = boom", corev1.PersistentVolumeClaimNodeResizeInProgress, false},
		{"infeasible", status.Error(codes.OutOfRange, "too big"),
			"Expander.NodeExpand failed to expand the volume rpc error: code = OutOfRange desc = too big", corev1.PersistentVolumeClaimNodeResizeInfeasible, false},
		{"in use", status.Error(codes.FailedPrecondition, "offline only"), "", corev1.PersistentVolumeClaimNodeResizeInProgress, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: "ns", ResourceVersion: "5"},
				Status: corev1.PersistentVolumeClaimStatus{
					Capacity:                  corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
					AllocatedResources:        corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("2Gi")},
					AllocatedResourceStatuses: map[corev1.ResourceName]corev1.ClaimResourceStatus{corev1.ResourceStorage: corev1.PersistentVolumeClaimNodeResizeInProgress},
					Conditions: []corev1.PersistentVolumeClaimCondition{
						{Type: corev1.PersistentVolumeClaimFileSystemResizePending, Status: corev1.ConditionTrue},
						{Type: "Other", Status: corev1.ConditionTrue},
					}}}
			client := fake.NewClientset(pvc)
			e := &nodeExpander{client: client, log: quietLog()}
			cm := &csiMount{cv: csiVolume{pvName: "pv-1"}}
			err := e.expansionFailed(context.Background(), cm, pvc, true, tc.err)
			if (err == nil) != (tc.wantErr == "") || (err != nil && err.Error() != tc.wantErr) {
				t.Fatalf("error %v, want %q", err, tc.wantErr)
			}
			if cm.inUseExpansionError != tc.inUse {
				t.Fatalf("in-use expansion error %v", cm.inUseExpansionError)
			}
			got, _ := client.CoreV1().PersistentVolumeClaims("ns").Get(context.Background(), "data", metav1.GetOptions{})
			if s := got.Status.AllocatedResourceStatuses[corev1.ResourceStorage]; s != tc.wantStatus {
				t.Fatalf("resize status %q, want %q", s, tc.wantStatus)
			}
			var types []corev1.PersistentVolumeClaimConditionType
			for _, c := range got.Status.Conditions {
				types = append(types, c.Type)
			}
			if len(types) != 3 || types[0] != corev1.PersistentVolumeClaimFileSystemResizePending || types[1] != "Other" ||
				types[2] != corev1.PersistentVolumeClaimNodeResizeError || got.Status.Conditions[2].Message == "" {
				t.Fatalf("conditions %+v", got.Status.Conditions)
			}
		})
	}
}

// MergeResizeConditionOnPVC: other conditions kept; resize conditions
// replaced, or kept where asked; a condition of the same status keeps its
// old transition time.
func TestMergeResizeConditions(t *testing.T) {
	old := metav1.Unix(100, 0)
	c := &corev1.PersistentVolumeClaim{Status: corev1.PersistentVolumeClaimStatus{Conditions: []corev1.PersistentVolumeClaimCondition{
		{Type: corev1.PersistentVolumeClaimFileSystemResizePending, Status: corev1.ConditionTrue},
		{Type: corev1.PersistentVolumeClaimNodeResizeError, Status: corev1.ConditionTrue, LastTransitionTime: old},
		{Type: "Other", Status: corev1.ConditionTrue},
	}}}
	mergeResizeConditions(c, []corev1.PersistentVolumeClaimCondition{
		{Type: corev1.PersistentVolumeClaimNodeResizeError, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Unix(200, 0)}}, true)
	if len(c.Status.Conditions) != 3 || !c.Status.Conditions[1].LastTransitionTime.Equal(&old) {
		t.Fatalf("kept: %+v", c.Status.Conditions)
	}
	mergeResizeConditions(c, nil, false)
	if len(c.Status.Conditions) != 1 || c.Status.Conditions[0].Type != "Other" {
		t.Fatalf("cleared: %+v", c.Status.Conditions)
	}
}
