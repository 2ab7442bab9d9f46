package runtime

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// containerDevices is the kubelet's makeBlockVolumes: each volumeDevice
// from its volume's device link, read-only ("r") when the pod's claim is;
// a relative device path or a volume not set up is an error in the
// kubelet's words.
func TestContainerDevices(t *testing.T) {
	pod := newPod("p")
	pod.Spec.Volumes = []corev1.Volume{claimVolume("rw", "a", false), claimVolume("ro", "b", true)}
	c := &corev1.Container{Name: "app", VolumeDevices: []corev1.VolumeDevice{{Name: "rw", DevicePath: "/dev/a"}, {Name: "ro", DevicePath: "/dev/b"}}}
	got, err := containerDevices(pod, c, map[string]string{"rw": "/host/rw", "ro": "/host/ro"})
	if err != nil {
		t.Fatal(err)
	}
	want := []*runtimeapi.Device{{ContainerPath: "/dev/a", HostPath: "/host/rw", Permissions: "mrw"}, {ContainerPath: "/dev/b", HostPath: "/host/ro", Permissions: "r"}}
	if len(got) != 2 || got[0].String() != want[0].String() || got[1].String() != want[1].String() {
		t.Fatalf("devices %v, want %v", got, want)
	}
	if _, err := containerDevices(pod, c, map[string]string{"rw": "/host/rw"}); err == nil || err.Error() != `cannot find volume "ro" to pass into container "app"` {
		t.Fatalf("missing volume: %v", err)
	}
	c.VolumeDevices = []corev1.VolumeDevice{{Name: "rw", DevicePath: "dev/a"}}
	if _, err := containerDevices(pod, c, map[string]string{"rw": "/host/rw"}); err == nil || err.Error() != "error DevicePath `dev/a` must be an absolute path" {
		t.Fatalf("relative path: %v", err)
	}
}
