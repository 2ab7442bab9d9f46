package runtime

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/internal/testenv"
	"github.com/nodelet/nodelet/schemas"
	"github.com/nodelet/nodelet/services/runtime/csi"
	"github.com/nodelet/nodelet/services/runtime/csi/csitest"
)

// startExpandingDriver runs the test CSI driver with staging and
// EXPAND_VOLUME: its filesystem volumes are sized tmpfs, its raw block
// volumes images on loop devices.
func startExpandingDriver(t *testing.T, name, stateDir string) *csitest.Process {
	t.Helper()
	data, err := os.MkdirTemp("", "csi")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(data) })
	return csitest.Start(t, csitest.Config{Name: name, NodeID: "node-1", Stage: true, Expand: true,
		DataDir: data, RegistryDir: csi.RegistryDir(stateDir)})
}

// sizedClaim creates a storage class that allows expansion, a PV of
// driver of size bytes (in mode) and a claim of that class bound to it.
func sizedClaim(t *testing.T, admin kubernetes.Interface, ns, driver, handle, claim string, size int64, mode corev1.PersistentVolumeMode) *corev1.PersistentVolume {
	t.Helper()
	class := "csi-" + ns
	expand := true
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: class}, Provisioner: driver, AllowVolumeExpansion: &expand}
	if _, err := admin.StorageV1().StorageClasses().Create(t.Context(), sc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.StorageV1().StorageClasses().Delete(t.Context(), class, metav1.DeleteOptions{}) })
	q := *resource.NewQuantity(size, resource.BinarySI)
	pv := newPV(fmt.Sprintf("%s-%s", handle, ns), class, corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
		Driver: driver, VolumeHandle: handle, VolumeAttributes: map[string]string{csitest.SizeKey: strconv.FormatInt(size, 10)}}})
	pv.Spec.Capacity[corev1.ResourceStorage] = q
	pv.Spec.VolumeMode = &mode
	createPV(t, admin, pv)
	pvc := newPVC(claim, class)
	pvc.Spec.Resources.Requests[corev1.ResourceStorage] = q
	pvc.Spec.VolumeMode = &mode
	createClaim(t, admin, ns, pvc)
	bindClaim(t, admin, ns, claim, pv.Name)
	// bindClaim's capacity is 1Gi; the PV's is the claim's.
	updateClaimStatus(t, admin, ns, claim, func(c *corev1.PersistentVolumeClaim) { c.Status.Capacity[corev1.ResourceStorage] = q })
	return pv
}

func updateClaimStatus(t *testing.T, admin kubernetes.Interface, ns, claim string, change func(*corev1.PersistentVolumeClaim)) {
	t.Helper()
	pvcs := admin.CoreV1().PersistentVolumeClaims(ns)
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c, err := pvcs.Get(t.Context(), claim, metav1.GetOptions{})
		if err != nil {
			return err
		}
		change(c)
		_, err = pvcs.UpdateStatus(t.Context(), c, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// resizeClaim resizes the claim through the API and does what the
// external-resizer does once the controller side is done: the PV's
// capacity is the new size, the claim has condition
// FileSystemResizePending and, from a resizer with recovery from
// expansion failures (as of 1.37), allocatedResources the new size and
// storage NodeResizePending.
func resizeClaim(t *testing.T, admin kubernetes.Interface, ns, claim, pvName string, size int64, recovery bool) {
	t.Helper()
	q := *resource.NewQuantity(size, resource.BinarySI)
	pvcs := admin.CoreV1().PersistentVolumeClaims(ns)
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c, err := pvcs.Get(t.Context(), claim, metav1.GetOptions{})
		if err != nil {
			return err
		}
		c.Spec.Resources.Requests[corev1.ResourceStorage] = q
		_, err = pvcs.Update(t.Context(), c, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatalf("resize claim: %v", err)
	}
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pv, err := admin.CoreV1().PersistentVolumes().Get(t.Context(), pvName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		pv.Spec.Capacity[corev1.ResourceStorage] = q
		_, err = admin.CoreV1().PersistentVolumes().Update(t.Context(), pv, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatalf("resize PV: %v", err)
	}
	updateClaimStatus(t, admin, ns, claim, func(c *corev1.PersistentVolumeClaim) {
		// A claim only a resizer without recovery resized has no
		// allocatedResources.
		c.Status.AllocatedResources = nil
		if recovery {
			c.Status.AllocatedResources = corev1.ResourceList{corev1.ResourceStorage: q}
			c.Status.AllocatedResourceStatuses = map[corev1.ResourceName]corev1.ClaimResourceStatus{
				corev1.ResourceStorage: corev1.PersistentVolumeClaimNodeResizePending}
		}
		c.Status.Conditions = append(c.Status.Conditions, corev1.PersistentVolumeClaimCondition{
			Type: corev1.PersistentVolumeClaimFileSystemResizePending, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now(),
			Message: "Waiting for user to (re-)start a pod to finish file system resize of volume on node."})
	})
}

// waitClaimResized waits until the claim's status is what the kubelet
// leaves after a node expansion: capacity the new size, no resize status,
// no resize condition (kube-controller-manager, when a test of the package
// started it, may set others, such as Unused).
func waitClaimResized(t *testing.T, admin kubernetes.Interface, ns, claim string, size int64) {
	t.Helper()
	waitFor(t, 2*time.Minute, "claim status resized", func() (bool, string) {
		c, err := admin.CoreV1().PersistentVolumeClaims(ns).Get(t.Context(), claim, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		got := c.Status.Capacity[corev1.ResourceStorage]
		ok := got.Value() == size && len(c.Status.AllocatedResourceStatuses) == 0
		for _, cond := range c.Status.Conditions {
			switch cond.Type {
			case corev1.PersistentVolumeClaimFileSystemResizePending, corev1.PersistentVolumeClaimResizing,
				corev1.PersistentVolumeClaimControllerResizeError, corev1.PersistentVolumeClaimNodeResizeError:
				ok = false
			}
		}
		return ok, fmt.Sprintf("%+v", c.Status)
	})
}

// dfSize is the size in bytes of the filesystem at path in the container.
func dfSize(h *harness, o *schemas.PodObserved, path string) int64 {
	h.t.Helper()
	out, _ := h.execIn(o, "app", false, "df", "-k", path)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	f := strings.Fields(lines[len(lines)-1])
	if len(f) < 2 {
		h.t.Fatalf("df output %q", out)
	}
	kb, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		h.t.Fatalf("df output %q: %v", out, err)
	}
	return kb << 10
}

func lastCall(drv *csitest.Process, method, volumeID string) csitest.Call {
	var out csitest.Call
	for _, c := range drv.Calls() {
		if c.Method == method && c.VolumeID == volumeID {
			out = c
		}
	}
	return out
}

// A claim resized through the API while its pod runs grows the filesystem
// the pod sees (online: NodeExpandVolume on the next sync of the pod, with
// the published and staging paths), and the claim's status is left as the
// kubelet leaves it; resized again (by a resizer without recovery) while
// no pod uses it, it is expanded when the next pod publishes it (offline),
// before the pod starts.
func TestCSIVolumeExpandedOnlineAndOffline(t *testing.T) {
	h, cp, ns := apiHarness(t, nil)
	admin := cp.AdminClient(t)
	ensureNode(t, cp, nil)
	const name = "expand.csi.nodelet.io"
	createCSIDriver(t, admin, name, false)
	drv := startExpandingDriver(t, name, h.cfg.Node.StateDir)
	waitCSINode(t, admin, name)
	pv := sizedClaim(t, admin, ns, name, "vol-e", "data", 64<<20, corev1.PersistentVolumeFilesystem)

	grace := int64(1)
	pod := newPod("grows", withMount(busybox("app", "echo kept > /data/file; exec sleep 3600"), "data", "/data"))
	pod.Spec.TerminationGracePeriodSeconds = &grace
	pod.Spec.Volumes = []corev1.Volume{claimVolume("data", "data", false)}
	created := createPod(t, h, cp, ns, pod)
	o := h.waitObserved(created, 2*time.Minute, "running", func(o *schemas.PodObserved) bool { return running(o, "app") })
	if got := dfSize(h, o, "/data"); got != 64<<20 {
		t.Fatalf("volume of %d bytes in the pod, want 64Mi", got)
	}
	if n := drv.Count("NodeExpandVolume", ""); n != 0 {
		t.Fatalf("%d NodeExpandVolume calls before any resize", n)
	}

	resizeClaim(t, admin, ns, "data", pv.Name, 128<<20, true)
	// The pod's next sync (the runtime's resync, or any input): put its
	// desired state again.
	h.desire(created)
	waitFor(t, time.Minute, "filesystem grown in the pod", func() (bool, string) {
		got := dfSize(h, o, "/data")
		return got == 128<<20, fmt.Sprint(got)
	})
	waitClaimResized(t, admin, ns, "data", 128<<20)
	c := lastCall(drv, "NodeExpandVolume", "vol-e")
	if c.Bytes != 128<<20 || c.Path != csiTarget(h.cfg.Node.StateDir, string(created.UID), pv.Name) || c.Staging == "" || c.Block {
		t.Fatalf("NodeExpandVolume call %+v", c)
	}
	h.events.await(t, created.UID, "FileSystemResizeSuccess", 1)
	// The kubelet records it on the claim too.
	claim, err := admin.CoreV1().PersistentVolumeClaims(ns).Get(t.Context(), "data", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ev := h.events.await(t, claim.UID, "FileSystemResizeSuccess", 1)[0]; ev.Object.Kind != "PersistentVolumeClaim" ||
		ev.Object.Namespace != ns || ev.Object.Name != "data" || !strings.Contains(ev.Message, "MountVolume.NodeExpandVolume succeeded") {
		t.Fatalf("claim's event %+v", ev)
	}
	if out, _ := h.execIn(o, "app", false, "cat", "/data/file"); out != "kept\n" {
		t.Fatalf("data after the expansion %q", out)
	}
	// Expanded once: later syncs leave it alone.
	h.desire(created)
	h.barrier()
	if n := drv.Count("NodeExpandVolume", "vol-e"); n != 1 {
		t.Fatalf("%d NodeExpandVolume calls, want 1", n)
	}

	h.remove(created)
	h.volumesGone(string(created.UID))
	waitFor(t, 30*time.Second, "unstaged", func() (bool, string) { return drv.Count("NodeUnstageVolume", "vol-e") == 1, "" })
	// A resizer without recovery this time (the kubelet's legacy
	// expansion: capacity set, conditions cleared).
	resizeClaim(t, admin, ns, "data", pv.Name, 192<<20, false)
	next := newPod("grown", withMount(busybox("app", "exec sleep 3600"), "data", "/data"))
	next.Spec.TerminationGracePeriodSeconds = &grace
	next.Spec.Volumes = []corev1.Volume{claimVolume("data", "data", false)}
	second := createPod(t, h, cp, ns, next)
	o = h.waitObserved(second, 2*time.Minute, "running", func(o *schemas.PodObserved) bool { return running(o, "app") })
	if got := dfSize(h, o, "/data"); got != 192<<20 {
		t.Fatalf("second pod starts on %d bytes, want 192Mi", got)
	}
	waitClaimResized(t, admin, ns, "data", 192<<20)
	if out, _ := h.execIn(o, "app", false, "cat", "/data/file"); out != "kept\n" {
		t.Fatalf("data after the offline expansion %q", out)
	}
	var order []string
	for _, c := range drv.Calls() {
		if c.VolumeID == "vol-e" && c.Method != "NodeGetVolumeStats" {
			order = append(order, c.Method)
		}
	}
	if want := "NodeStageVolume NodePublishVolume NodeExpandVolume NodeUnpublishVolume NodeUnstageVolume NodeStageVolume NodePublishVolume NodeExpandVolume"; strings.Join(order, " ") != want {
		t.Fatalf("calls %v\nwant %s", order, want)
	}
	h.remove(second)
	h.volumesGone(string(second.UID))
	waitFor(t, 30*time.Second, "no mount left", func() (bool, string) {
		ms := testenv.MountsUnder(h.cfg.Node.StateDir)
		return len(ms) == 0 && drv.Count("NodeUnstageVolume", "vol-e") == 2, strings.Join(ms, ",")
	})
}

// A Block claim of a CSI volume appears in the container as a block
// device at its volumeDevices path (staged and published as a block
// device: a loop device of the test driver); what the container writes
// lands on the device; a resize grows the device the container sees; once
// the pod goes, the device is unpublished, unstaged and detached, and
// nothing is left mounted.
func TestCSIBlockVolumeAsDevice(t *testing.T) {
	h, cp, ns := apiHarness(t, nil)
	admin := cp.AdminClient(t)
	ensureNode(t, cp, nil)
	const name = "block.csi.nodelet.io"
	createCSIDriver(t, admin, name, false)
	drv := startExpandingDriver(t, name, h.cfg.Node.StateDir)
	waitCSINode(t, admin, name)
	pv := sizedClaim(t, admin, ns, name, "vol-b", "disk", 32<<20, corev1.PersistentVolumeBlock)

	grace := int64(1)
	app := busybox("app", "exec sleep 3600")
	app.VolumeDevices = []corev1.VolumeDevice{{Name: "disk", DevicePath: "/dev/xvda"}}
	pod := newPod("raw-block", app)
	pod.Spec.TerminationGracePeriodSeconds = &grace
	pod.Spec.Volumes = []corev1.Volume{claimVolume("disk", "disk", false)}
	created := createPod(t, h, cp, ns, pod)
	o := h.waitObserved(created, 2*time.Minute, "running", func(o *schemas.PodObserved) bool { return running(o, "app") })
	if out, _ := h.execIn(o, "app", false, "sh", "-c", "test -b /dev/xvda && blockdev --getsize64 /dev/xvda"); strings.TrimSpace(out) != "33554432" {
		t.Fatalf("device in the container: %q", out)
	}
	h.execIn(o, "app", false, "sh", "-c", "echo written-by-the-pod | dd of=/dev/xvda conv=fsync 2>/dev/null")
	b := make([]byte, 19)
	if f, err := os.Open(drv.Image("vol-b")); err != nil {
		t.Fatal(err)
	} else {
		_, _ = f.Read(b)
		f.Close()
	}
	if string(b) != "written-by-the-pod\n" {
		t.Fatalf("device holds %q", b)
	}
	for _, m := range []string{"NodeStageVolume", "NodePublishVolume"} {
		if c := lastCall(drv, m, "vol-b"); !c.Block {
			t.Fatalf("%s without a block capability: %+v", m, c)
		}
	}
	link := filepath.Join(podDir(h.cfg.Node.StateDir, string(created.UID)), "volumeDevices", "kubernetes.io~csi", pv.Name)
	if dst, err := os.Readlink(link); err != nil || dst != lastCall(drv, "NodePublishVolume", "vol-b").Path {
		t.Fatalf("pod device link %s -> %q (%v)", link, dst, err)
	}
	// The block volume is in the pod's volume stats (/stats/summary), its
	// capacity the driver's answer about the published device, as the
	// kubelet's csiBlockMapper metrics.
	waitFor(t, 90*time.Second, "the block volume's stats", func() (bool, string) {
		rec, _, err := bus.Get[schemas.PodVolumeStats](h.ctx, h.status, bus.BucketRuntime, bus.KeyVolumeStats)
		if err != nil || rec == nil {
			return false, fmt.Sprint(err)
		}
		for _, v := range rec.Pods[string(created.UID)] {
			if v.Name == "disk" {
				return v.PVCRef != nil && v.PVCRef.Name == "disk" && v.CapacityBytes != nil && *v.CapacityBytes == 32<<20, fmt.Sprintf("%+v", v)
			}
		}
		return false, fmt.Sprintf("%+v", rec.Pods[string(created.UID)])
	})
	if c := lastCall(drv, "NodeGetVolumeStats", "vol-b"); c.Path != lastCall(drv, "NodePublishVolume", "vol-b").Path {
		t.Fatalf("NodeGetVolumeStats asked about %q, want the published device", c.Path)
	}

	resizeClaim(t, admin, ns, "disk", pv.Name, 48<<20, true)
	h.desire(created)
	waitFor(t, time.Minute, "device grown in the container", func() (bool, string) {
		out, _ := h.execIn(o, "app", false, "blockdev", "--getsize64", "/dev/xvda")
		return strings.TrimSpace(out) == "50331648", out
	})
	waitClaimResized(t, admin, ns, "disk", 48<<20)
	if c := lastCall(drv, "NodeExpandVolume", "vol-b"); !c.Block || c.Bytes != 48<<20 {
		t.Fatalf("NodeExpandVolume call %+v", c)
	}

	h.remove(created)
	h.volumesGone(string(created.UID))
	waitFor(t, 30*time.Second, "unpublished, unstaged and detached", func() (bool, string) {
		ms := testenv.MountsUnder(h.cfg.Node.StateDir)
		out, _ := exec.Command("losetup", "-j", drv.Image("vol-b")).Output()
		return drv.Count("NodeUnpublishVolume", "vol-b") == 1 && drv.Count("NodeUnstageVolume", "vol-b") == 1 &&
			len(ms) == 0 && len(out) == 0, strings.Join(ms, ",") + string(out)
	})
	// As the kubelet's cleanupOrphanDeviceFiles, the volume's directories
	// go; the publish and staging parents stay.
	devices := filepath.Join(h.cfg.Node.StateDir, "plugins", "kubernetes.io", "csi", "volumeDevices")
	for _, dir := range []string{devices, filepath.Join(devices, "publish"), filepath.Join(devices, "staging")} {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if dir != devices || (e.Name() != "publish" && e.Name() != "staging") {
				t.Fatalf("%s left in %s", e.Name(), dir)
			}
		}
	}
}

// A CSIDriver with tokenRequests gets, in NodePublishVolume's volume
// context, the pod's service account token for each audience (the
// TokenRequest statuses by audience, as the kubelet's csi_mounter passes
// them), bound to the pod; with requiresRepublish, NodePublishVolume is
// called again on each sync of the running pod, the periodic resync (every
// 30s) included, with the same paths and staging once.
func TestCSIRepublishWithServiceAccountTokens(t *testing.T) {
	// Republishing rides the volumes' resync: a short one keeps the test short.
	h, cp, ns := apiHarness(t, func(c *config.Config) { c.Runtime.SyncFrequency = 10 * time.Second })
	admin := cp.AdminClient(t)
	ensureNode(t, cp, nil)
	const name = "token.csi.nodelet.io"
	attach, republish := false, true
	d := &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: storagev1.CSIDriverSpec{
		AttachRequired: &attach, RequiresRepublish: &republish,
		TokenRequests: []storagev1.TokenRequest{{Audience: "vault.example"}, {Audience: ""}}}}
	if _, err := admin.StorageV1().CSIDrivers().Create(t.Context(), d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.StorageV1().CSIDrivers().Delete(t.Context(), name, metav1.DeleteOptions{}) })
	drv := startDriver(t, name, h.cfg.Node.StateDir, true)
	waitCSINode(t, admin, name)
	csiClaim(t, admin, ns, name, "vol-t", "secrets")

	grace := int64(1)
	pod := newPod("token-user", withMount(busybox("app", "exec sleep 3600"), "secrets", "/secrets"))
	pod.Spec.TerminationGracePeriodSeconds = &grace
	pod.Spec.Volumes = []corev1.Volume{claimVolume("secrets", "secrets", false)}
	created := createPod(t, h, cp, ns, pod)
	h.waitObserved(created, 2*time.Minute, "running", func(o *schemas.PodObserved) bool { return running(o, "app") })
	first := lastCall(drv, "NodePublishVolume", "vol-t")
	var tokens map[string]authenticationv1.TokenRequestStatus
	if err := json.Unmarshal([]byte(first.Context["csi.storage.k8s.io/serviceAccount.tokens"]), &tokens); err != nil || len(tokens) != 2 {
		t.Fatalf("volume context %v: tokens %v (%v)", first.Context, tokens, err)
	}
	for _, aud := range []string{"vault.example", ""} {
		tok := tokens[aud]
		if tok.Token == "" || tok.ExpirationTimestamp.IsZero() {
			t.Fatalf("token for audience %q: %+v", aud, tok)
		}
		spec := authenticationv1.TokenReviewSpec{Token: tok.Token}
		if aud != "" {
			spec.Audiences = []string{aud}
		}
		review, err := admin.AuthenticationV1().TokenReviews().Create(h.ctx, &authenticationv1.TokenReview{Spec: spec}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		st := review.Status
		if !st.Authenticated || st.User.Username != "system:serviceaccount:"+ns+":default" ||
			len(st.User.Extra["authentication.kubernetes.io/pod-name"]) != 1 || st.User.Extra["authentication.kubernetes.io/pod-name"][0] != created.Name {
			t.Fatalf("token for audience %q: review %+v", aud, st)
		}
	}
	if n := drv.Count("NodeStageVolume", "vol-t"); n != 1 {
		t.Fatalf("%d NodeStageVolume calls", n)
	}
	// Twice more: the second time on the resync at the latest, after the
	// syncs of the pod's start.
	for range 2 {
		n := drv.Count("NodePublishVolume", "vol-t")
		waitFor(t, 45*time.Second, "published again", func() (bool, string) {
			return drv.Count("NodePublishVolume", "vol-t") > n, ""
		})
	}
	again := lastCall(drv, "NodePublishVolume", "vol-t")
	if again.Path != first.Path || again.Staging != first.Staging || again.Context["csi.storage.k8s.io/serviceAccount.tokens"] == "" {
		t.Fatalf("republished %+v\nfirst %+v", again, first)
	}
	if n := drv.Count("NodeUnpublishVolume", "vol-t") + drv.Count("NodeStageVolume", "vol-t"); n != 1 {
		t.Fatalf("republishing unpublished or staged again: %+v", drv.Calls())
	}
	h.remove(created)
	h.volumesGone(string(created.UID))
	waitFor(t, 30*time.Second, "unstaged", func() (bool, string) {
		ms := testenv.MountsUnder(h.cfg.Node.StateDir)
		return drv.Count("NodeUnstageVolume", "vol-t") == 1 && len(ms) == 0, strings.Join(ms, ",")
	})
}
