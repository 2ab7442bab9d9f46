package admission

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/internal/testenv"
)

// With a real kube-apiserver: the node's CSINode gives driver
// lim.csi.nodelet.io an attach limit of 1. A pod on a claim of that
// driver's PV is admitted; a pod on a second volume of the driver is
// refused with VolumeAttachmentLimitExceeded; a pod sharing the first
// volume and a pod with only an emptyDir are admitted.
func TestCSIAttachLimit(t *testing.T) {
	testenv.RequiresRoot(t)
	cp, stop, err := testenv.StartControlPlane("node-a")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	admin := cp.AdminClient(t)
	ctx := t.Context()
	ns := cp.Namespace(t)
	node, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const driver = "lim.csi.nodelet.io"
	one := int32(1)
	if _, err := admin.StorageV1().CSINodes().Create(ctx, &storagev1.CSINode{
		ObjectMeta: metav1.ObjectMeta{Name: "node-a", OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "node-a", UID: node.UID}}},
		Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{{Name: driver, NodeID: "node-a",
			Allocatable: &storagev1.VolumeNodeResources{Count: &one}}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	class := "lim"
	for _, v := range []string{"v1", "v2"} {
		pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: v + "-" + ns}, Spec: corev1.PersistentVolumeSpec{
			Capacity:         corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: class,
			ClaimRef:         &corev1.ObjectReference{Namespace: ns, Name: v},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: driver, VolumeHandle: v}},
		}}
		if _, err := admin.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: v}, Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, StorageClassName: &class, VolumeName: pv.Name,
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		}}
		if _, err := admin.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Pods exist in the API, bound to the node: the Node authorizer lets
	// the node read their claims and volumes.
	nodeClient := cp.NodeClient(t)
	create := func(name string, created int, claim string) *corev1.Pod {
		p := makePod(name, created)
		p.Namespace, p.UID = ns, ""
		if claim != "" {
			p.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}}
		} else {
			p.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
		}
		got, err := admin.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got.CreationTimestamp = p.CreationTimestamp
		if claim != "" {
			// The Node authorizer's graph learns of the pod asynchronously.
			deadline := time.Now().Add(30 * time.Second)
			for {
				_, err := nodeClient.CoreV1().PersistentVolumeClaims(ns).Get(ctx, claim, metav1.GetOptions{})
				if err == nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("node cannot read claim %s: %v", claim, err)
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
		return got
	}
	h := newHarness(t)
	h.volumes = &APIVolumes{Client: nodeClient, NodeName: "node-a"}
	h.start()
	first := create("first", 1, "v1")
	h.put(first)
	h.admitted(first)
	second := create("second", 2, "v2")
	h.put(second)
	h.rejected(second, ReasonVolumeAttachmentLimitExceeded,
		"Node has reached its volume attachment limit, rejecting pod. CSI driver "+driver+": 1 volumes in use, the pod adds 1, limit 1 (node(s) exceed max volume count)")
	sharing := create("sharing", 3, "v1")
	h.put(sharing)
	h.admitted(sharing)
	plain := create("plain", 4, "")
	h.put(plain)
	h.admitted(plain)
}
