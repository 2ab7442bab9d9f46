package config

import (
	"fmt"
	"net"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Validate checks the node section and returns its first problem as an
// *Error.
func (n *NodeConfig) Validate() error {
	return firstError(
		func() error {
			if errs := validation.IsDNS1123Subdomain(n.Name); len(errs) > 0 {
				return &Error{Key: "node.name", Problem: fmt.Sprintf("%q is not a valid node name: %s", n.Name, strings.Join(errs, "; "))}
			}
			return nil
		},
		func() error { return absPath("node.stateDir", n.StateDir, false) },
		func() error { return absPath("node.rootDir", n.RootDir, false) },
		func() error { return absPath("node.podLogsDir", n.PodLogsDir, false) },
		func() error { return positive("node.maxPods", n.MaxPods) },
		func() error { return cidr("node.podCIDR", n.PodCIDR, false) },
		func() error {
			for _, ip := range n.ClusterDNS {
				if net.ParseIP(ip) == nil {
					return &Error{Key: "node.clusterDNS", Problem: fmt.Sprintf("%q is not an IP address", ip)}
				}
			}
			return nil
		},
		func() error {
			if n.Address != "" && net.ParseIP(n.Address) == nil {
				return &Error{Key: "node.address", Problem: fmt.Sprintf("%q is not an IP address", n.Address)}
			}
			return nil
		},
		func() error { _, err := ParseReserved("node.kubeReserved", n.KubeReserved); return err },
		func() error { _, err := ParseReserved("node.systemReserved", n.SystemReserved); return err },
		func() error {
			for i, t := range n.Taints {
				key := fmt.Sprintf("node.taints[%d]", i)
				if errs := validation.IsQualifiedName(t.Key); len(errs) > 0 {
					return &Error{Key: key + ".key", Problem: fmt.Sprintf("%q: %s", t.Key, strings.Join(errs, "; "))}
				}
				switch corev1.TaintEffect(t.Effect) {
				case corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
				default:
					return &Error{Key: key + ".effect", Problem: fmt.Sprintf("%q must be NoSchedule, PreferNoSchedule or NoExecute", t.Effect)}
				}
			}
			return nil
		},
		func() error {
			for k, v := range n.Labels {
				if errs := validation.IsQualifiedName(k); len(errs) > 0 {
					return &Error{Key: "node.labels", Problem: fmt.Sprintf("label key %q: %s", k, strings.Join(errs, "; "))}
				}
				if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
					return &Error{Key: "node.labels", Problem: fmt.Sprintf("label %s value %q: %s", k, v, strings.Join(errs, "; "))}
				}
			}
			return nil
		},
	)
}

// Validate checks the bus section and returns its first problem as an
// *Error.
func (b *BusConfig) Validate() error {
	return firstError(
		func() error { return loopback("bus.listen", b.Listen, false) },
		func() error { return loopback("bus.monitorListen", b.MonitorListen, true) },
		func() error { return positiveDur("bus.heartbeatInterval", b.HeartbeatInterval) },
		func() error { return positiveDur("bus.eventsMaxAge", b.EventsMaxAge) },
		func() error {
			if b.DeletedKeyRetention < MinDeletedKeyRetention {
				return &Error{Key: "bus.deletedKeyRetention", Problem: fmt.Sprintf("%v is below the %v a bus watch may take to resume", b.DeletedKeyRetention, MinDeletedKeyRetention)}
			}
			return nil
		},
		func() error { return busSizes(*b) },
	)
}
