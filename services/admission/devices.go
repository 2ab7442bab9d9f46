package admission

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/schemas"
)

// DevicesHandler is the container manager's allocate-resources admit
// handler for device plugins (GetAllocateResourcesPodAdmitHandler →
// devicemanager.Allocate), which the kubelet runs before its predicate
// handler. nodelet-devices allocates; this refuses a pod whose allocation
// failed, in the kubelet's words (admission.Error's message).
type DevicesHandler struct{}

// Admit implements Handler.
func (DevicesHandler) Admit(attrs *Attributes) Result {
	if d := attrs.Devices; d != nil && d.Error != "" {
		return Result{Reason: ReasonUnexpectedAdmissionError,
			Message: fmt.Sprintf("Allocate failed due to %s, which is unexpected", d.Error)}
	}
	return Result{Admit: true}
}

// deviceAllocatable is each device plugin resource's allocatable as
// nodelet-status reports it: the healthy devices, 0 once the plugin went
// (the kubelet's GetCapacity).
func deviceAllocatable(r *schemas.DeviceResources) map[corev1.ResourceName]int64 {
	out := map[corev1.ResourceName]int64{}
	if r == nil {
		return out
	}
	for _, x := range r.Resources {
		n := int64(len(x.Healthy))
		if x.Removed {
			n = 0
		}
		out[corev1.ResourceName(x.Name)] = n
	}
	return out
}

// deviceAllocated counts the devices held by every successful allocation,
// per resource: the kubelet's allocatedDevices, which
// sanitizeNodeAllocatable raises the node's allocatable to for a pod with
// devices, so that an allocation made is never refused by the predicates.
func deviceAllocated(recs map[string]*schemas.PodDevices) map[corev1.ResourceName]int64 {
	out := map[corev1.ResourceName]int64{}
	for _, p := range recs {
		if p.Error != "" {
			continue
		}
		for _, c := range p.Containers {
			for _, r := range c.Resources {
				out[corev1.ResourceName(r.Resource)] += int64(len(r.DeviceIDs))
			}
		}
	}
	return out
}

// waitsForDevices tells whether pod must have its allocation before it is
// decided: one of its containers asks for a resource nodelet-devices
// serves (nodelet-devices records every pod that asks for an extended
// resource).
func waitsForDevices(pod *corev1.Pod, r *schemas.DeviceResources) bool {
	if r == nil || len(r.Resources) == 0 {
		return false
	}
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range cs {
			for name, q := range c.Resources.Limits {
				if q.IsZero() {
					continue
				}
				for _, x := range r.Resources {
					if x.Name == string(name) {
						return true
					}
				}
			}
		}
	}
	return false
}

var _ Handler = DevicesHandler{}
