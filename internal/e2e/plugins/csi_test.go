package plugins_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/internal/e2e"
	"github.com/nodelet/nodelet/internal/testenv"
	"github.com/nodelet/nodelet/internal/testenv/eventually"
	"github.com/nodelet/nodelet/services/runtime/csi/csitest"
)

// TestCSIOnAWholeNode runs a CSI driver (the test driver, as its own
// process) against a whole cluster node: it registers through the node's
// plugins_registry and appears in CSINode; a pod on a claim of its PV
// writes to the volume, reports Running in the API, the Node lists the
// volume in status.volumesInUse and /stats/summary measures it; a second
// pod on another volume is Failed by admission for the driver's attach
// limit of 1; deleting the first pod unpublishes and unstages the volume.
func TestCSIOnAWholeNode(t *testing.T) {
	n := e2e.NewNode(t, e2e.NodeOptions{API: true})
	admin := cp.AdminClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	eventually.True(t, 60*time.Second, "node registered", func() bool {
		_, err := admin.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		return err == nil
	})
	const driver = "e2e.csi.nodelet.io"
	if _, err := admin.StorageV1().CSIDrivers().Create(ctx, &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: driver},
		Spec: storagev1.CSIDriverSpec{AttachRequired: ptr.To(false)}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.StorageV1().CSIDrivers().Delete(context.Background(), driver, metav1.DeleteOptions{})
	})
	data, err := os.MkdirTemp("", "csi")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(data) })
	drv := csitest.Start(t, csitest.Config{Name: driver, NodeID: nodeName, MaxVolumes: 1, Stage: true,
		DataDir: data, RegistryDir: filepath.Join(n.StateDir, "plugins_registry")})
	eventually.True(t, 60*time.Second, "CSINode lists the driver with its limit", func() bool {
		cn, err := admin.StorageV1().CSINodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			return false
		}
		for _, d := range cn.Spec.Drivers {
			if d.Name == driver && d.NodeID == nodeName && d.Allocatable != nil && d.Allocatable.Count != nil && *d.Allocatable.Count == 1 {
				return true
			}
		}
		return false
	})

	ns := cp.Namespace(t)
	class := "e2e-" + ns
	for _, v := range []string{"one", "two"} {
		pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: v + "-" + ns}, Spec: corev1.PersistentVolumeSpec{
			Capacity:         corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: class,
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: driver, VolumeHandle: "vol-" + v}},
		}}
		if _, err := admin.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = admin.CoreV1().PersistentVolumes().Delete(context.Background(), pv.Name, metav1.DeleteOptions{})
		})
		claim, err := admin.CoreV1().PersistentVolumeClaims(ns).Create(ctx, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: v},
			Spec: corev1.PersistentVolumeClaimSpec{AccessModes: pv.Spec.AccessModes, StorageClassName: &class, VolumeName: pv.Name,
				Resources: corev1.VolumeResourceRequirements{Requests: pv.Spec.Capacity}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// Bound both ways, as the PV controller would (none runs here).
		pv, _ = admin.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
		pv.Spec.ClaimRef = &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: ns, Name: v, UID: claim.UID}
		if pv, err = admin.CoreV1().PersistentVolumes().Update(ctx, pv, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		pv.Status.Phase = corev1.VolumeBound
		if _, err := admin.CoreV1().PersistentVolumes().UpdateStatus(ctx, pv, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		claim.Status.Phase = corev1.ClaimBound
		if _, err := admin.CoreV1().PersistentVolumeClaims(ns).UpdateStatus(ctx, claim, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pods := admin.CoreV1().Pods(ns)
	withClaim := func(name, claim, script string) *corev1.Pod {
		p := e2e.APIPod(nodeName, ns, name, "")
		p.Spec.Containers[0].Command = []string{"sh", "-c", script}
		p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
		p.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}}
		return p
	}
	first, err := pods.Create(ctx, withClaim("first", "one", "echo hello > /data/f; trap 'exit 0' TERM; while true; do sleep 1; done"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 2*time.Minute, "first pod Running", func() bool {
		p, err := pods.Get(ctx, "first", metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning && e2e.PodReady(p)
	})
	eventually.True(t, 30*time.Second, "the file in the volume", func() bool {
		b, _ := os.ReadFile(filepath.Join(data, "volumes", "vol-one", "f"))
		return string(b) == "hello\n"
	})
	unique := corev1.UniqueVolumeName("kubernetes.io/csi/" + driver + "^vol-one")
	eventually.True(t, 30*time.Second, "the Node lists the volume in use", func() bool {
		node, err := admin.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		return err == nil && slices.Contains(node.Status.VolumesInUse, unique)
	})

	// The driver allows one volume on this node: admission refuses a pod on
	// a second one.
	if _, err := pods.Create(ctx, withClaim("second", "two", "sleep 3600"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 60*time.Second, "second pod Failed VolumeAttachmentLimitExceeded", func() bool {
		p, err := pods.Get(ctx, "second", metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodFailed && p.Status.Reason == "VolumeAttachmentLimitExceeded"
	})

	// /stats/summary measures the volume through NodeGetVolumeStats (the
	// runtime measures every minute).
	eventually.True(t, 90*time.Second, "the volume in /stats/summary", func() bool {
		resp, err := http.Get("http://" + n.ReadOnly + "/stats/summary")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var sum statsapi.Summary
		if json.NewDecoder(resp.Body).Decode(&sum) != nil {
			return false
		}
		for _, p := range sum.Pods {
			for _, v := range p.VolumeStats {
				if p.PodRef.UID == string(first.UID) && v.Name == "data" && v.PVCRef != nil && v.PVCRef.Name == "one" && v.CapacityBytes != nil {
					return true
				}
			}
		}
		return false
	})

	if err := pods.Delete(ctx, "first", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](1)}); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 90*time.Second, "unpublished and unstaged, no mount left", func() bool {
		return drv.Count("NodeUnpublishVolume", "vol-one") == 1 && drv.Count("NodeUnstageVolume", "vol-one") == 1 &&
			len(testenv.MountsUnder(filepath.Join(n.StateDir, "pods"))) == 0 &&
			len(testenv.MountsUnder(filepath.Join(n.StateDir, "plugins"))) == 0
	})
	eventually.True(t, 30*time.Second, "the Node no longer lists the volume", func() bool {
		node, err := admin.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		return err == nil && !slices.Contains(node.Status.VolumesInUse, unique)
	})
	if s := drv.Count("NodeStageVolume", ""); s != 1 {
		t.Fatalf("%d NodeStageVolume calls: %s", s, strings.TrimSpace(fmt.Sprint(drv.Calls())))
	}
}
