package runtime

import (
	"fmt"

	"github.com/nodelet/nodelet/internal/podutil"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodelet/nodelet/schemas"
)

// resizeRestarts is the restart half of the kubelet's
// computePodResizeAction (kuberuntime_manager.go): a running container
// whose allocated CPU or memory (request or limit) differs from what it
// runs with, for a resource whose resizePolicy is RestartContainer, is
// killed ("Container x resize requires restart") and started again in
// the same pass with its allocation: no back-off, the restart count one
// more, whatever the pod's restartPolicy, as the kubelet adds it to
// ContainersToKill and ContainersToStart (InitContainersToStart for a
// sidecar). Resources whose policy is NotRequired (the default) are
// updated in place by syncResize, which skips the containers returned
// here. pod carries its allocated resources (admitResize).
func (p *podResources) resizeRestarts(pod *corev1.Pod, pr *podRuntime, a *podActions) map[string]bool {
	if a.CreateSandbox || a.Sandbox == nil || a.Terminal {
		return nil
	}
	r := p.podResizeOf(pod)
	p.resize.mu.Lock()
	defer p.resize.mu.Unlock()
	var out map[string]bool
	for i, c := range resizable(pod) {
		initContainer := i < len(pod.Spec.InitContainers)
		if initContainer && !podutil.IsRestartableInit(c) {
			continue // validation allows resizing only sidecars among init containers
		}
		info := pr.newest(c.Name)
		if info == nil || !info.running() || info.SandboxID != a.Sandbox.ID || killing(a, info) {
			continue
		}
		ap, ok := r.applied[c.Name]
		if !ok || ap.id != info.ID || !resizeNeedsRestart(c, ap.res, c.Resources) {
			continue
		}
		kind := schemas.ContainerKindApp
		if initContainer {
			kind = schemas.ContainerKindSidecar
		}
		a.Kill = append(a.Kill, containerToKill{C: info, Message: fmt.Sprintf("Container %s resize requires restart", c.Name), ForResize: true})
		a.Start = append(a.Start, containerToStart{Spec: c, Kind: kind})
		if out == nil {
			out = map[string]bool{}
		}
		out[c.Name] = true
	}
	return out
}

// killing: a already kills c.
func killing(a *podActions, c *containerInfo) bool {
	for _, k := range a.Kill {
		if k.C.ID == c.ID {
			return true
		}
	}
	return false
}

// resizeNeedsRestart is computePodResizeAction's determineContainerResize
// over cpu and memory: a changed request or limit of a resource whose
// resizePolicy says RestartContainer (no policy: NotRequired).
func resizeNeedsRestart(c *corev1.Container, cur, want corev1.ResourceRequirements) bool {
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if equalQuantity(cur.Requests[name], want.Requests[name]) && equalQuantity(cur.Limits[name], want.Limits[name]) {
			continue
		}
		for _, p := range c.ResizePolicy {
			if p.ResourceName == name && p.RestartPolicy == corev1.RestartContainer {
				return true
			}
		}
	}
	return false
}

func equalQuantity(a, b resource.Quantity) bool { return a.Cmp(b) == 0 }
