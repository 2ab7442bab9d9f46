package runtime

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/testenv"
	"github.com/nodelet/nodelet/schemas"
)

// A pod whose claim is not bound waits with the kubelet's FailedMount
// event and no container; once kube-controller-manager's PV controller
// binds the claim to a PV created afterwards, the pod starts and sees the
// PV's data.
func TestUnboundClaimWaitsUntilBound(t *testing.T) {
	cp := sharedControllers(t)
	h, _, ns := apiHarness(t, nil)
	admin := cp.AdminClient(t)
	ensureNode(t, cp, nil)
	class := "late-" + ns
	createClaim(t, admin, ns, newPVC("data", class))
	pod := newPod("waits-for-claim", withMount(busybox("app", "exec sleep 3600"), "data", "/data"))
	pod.Spec.Volumes = []corev1.Volume{claimVolume("data", "data", false)}
	created := createPod(t, h, cp, ns, pod)
	want := "Unable to attach or mount volumes: unmounted volumes=[data], unattached volumes=[], failed to process volumes=[data]: error processing PVC " + ns + "/data: PVC is not bound"
	h.waitObserved(created, time.Minute, "waiting for the claim", func(o *schemas.PodObserved) bool {
		return o.Reason == "FailedMount" && o.Message == want
	})
	waitFor(t, 30*time.Second, "FailedMount event", func() (bool, string) {
		for _, e := range h.events.find(created.UID, "FailedMount") {
			if e.Message == want && e.Type == corev1.EventTypeWarning {
				return true, ""
			}
		}
		return false, fmt.Sprint(h.events.reasons(created.UID))
	})
	if n := len(h.containers(created.UID)); n != 0 {
		t.Fatalf("%d containers created for a pod whose claim is unbound", n)
	}

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "seed"), []byte("bound"), 0o644); err != nil {
		t.Fatal(err)
	}
	createPV(t, admin, newPV("late-"+ns, class, corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir}}))
	began := time.Now()
	o := h.waitObserved(created, 2*time.Minute, "running once bound", func(o *schemas.PodObserved) bool { return running(o, "app") })
	t.Logf("pod running %v after the PV appeared (the PV controller binds, then the next sync mounts)", time.Since(began).Round(time.Millisecond))
	if out, _ := h.execIn(o, "app", false, "cat", "/data/seed"); out != "bound" {
		t.Fatalf("reads %q", out)
	}
}

// A generic ephemeral volume: kube-controller-manager's ephemeral volume
// controller creates the pod's claim (owned by the pod), the PV controller
// binds it, the pod runs on it. A claim of that name not owned by the pod
// is refused in the kubelet's words.
func TestGenericEphemeralVolume(t *testing.T) {
	cp := sharedControllers(t)
	h, _, ns := apiHarness(t, nil)
	admin := cp.AdminClient(t)
	ensureNode(t, cp, nil)
	class := "eph-" + ns
	dir := t.TempDir()
	createPV(t, admin, newPV("eph-"+ns, class, corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir}}))
	tmpl := &corev1.PersistentVolumeClaimTemplate{Spec: newPVC("", class).Spec}
	pod := newPod("ephemeral", withMount(busybox("app", "echo eph > /scratch/f; exec sleep 3600"), "scratch", "/scratch"))
	pod.Spec.Volumes = []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{VolumeClaimTemplate: tmpl}}}}
	created := createPod(t, h, cp, ns, pod)
	h.waitObserved(created, 2*time.Minute, "running", func(o *schemas.PodObserved) bool { return running(o, "app") })
	waitFor(t, 30*time.Second, "file in the PV", func() (bool, string) {
		b, _ := os.ReadFile(filepath.Join(dir, "f"))
		return string(b) == "eph\n", string(b)
	})
	pvc, err := admin.CoreV1().PersistentVolumeClaims(ns).Get(t.Context(), "ephemeral-scratch", metav1.GetOptions{})
	if err != nil || !metav1.IsControlledBy(pvc, created) {
		t.Fatalf("claim ephemeral-scratch: %v %+v", err, pvc.OwnerReferences)
	}

	// A claim named as the volume's but made by someone else.
	createClaim(t, admin, ns, newPVC("stolen-scratch", class))
	createPV(t, admin, newPV("stolen-"+ns, class, corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: t.TempDir()}}))
	bindClaim(t, admin, ns, "stolen-scratch", "stolen-"+ns)
	other := newPod("stolen", withMount(busybox("app", "exec sleep 3600"), "scratch", "/scratch"))
	other.Spec.Volumes = pod.Spec.Volumes
	otherCreated := createPod(t, h, cp, ns, other)
	h.waitObserved(otherCreated, time.Minute, "refused", func(o *schemas.PodObserved) bool {
		return o.Reason == "FailedMount" && o.Message == "Unable to attach or mount volumes: unmounted volumes=[scratch], unattached volumes=[], "+
			"failed to process volumes=[scratch]: PVC "+ns+"/stolen-scratch was not created for pod "+ns+"/stolen (pod is not owner)"
	})
}

// The attach path: a CSIDriver that requires attach; the Node carries
// volumes.kubernetes.io/controller-managed-attach-detach, so
// kube-controller-manager's attach-detach controller creates the
// VolumeAttachment; the pod waits (unattached volumes=[data]) until the
// test marks it attached as an external-attacher would; the volume is
// staged only once the Node reports it in status.volumesInUse (from the
// runtime's volumesinuse record, as nodelet-status does); then the
// attachment's metadata reaches NodeStageVolume and the pod runs.
func TestCSIAttach(t *testing.T) {
	cp := sharedControllers(t)
	h, _, ns := apiHarness(t, nil)
	admin := cp.AdminClient(t)
	ensureNode(t, cp, map[string]string{"volumes.kubernetes.io/controller-managed-attach-detach": "true"})
	const name = "att.csi.nodelet.io"
	createCSIDriver(t, admin, name, true)
	drv := startDriver(t, name, h.cfg.Node.StateDir, true)
	waitCSINode(t, admin, name)
	pv := csiClaim(t, admin, ns, name, "vol-a", "data")
	pod := newPod("attached", withMount(busybox("app", "exec sleep 3600"), "data", "/data"))
	pod.Spec.Volumes = []corev1.Volume{claimVolume("data", "data", false)}
	created := createPod(t, h, cp, ns, pod)
	h.waitObserved(created, time.Minute, "waiting for attach", func(o *schemas.PodObserved) bool {
		return o.Reason == "FailedMount" && strings.HasPrefix(o.Message,
			"Unable to attach or mount volumes: unmounted volumes=[data], unattached volumes=[data], failed to process volumes=[]: volume attachment csi-")
	})
	vaName := fmt.Sprintf("csi-%x", sha256.Sum256([]byte("vol-a"+name+"node-1")))
	var va *storagev1.VolumeAttachment
	waitFor(t, 2*time.Minute, "the attach-detach controller creates "+vaName, func() (bool, string) {
		var err error
		va, err = admin.StorageV1().VolumeAttachments().Get(t.Context(), vaName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	if va.Spec.Attacher != name || va.Spec.NodeName != "node-1" || va.Spec.Source.PersistentVolumeName == nil || *va.Spec.Source.PersistentVolumeName != pv.Name {
		t.Fatalf("VolumeAttachment %+v", va.Spec)
	}
	h.barrier()
	if drv.Count("NodeStageVolume", "") != 0 || len(h.containers(created.UID)) != 0 {
		t.Fatal("the volume was staged or a container created before the attachment was attached")
	}
	va.Status.Attached = true
	va.Status.AttachmentMetadata = map[string]string{"devicePath": "/dev/test-attached"}
	if _, err := admin.StorageV1().VolumeAttachments().UpdateStatus(t.Context(), va, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Attached, but the Node does not list the volume in use yet: not
	// staged (the kubelet's ReportedInUse gate).
	h.waitObserved(created, time.Minute, "waiting for volumesInUse", func(o *schemas.PodObserved) bool {
		return strings.Contains(o.Message, "has not been added to the list of VolumesInUse in the node's volume status")
	})
	if drv.Count("NodeStageVolume", "") != 0 {
		t.Fatal("staged before the Node reported the volume in use")
	}
	reportVolumesInUse(t, h, admin)
	h.waitObserved(created, 2*time.Minute, "running once attached", func(o *schemas.PodObserved) bool { return running(o, "app") })
	unique := corev1.UniqueVolumeName("kubernetes.io/csi/" + name + "^vol-a")
	if n, err := admin.CoreV1().Nodes().Get(t.Context(), "node-1", metav1.GetOptions{}); err != nil || !slices.Contains(n.Status.VolumesInUse, unique) {
		t.Fatalf("node volumesInUse %v (%v), want %s", n.Status.VolumesInUse, err, unique)
	}
	for _, c := range drv.Calls() {
		if (c.Method == "NodeStageVolume" || c.Method == "NodePublishVolume") && c.PublishContext["devicePath"] != "/dev/test-attached" {
			t.Fatalf("%s without the attachment's metadata: %+v", c.Method, c)
		}
	}
	h.remove(created)
	h.volumesGone(string(created.UID))
	waitFor(t, 30*time.Second, "unstaged", func() (bool, string) {
		return drv.Count("NodeUnstageVolume", "vol-a") == 1 && len(testenv.MountsUnder(h.cfg.Node.StateDir)) == 0, ""
	})
	waitFor(t, 30*time.Second, "no volume in use", func() (bool, string) {
		rec, _, err := bus.Get[schemas.VolumesInUse](h.ctx, h.status, bus.BucketRuntime, bus.KeyVolumesInUse)
		return err == nil && rec != nil && len(rec.Names) == 0, fmt.Sprintf("%+v %v", rec, err)
	})
}

// reportVolumesInUse does nodelet-status's part for the runtime tests: the
// runtime's volumesinuse record becomes the Node's status.volumesInUse.
func reportVolumesInUse(t *testing.T, h *harness, admin kubernetes.Interface) {
	t.Helper()
	ctx, cancel := context.WithCancel(h.ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = bus.Watch(ctx, h.status, bus.BucketRuntime, bus.KeyVolumesInUse, func(u bus.Update[schemas.VolumesInUse]) {
			if u.Kind != bus.Put {
				return
			}
			_ = retry.RetryOnConflict(retry.DefaultRetry, func() error {
				n, err := admin.CoreV1().Nodes().Get(ctx, "node-1", metav1.GetOptions{})
				if err != nil {
					return err
				}
				n.Status.VolumesInUse = nil
				for _, name := range u.Value.Names {
					n.Status.VolumesInUse = append(n.Status.VolumesInUse, corev1.UniqueVolumeName(name))
				}
				_, err = admin.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
				return err
			})
		})
	}()
	t.Cleanup(func() { cancel(); <-done })
}

// An inline CSI volume (a driver with the Ephemeral lifecycle mode) is
// published without staging or attachment under a handle made from the pod
// UID and volume name, with the pod's info and ephemeral=true in its
// context, and unpublished with the pod.
func TestCSIInlineVolume(t *testing.T) {
	h, cp, ns := apiHarness(t, nil)
	admin := cp.AdminClient(t)
	ensureNode(t, cp, nil)
	const name = "inline.csi.nodelet.io"
	createCSIDriver(t, admin, name, false, storagev1.VolumeLifecycleEphemeral)
	drv := startDriver(t, name, h.cfg.Node.StateDir, true)
	waitCSINode(t, admin, name)
	ro := false
	pod := newPod("inline", withMount(busybox("app", "echo inline > /v/f; exec sleep 3600"), "v", "/v"))
	pod.Spec.Volumes = []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{
		Driver: name, ReadOnly: &ro, VolumeAttributes: map[string]string{"size": "1"}}}}}
	created := createPod(t, h, cp, ns, pod)
	h.waitObserved(created, 2*time.Minute, "running", func(o *schemas.PodObserved) bool { return running(o, "app") })
	handle := fmt.Sprintf("csi-%x", sha256.Sum256([]byte(string(created.UID)+"v")))
	waitFor(t, 30*time.Second, "file in the inline volume", func() (bool, string) {
		b, _ := os.ReadFile(filepath.Join(drv.VolumeData(handle), "f"))
		return string(b) == "inline\n", string(b)
	})
	calls := drv.Calls()
	var publish int
	for _, c := range calls {
		switch c.Method {
		case "NodeStageVolume":
			t.Fatalf("an inline volume was staged: %+v", c)
		case "NodePublishVolume":
			publish++
			if c.Context["csi.storage.k8s.io/ephemeral"] != "true" || c.Context["size"] != "1" || c.Context["csi.storage.k8s.io/pod.uid"] != string(created.UID) {
				t.Fatalf("publish context %+v", c.Context)
			}
		}
	}
	if publish != 1 {
		t.Fatalf("%d NodePublishVolume calls", publish)
	}
	h.remove(created)
	h.volumesGone(string(created.UID))
	if drv.Count("NodeUnpublishVolume", handle) != 1 {
		t.Fatalf("calls %+v", drv.Calls())
	}

	// A driver without the Ephemeral mode refuses inline volumes.
	const persistentOnly = "persistent.csi.nodelet.io"
	createCSIDriver(t, admin, persistentOnly, false)
	startDriver(t, persistentOnly, h.cfg.Node.StateDir, false)
	waitCSINode(t, admin, persistentOnly)
	bad := newPod("inline-refused", withMount(busybox("app", "exec sleep 3600"), "v", "/v"))
	bad.Spec.Volumes = []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: persistentOnly}}}}
	badCreated := createPod(t, h, cp, ns, bad)
	h.waitObserved(badCreated, time.Minute, "refused", func(o *schemas.PodObserved) bool {
		return o.Reason == "FailedMount" && strings.Contains(o.Message, `volume mode "Ephemeral" not supported by driver `+persistentOnly)
	})
}
