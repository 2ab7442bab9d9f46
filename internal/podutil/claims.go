package podutil

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
)

// ResourceClaims are the claims a pod's devices come from: those of
// spec.resourceClaims, then the claim the scheduler made for its extended
// resources backed by DRA (status.extendedResourceClaimStatus, the
// DRAExtendedResource feature), named by ResourceClaimName alone, as the
// kubelet's DRA manager PrepareResources lists them.
func ResourceClaims(pod *corev1.Pod) []corev1.PodResourceClaim {
	ext := pod.Status.ExtendedResourceClaimStatus
	if ext == nil {
		return pod.Spec.ResourceClaims
	}
	out := make([]corev1.PodResourceClaim, 0, len(pod.Spec.ResourceClaims)+1)
	out = append(out, pod.Spec.ResourceClaims...)
	name := ext.ResourceClaimName
	return append(out, corev1.PodResourceClaim{ResourceClaimName: &name})
}

// IsDRAExtendedResourceName is the scheduler util's: an extended resource
// name, or an implicit one of a DeviceClass
// (deviceclass.resource.kubernetes.io/<class>).
func IsDRAExtendedResourceName(name corev1.ResourceName) bool {
	return IsExtendedResourceName(name) || strings.HasPrefix(string(name), resourceapi.ResourceDeviceClassPrefix)
}

// IsDRAExtendedResource is the device manager's isDRAExtendedResource: the
// pod's container asks for resource through the scheduler's claim, not a
// device plugin.
func IsDRAExtendedResource(pod *corev1.Pod, container, resource string) bool {
	if ext := pod.Status.ExtendedResourceClaimStatus; ext != nil {
		for _, m := range ext.RequestMappings {
			if m.ContainerName == container && m.ResourceName == resource {
				return true
			}
		}
	}
	return false
}

// ExtendedResourceRequests are the requests of the scheduler's claim that
// serve container c (the DRA manager's GetResources): those mapped to c
// for an extended resource c asks for.
func ExtendedResourceRequests(pod *corev1.Pod, c *corev1.Container) (claim string, requests []string) {
	ext := pod.Status.ExtendedResourceClaimStatus
	if ext == nil {
		return "", nil
	}
	for _, m := range ext.RequestMappings {
		if m.ContainerName != c.Name {
			continue
		}
		q, ok := c.Resources.Requests[corev1.ResourceName(m.ResourceName)]
		if ok && !q.IsZero() && IsDRAExtendedResourceName(corev1.ResourceName(m.ResourceName)) {
			requests = append(requests, m.RequestName)
		}
	}
	return ext.ResourceClaimName, requests
}
