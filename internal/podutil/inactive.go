package podutil

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/schemas"
)

// Inactive says the pod no longer holds resources: the kubelet's
// filterOutInactivePods (isPodInactive), which both admission's fit and
// the device manager's UpdateAllocatedDevices (its activePods) apply. A
// pod the runtime reports terminated is done; one being killed still
// holds what it has; otherwise a pod is done when its
// phase is terminal or, by the runtime's report, its app containers all
// ended for good under its restart policy.
func Inactive(pod *corev1.Pod, obs *schemas.PodObserved) bool {
	if obs != nil && obs.Terminated {
		return true
	}
	if obs != nil && obs.Terminating {
		return false
	}
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return true
	}
	if obs == nil || len(obs.Containers) == 0 || len(obs.Containers) < len(pod.Spec.Containers) {
		return false
	}
	for _, ctr := range obs.Containers {
		t := ctr.State.Terminated
		switch {
		case t == nil:
			return false
		case pod.Spec.RestartPolicy == corev1.RestartPolicyNever:
		case pod.Spec.RestartPolicy == corev1.RestartPolicyOnFailure && t.ExitCode == 0:
		default:
			return false
		}
	}
	return true
}
