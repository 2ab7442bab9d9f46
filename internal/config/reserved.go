package config

import (
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// ResourcePID is the kubelet's pidlimit.PIDs: the process IDs a
// reservation may keep from pods.
const ResourcePID corev1.ResourceName = "pid"

// ParseReserved reads node.kubeReserved or node.systemReserved (key names
// which, for the error) as the kubelet's parseResourceList in
// cmd/kubelet/app/server.go does: only cpu, memory, ephemeral-storage and
// pid may be reserved, a quantity must parse and must not be negative, and
// cpu is rounded to the millicore. Every daemon that needs the reservation
// reads it here, so a bad quantity is the same error everywhere (the
// kubelet refuses to start on it).
func ParseReserved(key string, m map[string]string) (corev1.ResourceList, error) {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	out := corev1.ResourceList{}
	for _, k := range names {
		v := m[k]
		switch corev1.ResourceName(k) {
		case corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage, ResourcePID:
		default:
			return nil, &Error{Key: key, Problem: fmt.Sprintf("cannot reserve %q (only cpu, memory, ephemeral-storage and pid)", k)}
		}
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return nil, &Error{Key: key, Problem: fmt.Sprintf("%s: %q is not a quantity", k, v)}
		}
		if q.Sign() < 0 {
			return nil, &Error{Key: key, Problem: fmt.Sprintf("%s: %q is negative", k, v)}
		}
		if corev1.ResourceName(k) == corev1.ResourceCPU {
			q.SetMilli((q.ScaledValue(resource.Micro) + 500) / 1000)
		}
		out[corev1.ResourceName(k)] = q
	}
	return out, nil
}
