package runtime

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Recursive read-only mounts (volumeMounts[].recursiveReadOnly), as the
// kubelet's makeMounts and resolveRecursiveReadOnly (RecursiveReadOnlyMounts
// is GA and locked on): a read-only mount asking for Enabled gets CRI's
// Mount.recursive_read_only when the pod's runtime handler declares the
// feature in CRI Status (RuntimeHandlerFeatures.recursive_read_only_mounts),
// and the container fails with CreateContainerConfigError "failed to
// resolve recursive read-only mode: volume "x" requested recursive
// read-only mode, but it is not supported by the runtime" where it does
// not (containerd before 2.0, which lists no handlers at all, as this
// machine's 1.6); IfPossible gets it only where supported. A handler's
// support reaches nodelet-status in PodObserved.recursiveReadOnlyMounts,
// so that status.containerStatuses[].volumeMounts says what was applied.

// resolveRecursiveReadOnly is the kubelet's resolveRecursiveReadOnly.
func resolveRecursiveReadOnly(vm corev1.VolumeMount, supported bool) (bool, error) {
	if vm.RecursiveReadOnly == nil || *vm.RecursiveReadOnly == corev1.RecursiveReadOnlyDisabled {
		return false, nil
	}
	if !vm.ReadOnly {
		return false, fmt.Errorf("volume %q requested recursive read-only mode, but it is not read-only", vm.Name)
	}
	if vm.MountPropagation != nil && *vm.MountPropagation != corev1.MountPropagationNone {
		return false, fmt.Errorf("volume %q requested recursive read-only mode, but it is not compatible with propagation %q",
			vm.Name, *vm.MountPropagation)
	}
	switch mode := *vm.RecursiveReadOnly; mode {
	case corev1.RecursiveReadOnlyIfPossible:
		return supported, nil
	case corev1.RecursiveReadOnlyEnabled:
		if !supported {
			return false, fmt.Errorf("volume %q requested recursive read-only mode, but it is not supported by the runtime", vm.Name)
		}
		return true, nil
	default:
		return false, fmt.Errorf("unknown recursive read-only mode %q", mode)
	}
}

// asksRecursiveReadOnly: a container of pod asks for a recursive
// read-only mount (the runtime's support is read only then).
func asksRecursiveReadOnly(pod *corev1.Pod) bool {
	asks := false
	forEachContainer(pod, func(c *corev1.Container) {
		for _, vm := range c.VolumeMounts {
			if vm.RecursiveReadOnly != nil && *vm.RecursiveReadOnly != corev1.RecursiveReadOnlyDisabled {
				asks = true
			}
		}
	})
	return asks
}

// forEachContainer visits init, app and ephemeral containers.
func forEachContainer(pod *corev1.Pod, visit func(*corev1.Container)) {
	for i := range pod.Spec.InitContainers {
		visit(&pod.Spec.InitContainers[i])
	}
	for i := range pod.Spec.Containers {
		visit(&pod.Spec.Containers[i])
	}
	for i := range pod.Spec.EphemeralContainers {
		visit((*corev1.Container)(&pod.Spec.EphemeralContainers[i].EphemeralContainerCommon))
	}
}

// supportsRecursiveReadOnly is the kubelet's
// runtimeClassSupportsRecursiveReadOnlyMounts: the pod's runtime handler
// (its RuntimeClass's) among the handlers CRI Status lists, with the
// feature; a runtime that lists none, an unknown handler or a failed
// lookup is no support.
func (m *Daemon) supportsRecursiveReadOnly(ctx context.Context, pod *corev1.Pod) bool {
	handler, err := m.runtimeHandler(pod)
	if err != nil {
		m.log.Error("Failed to look up the runtime handler", "pod", podRef(pod), "podUID", pod.UID, "err", err)
		return false
	}
	handlers, err := m.handlers.list(ctx, m)
	if err != nil {
		m.log.Error("Cannot read the runtime handlers", "err", err)
		return false
	}
	for _, h := range handlers {
		if h.GetName() == handler {
			return h.GetFeatures().GetRecursiveReadOnlyMounts()
		}
	}
	if len(handlers) > 0 {
		m.log.Error("Unknown runtime handler", "pod", podRef(pod), "runtimeHandlerName", handler)
	}
	return false
}

// handlersTTL is how long CRI Status's handler list is kept.
const handlersTTL = 10 * time.Second

// runtimeHandlers caches the runtime handlers CRI Status lists (the
// kubelet's runtimeState.runtimeHandlers, which its status loop refreshes).
type runtimeHandlers struct {
	mu   sync.Mutex
	at   time.Time
	have []*runtimeapi.RuntimeHandler
}

func (r *runtimeHandlers) list(ctx context.Context, m *Daemon) ([]*runtimeapi.RuntimeHandler, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := m.clock.Now()
	if !r.at.IsZero() && now.Sub(r.at) < handlersTTL {
		return r.have, nil
	}
	ctx, cancel := context.WithTimeout(ctx, m.cfg.Runtime.RuntimeRequestTimeout)
	defer cancel()
	resp, err := m.rs.Status(ctx, false)
	if err != nil {
		return nil, err
	}
	r.at, r.have = now, resp.GetRuntimeHandlers()
	return r.have, nil
}
