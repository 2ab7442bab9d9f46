package runtime

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/internal/testenv"
	"github.com/nodelet/nodelet/schemas"
	"github.com/nodelet/nodelet/services/runtime/csi"
	"github.com/nodelet/nodelet/services/runtime/csi/csitest"
)

// startDriver runs the test CSI driver as its own process, registering in
// the plugin registry of the node whose state dir is stateDir.
func startDriver(t *testing.T, name, stateDir string, stage bool) *csitest.Process {
	t.Helper()
	data, err := os.MkdirTemp("", "csi")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(data) })
	return csitest.Start(t, csitest.Config{Name: name, NodeID: "node-1", MaxVolumes: 5, Stage: stage,
		DataDir: data, RegistryDir: csi.RegistryDir(stateDir)})
}

func createCSIDriver(t *testing.T, admin kubernetes.Interface, name string, attach bool, modes ...storagev1.VolumeLifecycleMode) {
	t.Helper()
	podInfo := true
	policy := storagev1.FileFSGroupPolicy
	d := &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: storagev1.CSIDriverSpec{
		AttachRequired: &attach, PodInfoOnMount: &podInfo, FSGroupPolicy: &policy, VolumeLifecycleModes: modes}}
	if _, err := admin.StorageV1().CSIDrivers().Create(t.Context(), d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.StorageV1().CSIDrivers().Delete(t.Context(), name, metav1.DeleteOptions{}) })
}

// csiClaim creates a PV of driver with handle and a claim bound to it.
func csiClaim(t *testing.T, admin kubernetes.Interface, ns, driver, handle, claim string) *corev1.PersistentVolume {
	t.Helper()
	class := "csi-" + ns
	pv := newPV(fmt.Sprintf("%s-%s", handle, ns), class, corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
		Driver: driver, VolumeHandle: handle, VolumeAttributes: map[string]string{"from": "pv"}}})
	createPV(t, admin, pv)
	createClaim(t, admin, ns, newPVC(claim, class))
	bindClaim(t, admin, ns, claim, pv.Name)
	return pv
}

// waitCSINode waits until the node's CSINode lists driver and returns it.
func waitCSINode(t *testing.T, admin kubernetes.Interface, driver string) storagev1.CSINodeDriver {
	t.Helper()
	var got storagev1.CSINodeDriver
	waitFor(t, time.Minute, "CSINode lists "+driver, func() (bool, string) {
		n, err := admin.StorageV1().CSINodes().Get(t.Context(), "node-1", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, d := range n.Spec.Drivers {
			if d.Name == driver {
				got = d
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", n.Spec.Drivers)
	})
	return got
}

func csiTarget(stateDir string, uid string, pvName string) string {
	return filepath.Join(podDir(stateDir, uid), "volumes", "kubernetes.io~csi", pvName, "mount")
}

func isMountedAt(path string) bool { return slices.Contains(testenv.MountsUnder(path), path) }

// A CSI driver registers through the plugin registry (CSINode lists it
// with its node ID, topology and attach limit); a pre-provisioned CSI PV
// bound to a claim is staged once and published into the pod, which
// writes a file; the pod goes (unpublished, unstaged); a new pod on the
// same claim reads the file; afterwards no mount remains.
func TestCSIVolumeStagedPublishedAndReused(t *testing.T) {
	h, cp, ns := apiHarness(t, nil)
	admin := cp.AdminClient(t)
	ensureNode(t, cp, nil)
	const name = "reuse.csi.nodelet.io"
	createCSIDriver(t, admin, name, false)
	drv := startDriver(t, name, h.cfg.Node.StateDir, true)
	d := waitCSINode(t, admin, name)
	if d.NodeID != "node-1" || d.Allocatable == nil || d.Allocatable.Count == nil || *d.Allocatable.Count != 5 ||
		!slices.Equal(d.TopologyKeys, []string{csitest.TopologyKey}) {
		t.Fatalf("CSINode driver entry %+v", d)
	}
	if n, _ := admin.StorageV1().CSINodes().Get(t.Context(), "node-1", metav1.GetOptions{}); len(n.OwnerReferences) != 1 || n.OwnerReferences[0].Kind != "Node" {
		t.Fatalf("CSINode owner %+v", n.OwnerReferences)
	}
	if n, err := admin.CoreV1().Nodes().Get(t.Context(), "node-1", metav1.GetOptions{}); err != nil ||
		!strings.Contains(n.Annotations["csi.volume.kubernetes.io/nodeid"], `"`+name+`":"node-1"`) || n.Labels[csitest.TopologyKey] != "node-1" {
		t.Fatalf("Node annotations %v labels %v (%v)", n.Annotations, n.Labels, err)
	}
	waitFor(t, 10*time.Second, "registration status sent", func() (bool, string) {
		return drv.Count("NotifyRegistrationStatus", "") > 0, ""
	})
	pv := csiClaim(t, admin, ns, name, "vol-1", "data")

	grace := int64(1)
	fsGroup := int64(2345)
	writer := newPod("csi-writer", withMount(busybox("app", "echo from-first-pod > /data/file; exec sleep 3600"), "data", "/data"))
	writer.Spec.TerminationGracePeriodSeconds = &grace
	writer.Spec.SecurityContext = &corev1.PodSecurityContext{FSGroup: &fsGroup}
	writer.Spec.Volumes = []corev1.Volume{claimVolume("data", "data", false)}
	first := createPod(t, h, cp, ns, writer)
	h.waitObserved(first, 2*time.Minute, "running", func(o *schemas.PodObserved) bool { return running(o, "app") })
	waitFor(t, 30*time.Second, "file in the volume's data", func() (bool, string) {
		b, _ := os.ReadFile(filepath.Join(drv.VolumeData("vol-1"), "file"))
		return string(b) == "from-first-pod\n", string(b)
	})
	target := csiTarget(h.cfg.Node.StateDir, string(first.UID), pv.Name)
	staging := filepath.Join(h.cfg.Node.StateDir, "plugins", "kubernetes.io", "csi", name)
	if !isMountedAt(target) || len(testenv.MountsUnder(staging)) != 1 {
		t.Fatalf("target %s mounted=%v, staging mounts %v", target, isMountedAt(target), testenv.MountsUnder(staging))
	}
	if s, p := drv.Count("NodeStageVolume", "vol-1"), drv.Count("NodePublishVolume", "vol-1"); s != 1 || p != 1 {
		t.Fatalf("%d NodeStageVolume, %d NodePublishVolume calls; want 1 each", s, p)
	}
	for _, c := range drv.Calls() {
		if c.Method == "NodePublishVolume" && (c.Context["csi.storage.k8s.io/pod.name"] != "csi-writer" || c.Context["from"] != "pv" || c.Staging == "") {
			t.Fatalf("NodePublishVolume call %+v", c)
		}
	}
	if fi, err := os.Stat(drv.VolumeData("vol-1")); err != nil {
		t.Fatal(err)
	} else if gid, _ := statGID(fi); gid != fsGroup {
		t.Fatalf("volume root gid %d, want fsGroup %d (CSIDriver fsGroupPolicy File)", gid, fsGroup)
	}

	h.remove(first)
	h.volumesGone(string(first.UID))
	waitFor(t, 30*time.Second, "unstaged", func() (bool, string) {
		return drv.Count("NodeUnpublishVolume", "vol-1") == 1 && drv.Count("NodeUnstageVolume", "vol-1") == 1, ""
	})
	if ms := testenv.MountsUnder(staging); len(ms) != 0 {
		t.Fatalf("staging still mounted: %v", ms)
	}

	reader := newPod("csi-reader", withMount(busybox("app", "exec sleep 3600"), "data", "/data"))
	reader.Spec.TerminationGracePeriodSeconds = &grace
	reader.Spec.Volumes = []corev1.Volume{claimVolume("data", "data", false)}
	second := createPod(t, h, cp, ns, reader)
	o := h.waitObserved(second, 2*time.Minute, "running", func(o *schemas.PodObserved) bool { return running(o, "app") })
	if out, _ := h.execIn(o, "app", false, "cat", "/data/file"); out != "from-first-pod\n" {
		t.Fatalf("second pod reads %q", out)
	}
	h.remove(second)
	h.volumesGone(string(second.UID))
	waitFor(t, 30*time.Second, "no mount left", func() (bool, string) {
		ms := testenv.MountsUnder(h.cfg.Node.StateDir)
		return len(ms) == 0 && drv.Count("NodeUnstageVolume", "vol-1") == 2, strings.Join(ms, ",")
	})
	if _, err := os.Stat(filepath.Join(staging)); err == nil {
		if entries, _ := os.ReadDir(staging); len(entries) != 0 {
			t.Fatalf("staging directories left: %v", entries)
		}
	}

	// The driver goes: it leaves CSINode.
	drv.Stop()
	waitFor(t, 30*time.Second, "driver removed from CSINode", func() (bool, string) {
		n, err := admin.StorageV1().CSINodes().Get(t.Context(), "node-1", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, d := range n.Spec.Drivers {
			if d.Name == name {
				return false, "still listed"
			}
		}
		return true, ""
	})
	if n, _ := admin.CoreV1().Nodes().Get(t.Context(), "node-1", metav1.GetOptions{}); strings.Contains(n.Annotations["csi.volume.kubernetes.io/nodeid"], name) {
		t.Fatalf("node ID annotation still names the driver: %v", n.Annotations)
	}
}

// SIGKILL nodelet-runtime while a pod uses a CSI volume: after the
// restart the container is not restarted, the volume is neither
// unpublished nor published again, and deleting the pod afterwards
// unpublishes and unstages it.
func TestCSIVolumeSurvivesSIGKILL(t *testing.T) {
	cp := sharedControlPlane(t)
	ns := cp.Namespace(t)
	admin := cp.AdminClient(t)
	ensureNode(t, cp, nil)
	h := newHarness(t, harnessOptions{noStart: true})
	h.setSourcesReady()
	stateDir := h.bus.StateDir // the daemon's node.stateDir
	const name = "kill.csi.nodelet.io"
	createCSIDriver(t, admin, name, false)
	drv := startDriver(t, name, stateDir, true)
	pv := csiClaim(t, admin, ns, name, "vol-k", "data")

	p1 := h.startProcessWith(t, 1, "NODELET_SOURCES_KUBECONFIG="+cp.NodeKubeconfig)
	grace := int64(1)
	pod := newPod("csi-killed", withMount(busybox("app", "echo alive > /data/alive; exec sleep 3600"), "data", "/data"))
	pod.Spec.TerminationGracePeriodSeconds = &grace
	pod.Spec.Volumes = []corev1.Volume{claimVolume("data", "data", false)}
	created := createPod(t, h, cp, ns, pod)
	h.waitObserved(created, 2*time.Minute, "running", func(o *schemas.PodObserved) bool { return running(o, "app") })
	before := h.containers(created.UID)
	target := csiTarget(stateDir, string(created.UID), pv.Name)
	if len(before) != 1 || !isMountedAt(target) {
		t.Fatalf("%d containers, target mounted %v", len(before), isMountedAt(target))
	}
	if err := p1.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p1.done
	regs := drv.Count("NotifyRegistrationStatus", "")
	h.startProcessWith(t, 2, "NODELET_SOURCES_KUBECONFIG="+cp.NodeKubeconfig)
	waitFor(t, time.Minute, "driver registered again", func() (bool, string) {
		return drv.Count("NotifyRegistrationStatus", "") > regs, ""
	})
	// A wrong implementation has unpublished, published again or restarted
	// by the time a pod put after the restart runs.
	h.barrier()
	after := h.containers(created.UID)
	if len(after) != 1 || after[0].Id != before[0].Id {
		t.Fatalf("containers changed across the restart: %v -> %v", before, after)
	}
	if !isMountedAt(target) || drv.Count("NodeUnpublishVolume", "") != 0 || drv.Count("NodePublishVolume", "") != 1 || drv.Count("NodeStageVolume", "") != 1 {
		t.Fatalf("after the restart: mounted=%v calls=%+v", isMountedAt(target), drv.Calls())
	}
	h.remove(created)
	waitFor(t, 2*time.Minute, "unpublished and unstaged", func() (bool, string) {
		ms := testenv.MountsUnder(stateDir)
		return drv.Count("NodeUnpublishVolume", "vol-k") == 1 && drv.Count("NodeUnstageVolume", "vol-k") == 1 && len(ms) == 0, strings.Join(ms, ",")
	})
	if b, _ := os.ReadFile(filepath.Join(drv.VolumeData("vol-k"), "alive")); string(b) != "alive\n" {
		t.Fatalf("volume data %q", b)
	}
}

var (
	ctlOnce sync.Once
	ctl     *testenv.Controllers
	ctlErr  error
)

// sharedControllers starts kube-controller-manager (and the scheduler)
// against the shared control plane, once.
func sharedControllers(t *testing.T) *testenv.ControlPlane {
	t.Helper()
	cp := sharedControlPlane(t)
	ctlOnce.Do(func() {
		bins, err := testenv.Binaries()
		if err != nil {
			ctlErr = err
			return
		}
		dir := filepath.Dir(bins.KubeAPIServer)
		ctl, ctlErr = cp.StartControllers(filepath.Join(dir, "kube-controller-manager"), filepath.Join(dir, "kube-scheduler"))
	})
	if ctlErr != nil {
		t.Fatalf("kube-controller-manager: %v", ctlErr)
	}
	return cp
}

// A pod on a CSI volume whose driver is not registered waits with
// FailedMount naming the driver (no container, nothing half mounted);
// once the driver registers, the pod starts.
func TestCSIDriverNotRegisteredYet(t *testing.T) {
	h, cp, ns := apiHarness(t, nil)
	admin := cp.AdminClient(t)
	ensureNode(t, cp, nil)
	const name = "late.csi.nodelet.io"
	createCSIDriver(t, admin, name, false)
	csiClaim(t, admin, ns, name, "vol-l", "data")
	pod := newPod("driver-late", withMount(busybox("app", "exec sleep 3600"), "data", "/data"))
	pod.Spec.Volumes = []corev1.Volume{claimVolume("data", "data", false)}
	created := createPod(t, h, cp, ns, pod)
	want := `MountVolume.SetUp failed for volume "data" : kubernetes.io/csi: mounter.SetUpAt failed to get CSI client: driver name ` + name + ` not found in the list of registered CSI drivers`
	h.waitObserved(created, time.Minute, "waiting for the driver", func(o *schemas.PodObserved) bool {
		return o.Reason == "FailedMount" && o.Message == want
	})
	waitFor(t, 30*time.Second, "FailedMount event", func() (bool, string) {
		for _, e := range h.events.find(created.UID, "FailedMount") {
			if e.Message == want {
				return true, ""
			}
		}
		return false, ""
	})
	if len(h.containers(created.UID)) != 0 || len(testenv.MountsUnder(filepath.Join(podDir(h.cfg.Node.StateDir, string(created.UID)), "volumes", "kubernetes.io~csi"))) != 0 {
		t.Fatal("a container or a mount exists while the driver is missing")
	}
	startDriver(t, name, h.cfg.Node.StateDir, true)
	h.waitObserved(created, 2*time.Minute, "running once the driver registered", func(o *schemas.PodObserved) bool { return running(o, "app") })
}

// nodelet-runtime stops while a pod uses a CSI volume; meanwhile the pod
// goes entirely (its sandbox removed from CRI) and the bus store is lost
// (a new bus): the restarted runtime finds the orphaned pod directory (the
// kubelet's cleanupOrphanedPodDirs) and unpublishes and unstages the
// volume.
func TestCSIOrphanedPodDirTornDown(t *testing.T) {
	h, cp, ns := apiHarness(t, nil)
	admin := cp.AdminClient(t)
	ensureNode(t, cp, nil)
	h.setSourcesReady()
	const name = "orph.csi.nodelet.io"
	createCSIDriver(t, admin, name, false)
	drv := startDriver(t, name, h.cfg.Node.StateDir, true)
	csiClaim(t, admin, ns, name, "vol-o", "data")
	grace := int64(1)
	pod := newPod("orphaned", withMount(busybox("app", "exec sleep 3600"), "data", "/data"))
	pod.Spec.TerminationGracePeriodSeconds = &grace
	pod.Spec.Volumes = []corev1.Volume{claimVolume("data", "data", false)}
	created := createPod(t, h, cp, ns, pod)
	h.waitObserved(created, 2*time.Minute, "running", func(o *schemas.PodObserved) bool { return running(o, "app") })
	h.stop()
	for _, sb := range h.sandboxes(created.UID) {
		if _, err := h.cri.Runtime.StopPodSandbox(h.ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb.Id}); err != nil {
			t.Fatal(err)
		}
		if _, err := h.cri.Runtime.RemovePodSandbox(h.ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb.Id}); err != nil {
			t.Fatal(err)
		}
	}
	// A new bus: nothing of the pod is left in any bucket.
	h2 := newHarness(t, harnessOptions{
		configure: func(c *config.Config) { c.Node.StateDir = h.cfg.Node.StateDir },
		options:   func(o *Options) { o.Objects = NewAPIObjectsFor(cp.NodeClient(t), "node-1") },
	})
	if drv.Count("NodeUnpublishVolume", "") != 0 {
		t.Fatal("unpublished before the restart")
	}
	h2.setSourcesReady()
	waitFor(t, 2*time.Minute, "orphaned volume unpublished and unstaged", func() (bool, string) {
		ms := testenv.MountsUnder(h.cfg.Node.StateDir)
		return drv.Count("NodeUnpublishVolume", "vol-o") == 1 && drv.Count("NodeUnstageVolume", "vol-o") == 1 && len(ms) == 0, strings.Join(ms, ",")
	})
	h.volumesGone(string(created.UID))
}

// The pods' persistent volume stats are published in the runtime bucket
// (key volumestats) for /stats/summary: a CSI volume measured by the
// driver's NodeGetVolumeStats, a local volume by statfs, each with its
// claim.
func TestPersistentVolumeStats(t *testing.T) {
	cp := sharedControlPlane(t)
	ns := cp.Namespace(t)
	h := newHarness(t, harnessOptions{options: func(o *Options) {
		o.Objects = NewAPIObjectsFor(cp.NodeClient(t), "node-1")
		o.VolumeStatsPeriod = 500 * time.Millisecond
	}})
	admin := cp.AdminClient(t)
	ensureNode(t, cp, nil)
	const name = "stats.csi.nodelet.io"
	createCSIDriver(t, admin, name, false)
	drv := startDriver(t, name, h.cfg.Node.StateDir, true)
	waitCSINode(t, admin, name)
	csiClaim(t, admin, ns, name, "vol-s", "data")
	local := newPV("stats-local-"+ns, "csi-"+ns, corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: t.TempDir()}})
	local.Spec.NodeAffinity = &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
		MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{"node-1"}}},
	}}}}
	createPV(t, admin, local)
	createClaim(t, admin, ns, newPVC("scratch", "csi-"+ns))
	bindClaim(t, admin, ns, "scratch", local.Name)
	pod := newPod("measured", withMount(withMount(busybox("app", "exec sleep 3600"), "data", "/data"), "scratch", "/scratch"))
	pod.Spec.Volumes = []corev1.Volume{claimVolume("data", "data", false), claimVolume("scratch", "scratch", false)}
	created := createPod(t, h, cp, ns, pod)
	h.waitObserved(created, 2*time.Minute, "running", func(o *schemas.PodObserved) bool { return running(o, "app") })
	var got []statsapi.VolumeStats
	waitFor(t, 30*time.Second, "volume stats published", func() (bool, string) {
		rec, _, err := bus.Get[schemas.PodVolumeStats](h.ctx, h.status, bus.BucketRuntime, bus.KeyVolumeStats)
		if err != nil || rec == nil {
			return false, fmt.Sprint(err)
		}
		// The claims; the API's service account token volume is
		// measured too.
		got = nil
		for _, v := range rec.Pods[string(created.UID)] {
			if v.PVCRef != nil {
				got = append(got, v)
			}
		}
		return len(got) == 2, fmt.Sprintf("%+v", rec.Pods)
	})
	for i, want := range []string{"data", "scratch"} {
		v := got[i]
		if v.Name != want || v.PVCRef == nil || v.PVCRef.Name != want || v.PVCRef.Namespace != ns ||
			v.CapacityBytes == nil || *v.CapacityBytes == 0 || v.UsedBytes == nil || v.Inodes == nil {
			t.Fatalf("volume stats %d: %+v", i, v)
		}
	}
	if drv.Count("NodeGetVolumeStats", "vol-s") == 0 {
		t.Fatal("the CSI volume was not measured through NodeGetVolumeStats")
	}
}
