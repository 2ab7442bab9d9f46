package runtime

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/images"
	"github.com/nodelet/nodelet/internal/testenv"
	"github.com/nodelet/nodelet/schemas"
)

// runtimeState waits for the runtime's state on the bus as cond wants it.
func (h *harness) awaitRuntimeState(what string, cond func(*schemas.RuntimeState) bool) *schemas.RuntimeState {
	h.t.Helper()
	var rs *schemas.RuntimeState
	waitFor(h.t, 30*time.Second, what, func() (bool, string) {
		var err error
		rs, _, err = bus.Get[schemas.RuntimeState](h.ctx, h.status, bus.BucketRuntime, bus.KeyRuntimeState)
		return err == nil && rs != nil && cond(rs), fmt.Sprintf("%+v %v", rs, err)
	})
	return rs
}

// TestImageVolume (issue 32): on containerd 2.x an image volume is the
// image's filesystem, read-only, in the container (CRI Mount.image, the
// kubelet's getImageVolumes and makeMounts), a subPath of it too, and the
// runtime reports that it has image volumes; containerd 1.6 reports it
// has none (admission then refuses such pods: TestImageVolumeByRuntime).
func TestImageVolume(t *testing.T) {
	t.Run("the shared containerd (2.x unless NODELET_TEST_CONTAINERD=1)", func(t *testing.T) {
		h := newHarness(t, harnessOptions{})
		rs := h.awaitRuntimeState("runtime state with its version", func(rs *schemas.RuntimeState) bool { return rs.RuntimeVersion != "" })
		if major := majorVersion(rs.RuntimeVersion); rs.ImageVolumes != (major >= 2) {
			t.Errorf("%s %s reports imageVolumes %v", rs.RuntimeName, rs.RuntimeVersion, rs.ImageVolumes)
		}
	})
	t.Run("containerd 2.x mounts the image", func(t *testing.T) {
		h := newHarness(t, harnessOptions{containerd: testenv.NewContainerd(t, testenv.ContainerdOptions{Major: 2})})
		h.awaitRuntimeState("containerd 2.x reporting image volumes", func(rs *schemas.RuntimeState) bool { return rs.ImageVolumes })
		c := busybox("c", "test -x /tools/bin/busybox && test -x /sub/busybox && ! touch /tools/written 2>/dev/null && echo mounted")
		c.VolumeMounts = []corev1.VolumeMount{{Name: "tools", MountPath: "/tools"}, {Name: "tools", MountPath: "/sub", SubPath: "bin"}}
		pod := newPod("imagevolume", c)
		pod.Spec.RestartPolicy = corev1.RestartPolicyNever
		pod.Spec.Volumes = []corev1.Volume{{Name: "tools", VolumeSource: corev1.VolumeSource{
			Image: &corev1.ImageVolumeSource{Reference: images.BusyboxImage, PullPolicy: corev1.PullIfNotPresent}}}}
		h.run(pod)
		o := h.waitObserved(pod, 2*time.Minute, "the container to exit", func(o *schemas.PodObserved) bool {
			cs := container(o, "c")
			return cs != nil && cs.State.Terminated != nil
		})
		if term := container(o, "c").State.Terminated; term.ExitCode != 0 {
			t.Fatalf("the container did not find the image (writable, or its subPath missing): %+v", term)
		}
	})
}

// The rule behind RuntimeState.ImageVolumes.
func TestSupportsImageVolumes(t *testing.T) {
	for _, tc := range []struct {
		name, version string
		want          bool
	}{
		{"containerd", "1.6.20~ds1", false},
		{"containerd", "v1.7.27", false},
		{"containerd", "v2.0.5", false},
		{"containerd", "v2.1.0", true},
		{"containerd", "v2.4.2", true},
		{"cri-o", "1.30.4", false},
		{"cri-o", "1.31.0", true},
		{"containerd", "", false},
		{"docker", "28.0.0", false},
	} {
		if got := supportsImageVolumes(tc.name, tc.version); got != tc.want {
			t.Errorf("%s %s: %v, want %v", tc.name, tc.version, got, tc.want)
		}
	}
}
