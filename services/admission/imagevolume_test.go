package admission

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/podfields"
	"github.com/nodelet/nodelet/schemas"
)

func withImageVolume(p *corev1.Pod) {
	p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "tools",
		VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: "registry.k8s.io/e2e-test-images/busybox:1.37.0-1"}}})
	p.Spec.Containers[0].VolumeMounts = append(p.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: "tools", MountPath: "/tools"})
}

// Issue 32: an image volume is honoured on a runtime that mounts images
// and refused, naming the runtime, on one that does not (containerd 1.6
// would start the container without it).
func TestImageVolumeByRuntime(t *testing.T) {
	a := NewAdmitter(testNode(t), nil)
	pod := makePod("img", 0, withImageVolume)
	e, _ := podfields.Lookup("VolumeSource.image")
	if r := a.Admit(&Attributes{Pod: pod}); r.Admit || r.Reason != podfields.Reason ||
		r.Message != podfields.RefusalMessage("spec.volumes[0].image", e) {
		t.Errorf("runtime not known: %+v", r)
	}
	a.Fields.SetRuntime(&schemas.RuntimeState{RuntimeName: "containerd", RuntimeVersion: "1.6.20~ds1"})
	if r := a.Admit(&Attributes{Pod: pod}); r.Admit ||
		!strings.HasSuffix(r.Message, ": this node's container runtime, containerd 1.6.20~ds1, has no ImageVolumes") {
		t.Errorf("containerd 1.6: %+v", r)
	}
	a.Fields.SetRuntime(&schemas.RuntimeState{RuntimeName: "containerd", RuntimeVersion: "v2.4.2", ImageVolumes: true})
	if r := a.Admit(&Attributes{Pod: pod}); !r.Admit {
		t.Errorf("containerd 2.4 with image volumes: %+v", r)
	}
	// A field refused outright stays refused on such a runtime.
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "nfs", VolumeSource: corev1.VolumeSource{NFS: &corev1.NFSVolumeSource{Server: "nfs", Path: "/"}}})
	if r := a.Admit(&Attributes{Pod: pod}); r.Admit || !strings.Contains(r.Message, "spec.volumes[1].nfs") {
		t.Errorf("nfs beside an image volume: %+v", r)
	}
}

// A pod with an image volume waits for nodelet-runtime to say what its
// runtime has, rather than being refused for not knowing: the pods
// decided after it are decided, it is not, until the runtime's state is on
// the bus.
func TestImageVolumePodWaitsForRuntimeState(t *testing.T) {
	h := newHarness(t)
	h.pressure()
	h.start()
	pod := makePod("img", 0, withImageVolume)
	h.put(pod)
	h.barrier("after-img")
	if v, _ := h.verdict(pod); v != nil {
		t.Fatalf("decided before the runtime's state was known: %+v", v)
	}
	if _, err := h.runtime.Put(context.Background(), bus.BucketRuntime, bus.KeyRuntimeState,
		schemas.RuntimeState{RuntimeReady: true, RuntimeName: "containerd", RuntimeVersion: "v2.4.2", ImageVolumes: true}); err != nil {
		t.Fatal(err)
	}
	h.admitted(pod)

	// On a runtime without image mounts such a pod is refused, naming it
	// (a daemon that starts with the state on the bus: whichever of the
	// desired and runtime buckets it loads first, the pod is decided with
	// the runtime known).
	h2 := newHarness(t)
	h2.pressure()
	if _, err := h2.runtime.Put(context.Background(), bus.BucketRuntime, bus.KeyRuntimeState,
		schemas.RuntimeState{RuntimeReady: true, RuntimeName: "containerd", RuntimeVersion: "1.6.20~ds1"}); err != nil {
		t.Fatal(err)
	}
	refused := makePod("img-on-16", 1, withImageVolume)
	h2.put(refused)
	h2.start()
	e, _ := podfields.Lookup("VolumeSource.image")
	h2.rejected(refused, podfields.Reason, podfields.RefusalMessage("spec.volumes[0].image", e)+
		": this node's container runtime, containerd 1.6.20~ds1, has no ImageVolumes")
}
