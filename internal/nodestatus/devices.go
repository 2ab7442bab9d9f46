package nodestatus

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodelet/nodelet/schemas"
)

// DevicePluginResources is the device plugin resources' capacity and
// allocatable, from nodelet-devices' report: the kubelet's
// devicemanager GetCapacity as its MachineInfo setter applies it. Capacity
// counts every device, healthy or not; allocatable the healthy ones, so 0
// once the plugin is gone; a resource whose plugin went more than the
// grace period ago reports 0 for both (kept, not dropped: it tells the
// scheduler the node manages it, unlike a cluster-level resource).
func DevicePluginResources(r *schemas.DeviceResources) (capacity, allocatable corev1.ResourceList) {
	capacity, allocatable = corev1.ResourceList{}, corev1.ResourceList{}
	if r == nil {
		return capacity, allocatable
	}
	for _, x := range r.Resources {
		c, a := int64(len(x.Healthy)+len(x.Unhealthy)), int64(len(x.Healthy))
		if x.Removed {
			c, a = 0, 0
		}
		capacity[corev1.ResourceName(x.Name)] = *resource.NewQuantity(c, resource.DecimalSI)
		allocatable[corev1.ResourceName(x.Name)] = *resource.NewQuantity(a, resource.DecimalSI)
	}
	return capacity, allocatable
}
