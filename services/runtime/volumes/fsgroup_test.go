package volumes

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodelet/nodelet/internal/testenv"
)

// emptyDir volumes of a pod with an fsGroup belong to that group with the
// setgid bit, on disk and on tmpfs, so that files a non-root container
// creates there get the group (the EmptyDir FSGroup conformance specs).
func TestEmptyDirFSGroup(t *testing.T) {
	testenv.RequiresRoot(t)
	state := t.TempDir()
	m := New(Options{StateDir: state, Log: quietLog(),
		NodeAllocatable: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}})
	group := int64(123)
	pod := testPod("fsg",
		vol("disk", corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}),
		vol("mem", corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}),
	)
	pod.Spec.SecurityContext = &corev1.PodSecurityContext{FSGroup: &group}
	ctx := context.Background()
	t.Cleanup(func() { _ = m.Teardown(ctx, string(pod.UID)) })
	// A subPath that does not exist yet is made with the volume's whole
	// mode, setgid and sticky bits included (kubelet makeMounts).
	defer func() {
		paths, err := m.Setup(ctx, pod)
		if err != nil {
			t.Fatal(err)
		}
		target, err := PrepareSubPath(quietLog(), SubPath{PodDir: PodDir(state, string(pod.UID)), VolumeName: "mem",
			VolumePath: paths["mem"], SubPath: "test-sub", ContainerName: "c", MountName: "mem"})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{filepath.Join(paths["mem"], "test-sub"), target} {
			fi, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			if want := os.ModeDir | os.ModeSetgid | os.ModeSticky | 0o777; fi.Mode() != want {
				t.Errorf("subPath %s mode %v, want %v", p, fi.Mode(), want)
			}
		}
	}()
	for range 2 { // Setup runs at every sync of the pod
		paths, err := m.Setup(ctx, pod)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"disk", "mem"} {
			fi, err := os.Stat(paths[name])
			if err != nil {
				t.Fatal(err)
			}
			st := fi.Sys().(*syscall.Stat_t)
			if st.Gid != uint32(group) || fi.Mode()&os.ModeSetgid == 0 || fi.Mode().Perm() != 0o777 {
				t.Errorf("%s: gid %d mode %v, want gid 123, setgid, 0777", name, st.Gid, fi.Mode())
			}
			// A tmpfs keeps its sticky bit, as on a kubelet node
			// (dgtrwxrwxrwx in the conformance spec).
			if sticky := fi.Mode()&os.ModeSticky != 0; sticky != (name == "mem") {
				t.Errorf("%s: mode %v, sticky %v", name, fi.Mode(), sticky)
			}
		}
	}
}
