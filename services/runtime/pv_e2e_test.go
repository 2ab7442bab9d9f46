package runtime

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/nodelet/nodelet/internal/testenv"
	"github.com/nodelet/nodelet/schemas"
)

// ensureNode creates the Node node-1 (as nodelet-status registers it) when
// missing: local volumes' node affinity reads its labels and the CSINode is
// owned by it.
func ensureNode(t *testing.T, cp *testenv.ControlPlane, annotations map[string]string) *corev1.Node {
	t.Helper()
	admin := cp.AdminClient(t)
	ctx := t.Context()
	n, err := admin.CoreV1().Nodes().Get(ctx, "node-1", metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		n, err = admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{
			Name: "node-1", Labels: map[string]string{corev1.LabelHostname: "node-1"}}}, metav1.CreateOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(annotations) > 0 {
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		for k, v := range annotations {
			n.Annotations[k] = v
		}
		if n, err = admin.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

// newPV is a 1Gi ReadWriteOnce PV of storage class class.
func newPV(name, class string, src corev1.PersistentVolumeSource) *corev1.PersistentVolume {
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			StorageClassName:              class,
			PersistentVolumeSource:        src,
		},
	}
}

func newPVC(name, class string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: &class,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
}

// bindClaim binds pvc to pv both ways, as the PV controller does (which
// may run and touch them at the same time: every write retries).
func bindClaim(t *testing.T, admin kubernetes.Interface, ns, pvcName, pvName string) {
	t.Helper()
	ctx := t.Context()
	pvcs, pvs := admin.CoreV1().PersistentVolumeClaims(ns), admin.CoreV1().PersistentVolumes()
	step := func(what string, f func() error) {
		t.Helper()
		if err := retry.RetryOnConflict(retry.DefaultRetry, f); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	var uid types.UID
	step("claimRef", func() error {
		pvc, err := pvcs.Get(ctx, pvcName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		uid = pvc.UID
		pv, err := pvs.Get(ctx, pvName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		pv.Spec.ClaimRef = &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: ns, Name: pvcName, UID: uid}
		_, err = pvs.Update(ctx, pv, metav1.UpdateOptions{})
		return err
	})
	step("PV phase", func() error {
		pv, err := pvs.Get(ctx, pvName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		pv.Status.Phase = corev1.VolumeBound
		_, err = pvs.UpdateStatus(ctx, pv, metav1.UpdateOptions{})
		return err
	})
	step("volumeName", func() error {
		pvc, err := pvcs.Get(ctx, pvcName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		pvc.Spec.VolumeName = pvName
		_, err = pvcs.Update(ctx, pvc, metav1.UpdateOptions{})
		return err
	})
	step("PVC phase", func() error {
		pvc, err := pvcs.Get(ctx, pvcName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		pvc.Status.Phase = corev1.ClaimBound
		pvc.Status.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
		pvc.Status.Capacity = corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}
		_, err = pvcs.UpdateStatus(ctx, pvc, metav1.UpdateOptions{})
		return err
	})
}

func claimVolume(name, claim string, readOnly bool) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim, ReadOnly: readOnly}}}
}

func createClaim(t *testing.T, admin kubernetes.Interface, ns string, pvc *corev1.PersistentVolumeClaim) {
	t.Helper()
	if _, err := admin.CoreV1().PersistentVolumeClaims(ns).Create(t.Context(), pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func createPV(t *testing.T, admin kubernetes.Interface, pv *corev1.PersistentVolume) {
	t.Helper()
	if _, err := admin.CoreV1().PersistentVolumes().Create(t.Context(), pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.CoreV1().PersistentVolumes().Delete(t.Context(), pv.Name, metav1.DeleteOptions{}) })
}

// A local PV with node affinity for this node, bound to a claim: a pod
// writes to it (the data lands in the PV's directory, with the pod's
// fsGroup; a subPath of the claim lands in its subdirectory), a pod on a read-only claim of a hostPath PV reads but cannot
// write; once the pods are gone no mount remains and the local data stays.
func TestLocalAndHostPathPersistentVolumes(t *testing.T) {
	h, cp, ns := apiHarness(t, nil)
	admin := cp.AdminClient(t)
	ensureNode(t, cp, nil)
	class := "local-" + ns
	localDir := t.TempDir()
	if err := os.Chmod(localDir, 0o777); err != nil {
		t.Fatal(err)
	}
	local := newPV("local-"+ns, class, corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: localDir}})
	local.Spec.NodeAffinity = &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
		MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{"node-1"}}},
	}}}}
	createPV(t, admin, local)
	createClaim(t, admin, ns, newPVC("data", class))
	bindClaim(t, admin, ns, "data", local.Name)

	hostDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(hostDir, "greeting"), []byte("hello from the host"), 0o644); err != nil {
		t.Fatal(err)
	}
	hp := newPV("hostpath-"+ns, class, corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: hostDir}})
	createPV(t, admin, hp)
	createClaim(t, admin, ns, newPVC("shared", class))
	bindClaim(t, admin, ns, "shared", hp.Name)

	grace := int64(1)
	fsGroup := int64(1234)
	app := withMount(withMount(busybox("app", "echo written-by-pod > /data/file; echo in-subpath > /nested/x; exec sleep 3600"), "data", "/data"), "shared", "/shared")
	app.VolumeMounts = append(app.VolumeMounts, corev1.VolumeMount{Name: "data", MountPath: "/nested", SubPath: "sub/dir"})
	writer := newPod("local-writer", app)
	writer.Spec.TerminationGracePeriodSeconds = &grace
	writer.Spec.SecurityContext = &corev1.PodSecurityContext{FSGroup: &fsGroup}
	writer.Spec.Volumes = []corev1.Volume{claimVolume("data", "data", false), claimVolume("shared", "shared", true)}
	created := createPod(t, h, cp, ns, writer)
	o := h.waitObserved(created, 2*time.Minute, "running", func(o *schemas.PodObserved) bool { return running(o, "app") })
	waitFor(t, 30*time.Second, "file in the local PV", func() (bool, string) {
		b, _ := os.ReadFile(filepath.Join(localDir, "file"))
		return string(b) == "written-by-pod\n", string(b)
	})
	waitFor(t, 30*time.Second, "file through the subPath", func() (bool, string) {
		b, _ := os.ReadFile(filepath.Join(localDir, "sub", "dir", "x"))
		return string(b) == "in-subpath\n", string(b)
	})
	if out, _ := h.execIn(o, "app", false, "cat", "/shared/greeting"); out != "hello from the host" {
		t.Fatalf("hostPath PV reads %q", out)
	}
	if _, code := h.execIn(o, "app", true, "touch", "/shared/new"); code == 0 {
		t.Fatal("a read-only claim is writable")
	}
	fi, err := os.Stat(localDir)
	if err != nil {
		t.Fatal(err)
	}
	if gid, _ := statGID(fi); gid != fsGroup || fi.Mode()&os.ModeSetgid == 0 {
		t.Fatalf("local volume root: gid %d mode %v, want gid %d with setgid", gid, fi.Mode(), fsGroup)
	}
	mountDir := filepath.Join(podDir(h.cfg.Node.StateDir, string(created.UID)), "volumes", "kubernetes.io~local-volume", local.Name)
	if len(testenv.MountsUnder(mountDir)) != 1 {
		t.Fatalf("local volume not bind-mounted at %s", mountDir)
	}
	h.remove(created)
	h.volumesGone(string(created.UID))

	// A second pod on the same claim reads what the first wrote.
	reader := newPod("local-reader", withMount(busybox("app", "exec sleep 3600"), "data", "/data"))
	reader.Spec.TerminationGracePeriodSeconds = &grace
	reader.Spec.Volumes = []corev1.Volume{claimVolume("data", "data", false)}
	created2 := createPod(t, h, cp, ns, reader)
	o = h.waitObserved(created2, 2*time.Minute, "running", func(o *schemas.PodObserved) bool { return running(o, "app") })
	if out, _ := h.execIn(o, "app", false, "cat", "/data/file"); out != "written-by-pod\n" {
		t.Fatalf("second pod reads %q", out)
	}
	h.remove(created2)
	h.volumesGone(string(created2.UID))
	if b, _ := os.ReadFile(filepath.Join(localDir, "file")); string(b) != "written-by-pod\n" {
		t.Fatalf("local data after teardown: %q", b)
	}
}

// A local PV whose node affinity names another node is refused with
// FailedMount; a claim of another namespace's name that does not exist
// says so in the kubelet's words.
func TestLocalPersistentVolumeOfAnotherNode(t *testing.T) {
	h, cp, ns := apiHarness(t, nil)
	admin := cp.AdminClient(t)
	ensureNode(t, cp, nil)
	class := "local-" + ns
	local := newPV("elsewhere-"+ns, class, corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: t.TempDir()}})
	local.Spec.NodeAffinity = &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
		MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{"node-2"}}},
	}}}}
	createPV(t, admin, local)
	createClaim(t, admin, ns, newPVC("data", class))
	bindClaim(t, admin, ns, "data", local.Name)
	pod := newPod("wrong-node", withMount(withMount(busybox("app", "exec sleep 3600"), "data", "/data"), "missing", "/missing"))
	pod.Spec.Volumes = []corev1.Volume{claimVolume("data", "data", false), claimVolume("missing", "nope", false)}
	created := createPod(t, h, cp, ns, pod)
	o := h.waitObserved(created, time.Minute, "FailedMount", func(o *schemas.PodObserved) bool { return o.Reason == "FailedMount" })
	want := "Unable to attach or mount volumes: unmounted volumes=[data missing], unattached volumes=[], failed to process volumes=[missing]: error processing PVC " + ns + "/nope: failed to fetch PVC from API server:"
	if !strings.HasPrefix(o.Message, want) {
		t.Fatalf("message %q, want prefix %q", o.Message, want)
	}
	// Once the missing claim is there, the affinity is what fails.
	createClaim(t, admin, ns, newPVC("nope", class))
	hp := newPV("hp-"+ns, class, corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: t.TempDir()}})
	createPV(t, admin, hp)
	bindClaim(t, admin, ns, "nope", hp.Name)
	o = h.waitObserved(created, time.Minute, "affinity refused", func(o *schemas.PodObserved) bool {
		return strings.Contains(o.Message, "is not on node node-1")
	})
	if !strings.HasPrefix(o.Message, `MountVolume.SetUp failed for volume "data" : local volume `+local.Name) {
		t.Fatalf("message %q", o.Message)
	}
	if len(h.containers(created.UID)) != 0 {
		t.Fatal("a container was created although a volume is not ready")
	}
}

func statGID(fi os.FileInfo) (int64, bool) {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int64(st.Gid), true
	}
	return 0, false
}
