package runtime

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critest "k8s.io/cri-api/pkg/apis/testing"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/bus/bustest"
)

// Issue 32: recursiveReadOnly reaches CRI's Mount.recursive_read_only where
// the pod's runtime handler declares the feature, and is refused as the
// kubelet's makeMounts refuses it where not.
func TestRecursiveReadOnlyMounts(t *testing.T) {
	m := testManager(t)
	m.log = bustest.Logger()
	m.clock = testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	fake := &handlersRuntime{FakeRuntimeService: critest.NewFakeRuntimeService()}
	m.rs = fake
	rro := func(mode corev1.RecursiveReadOnlyMode, readOnly bool) *corev1.Pod {
		c := busybox("a", "")
		c.VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data", ReadOnly: readOnly, RecursiveReadOnly: &mode}}
		return newPod("p", c)
	}
	mounts := func(pod *corev1.Pod) (*runtimeapi.Mount, error) {
		out, err := m.containerMounts(context.Background(), pod, &pod.Spec.Containers[0], map[string]string{"data": "/h/data"}, nil, nil, "", "")
		if err != nil {
			return nil, err
		}
		return out[0], nil
	}

	// containerd 1.6 lists no runtime handlers: no support.
	if _, err := mounts(rro(corev1.RecursiveReadOnlyEnabled, true)); err == nil || err.Error() !=
		`failed to resolve recursive read-only mode: volume "data" requested recursive read-only mode, but it is not supported by the runtime` {
		t.Fatalf("Enabled without support: %v", err)
	}
	if mt, err := mounts(rro(corev1.RecursiveReadOnlyIfPossible, true)); err != nil || mt.RecursiveReadOnly || !mt.Readonly {
		t.Fatalf("IfPossible without support: %v %v", mt, err)
	}
	if _, err := mounts(rro(corev1.RecursiveReadOnlyEnabled, false)); err == nil || !strings.Contains(err.Error(), "but it is not read-only") {
		t.Fatalf("Enabled on a writable mount: %v", err)
	}

	// A runtime whose default handler ("") declares the feature.
	m.handlers = runtimeHandlers{}
	fake.handlers = []*runtimeapi.RuntimeHandler{{Name: "", Features: &runtimeapi.RuntimeHandlerFeatures{RecursiveReadOnlyMounts: true}}}
	for _, mode := range []corev1.RecursiveReadOnlyMode{corev1.RecursiveReadOnlyEnabled, corev1.RecursiveReadOnlyIfPossible} {
		if mt, err := mounts(rro(mode, true)); err != nil || !mt.RecursiveReadOnly || !mt.Readonly {
			t.Fatalf("%s with support: %v %v", mode, mt, err)
		}
	}
	if mt, err := mounts(rro(corev1.RecursiveReadOnlyDisabled, true)); err != nil || mt.RecursiveReadOnly {
		t.Fatalf("Disabled with support: %v %v", mt, err)
	}
	// Not with propagation.
	pod := rro(corev1.RecursiveReadOnlyEnabled, true)
	pod.Spec.Containers[0].VolumeMounts[0].MountPropagation = ptr.To(corev1.MountPropagationHostToContainer)
	if _, err := mounts(pod); err == nil || !strings.Contains(err.Error(), "not compatible with propagation") {
		t.Fatalf("Enabled with propagation: %v", err)
	}
}

// handlersRuntime is CRI's fake runtime whose Status lists handlers.
type handlersRuntime struct {
	*critest.FakeRuntimeService
	handlers []*runtimeapi.RuntimeHandler
}

func (r *handlersRuntime) Status(ctx context.Context, verbose bool) (*runtimeapi.StatusResponse, error) {
	resp, err := r.FakeRuntimeService.Status(ctx, verbose)
	if err != nil {
		return nil, err
	}
	resp.RuntimeHandlers = r.handlers
	return resp, nil
}
