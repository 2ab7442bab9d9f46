package volumes

import (
	"context"
	"os"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nodelet/nodelet/internal/testenv"
)

// Claims that cannot be used hold the pod with the kubelet's words, in a
// MountWaitError that names the unmounted and unprocessed volumes. (The
// real API server and the real mounts are in the runtime's e2e tests.)
func TestClaimResolutionErrors(t *testing.T) {
	block := corev1.PersistentVolumeBlock
	now := metav1.Now()
	pvc := func(name, volume string, phase corev1.PersistentVolumeClaimPhase, mut ...func(*corev1.PersistentVolumeClaim)) *corev1.PersistentVolumeClaim {
		c := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name)},
			Spec:   corev1.PersistentVolumeClaimSpec{VolumeName: volume, AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}},
			Status: corev1.PersistentVolumeClaimStatus{Phase: phase}}
		for _, m := range mut {
			m(c)
		}
		return c
	}
	pv := func(name, claimUID string, mut ...func(*corev1.PersistentVolume)) *corev1.PersistentVolume {
		v := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PersistentVolumeSpec{
			AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: os.TempDir()}}}}
		if claimUID != "" {
			v.Spec.ClaimRef = &corev1.ObjectReference{Namespace: "ns", Name: "x", UID: types.UID(claimUID)}
		}
		for _, m := range mut {
			m(v)
		}
		return v
	}
	objects := []runtime.Object{
		pvc("pending", "", corev1.ClaimPending),
		pvc("noname", "", corev1.ClaimBound),
		pvc("deleting", "pv-ok", corev1.ClaimBound, func(c *corev1.PersistentVolumeClaim) { c.DeletionTimestamp = &now }),
		pvc("nopv", "pv-missing", corev1.ClaimBound),
		pvc("unbound-pv", "pv-free", corev1.ClaimBound), pv("pv-free", ""),
		pvc("other", "pv-other", corev1.ClaimBound), pv("pv-other", "someone-else"),
		pvc("block", "pv-block", corev1.ClaimBound), pv("pv-block", "uid-block", func(v *corev1.PersistentVolume) { v.Spec.VolumeMode = &block }),
		pvc("rox", "pv-rwo", corev1.ClaimBound, func(c *corev1.PersistentVolumeClaim) {
			c.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}
		}), pv("pv-rwo", "uid-rox"),
		pvc("good", "pv-good", corev1.ClaimBound), pv("pv-good", "uid-good"),
		pvc("eph-scratch", "pv-eph", corev1.ClaimBound), pv("pv-eph", "uid-eph-scratch"),
	}
	m := New(Options{StateDir: t.TempDir(), Client: fake.NewSimpleClientset(objects...), NodeName: "node-1", Log: quietLog()})
	for _, tc := range []struct{ claim, want string }{
		{"pending", "error processing PVC ns/pending: PVC is not bound"},
		{"noname", "error processing PVC ns/noname: PVC has empty pvc.Spec.VolumeName"},
		{"deleting", "error processing PVC ns/deleting: PVC is being deleted"},
		{"absent", `error processing PVC ns/absent: failed to fetch PVC from API server: persistentvolumeclaims "absent" not found`},
		{"nopv", `error processing PVC ns/nopv: failed to fetch PV pv-missing from API server: persistentvolumes "pv-missing" not found`},
		{"unbound-pv", "error processing PVC ns/unbound-pv: found PV object pv-free but it has a nil pv.Spec.ClaimRef indicating it is not yet bound to the claim"},
		{"other", "error processing PVC ns/other: found PV object pv-other but its pv.Spec.ClaimRef.UID someone-else does not point to claim.UID uid-other"},
		{"block", "volume data has volumeMode Block, but is specified in volumeMounts"},
		{"rox", "error processing PVC ns/rox: PV pv-rwo offers access modes [ReadWriteOnce], not the claim's [ReadWriteMany]"},
	} {
		t.Run(tc.claim, func(t *testing.T) {
			pod := testPod("p-"+tc.claim, vol("data", corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: tc.claim}}))
			pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
			_, err := m.Setup(context.Background(), pod)
			want := "Unable to attach or mount volumes: unmounted volumes=[data], unattached volumes=[], failed to process volumes=[data]: " + tc.want
			if err == nil || err.Error() != want {
				t.Fatalf("err = %v\nwant  %s", err, want)
			}
		})
	}

	// A generic ephemeral volume's claim must be the pod's.
	eph := testPod("eph", vol("scratch", corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{}}))
	eph.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "scratch", MountPath: "/s"}}
	if _, err := m.Setup(context.Background(), eph); err == nil || !strings.HasSuffix(err.Error(), "PVC ns/eph-scratch was not created for pod ns/eph (pod is not owner)") {
		t.Fatalf("foreign ephemeral claim: %v", err)
	}
	// A bound claim of a hostPath PV is the PV's path; an unused claim is
	// not even looked up.
	good := testPod("good", vol("data", corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "good"}}),
		vol("unused", corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "absent"}}))
	good.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
	paths, err := m.Setup(context.Background(), good)
	if err != nil || paths["data"] != os.TempDir() {
		t.Fatalf("paths %v err %v", paths, err)
	}
	if _, ok := paths["unused"]; ok {
		t.Fatal("an unused claim was set up")
	}
}

// fsGroupChangePolicy OnRootMismatch skips a volume whose root already has
// the group, group rw(x) and setgid (the kubelet's
// requiresPermissionChange); Always walks it.
func TestFSGroupChangePolicy(t *testing.T) {
	testenv.RequiresRoot(t)
	dir := t.TempDir()
	file := dir + "/f"
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	group := int64(4321)
	onMismatch := corev1.FSGroupChangeOnRootMismatch
	pod := &corev1.Pod{Spec: corev1.PodSpec{SecurityContext: &corev1.PodSecurityContext{FSGroup: &group, FSGroupChangePolicy: &onMismatch}}}
	if !requiresPermissionChange(dir, group, false) {
		t.Fatal("a fresh directory needs no change")
	}
	if err := applyFSGroup(dir, pod, false); err != nil {
		t.Fatal(err)
	}
	if requiresPermissionChange(dir, group, false) {
		t.Fatal("still needs a change after applyFSGroup")
	}
	// A file changed behind the root's back stays as it is with
	// OnRootMismatch, and is fixed with Always.
	if err := os.Chown(file, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := applyFSGroup(dir, pod, false); err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(file)
	if gid, _ := fileGID(fi); gid != 0 {
		t.Fatalf("OnRootMismatch walked the volume: gid %d", gid)
	}
	always := corev1.FSGroupChangeAlways
	pod.Spec.SecurityContext.FSGroupChangePolicy = &always
	if err := applyFSGroup(dir, pod, false); err != nil {
		t.Fatal(err)
	}
	fi, _ = os.Stat(file)
	if gid, _ := fileGID(fi); gid != group || fi.Mode().Perm()&0o060 != 0o060 {
		t.Fatalf("Always: gid %d mode %v", gid, fi.Mode())
	}
}
