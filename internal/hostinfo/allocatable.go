package hostinfo

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodelet/nodelet/internal/config"
)

// Allocatable is capacity minus node.kubeReserved, node.systemReserved and
// the hard eviction thresholds on memory.available and nodefs.available
// (gc.evictionHard), and memory minus the huge pages: the kubelet's
// GetNodeAllocatableReservation and its node-status setter. A result below
// zero is zero.
func Allocatable(cfg *config.Config, capacity corev1.ResourceList) (corev1.ResourceList, error) {
	reserved := corev1.ResourceList{}
	for key, m := range map[string]map[string]string{
		"node.kubeReserved": cfg.Node.KubeReserved, "node.systemReserved": cfg.Node.SystemReserved,
	} {
		for name, v := range m {
			q, err := resource.ParseQuantity(v)
			if err != nil {
				return nil, fmt.Errorf("%s: %s: %q is not a quantity", key, name, v)
			}
			sum := reserved[corev1.ResourceName(name)]
			sum.Add(q)
			reserved[corev1.ResourceName(name)] = sum
		}
	}
	eviction, err := hardEvictionReservation(cfg.GC.EvictionHard, capacity)
	if err != nil {
		return nil, err
	}
	for name, q := range eviction {
		sum := reserved[name]
		sum.Add(q)
		reserved[name] = sum
	}
	out := corev1.ResourceList{}
	for name, c := range capacity {
		v := c.DeepCopy()
		if r, ok := reserved[name]; ok {
			v.Sub(r)
		}
		if v.Sign() < 0 {
			v.Set(0)
		}
		out[name] = v
	}
	if mem, ok := out[corev1.ResourceMemory]; ok {
		for name, c := range capacity {
			if strings.HasPrefix(string(name), corev1.ResourceHugePagesPrefix) {
				mem.Sub(c)
			}
		}
		if mem.Sign() < 0 {
			mem.Set(0)
		}
		out[corev1.ResourceMemory] = mem
	}
	return out, nil
}

// hardEvictionReservation is the part of memory and ephemeral storage the
// hard eviction thresholds keep free: the kubelet does not hand it to pods.
func hardEvictionReservation(thresholds map[string]string, capacity corev1.ResourceList) (corev1.ResourceList, error) {
	signals := map[string]corev1.ResourceName{
		"memory.available": corev1.ResourceMemory,
		"nodefs.available": corev1.ResourceEphemeralStorage,
	}
	keys := make([]string, 0, len(thresholds))
	for k := range thresholds {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := corev1.ResourceList{}
	for _, signal := range keys {
		name, ok := signals[signal]
		if !ok {
			continue
		}
		q, fraction, err := config.ParseThreshold(thresholds[signal])
		if err != nil {
			return nil, fmt.Errorf("gc.evictionHard: %s: %w", signal, err)
		}
		if q == nil {
			c := capacity[name]
			q = resource.NewQuantity(int64(float64(c.Value())*fraction), resource.BinarySI)
		}
		out[name] = *q
	}
	return out, nil
}
