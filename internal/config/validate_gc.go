package config

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
)

// Validate checks the gc section and returns its first problem as an
// *Error.
func (g *GCConfig) Validate() error {
	return firstError(
		func() error { return positiveDur("gc.containerGCPeriod", g.ContainerGCPeriod) },
		func() error { return nonNegative("gc.maxPerPodContainer", g.MaxPerPodContainer) },
		func() error {
			if g.MaxContainers < -1 {
				return &Error{Key: "gc.maxContainers", Problem: fmt.Sprintf("%d must be -1 (no cap) or more", g.MaxContainers)}
			}
			return nil
		},
		func() error { return nonNegativeDur("gc.minAge", g.MinAge) },
		func() error { return positiveDur("gc.imageGCPeriod", g.ImageGCPeriod) },
		func() error { return percent("gc.imageGCHighThresholdPercent", g.ImageGCHighThresholdPercent) },
		func() error { return percent("gc.imageGCLowThresholdPercent", g.ImageGCLowThresholdPercent) },
		func() error {
			if g.ImageGCLowThresholdPercent > g.ImageGCHighThresholdPercent {
				return &Error{Key: "gc.imageGCLowThresholdPercent", Problem: fmt.Sprintf("%d must not exceed gc.imageGCHighThresholdPercent (%d)", g.ImageGCLowThresholdPercent, g.ImageGCHighThresholdPercent)}
			}
			return nil
		},
		func() error { return nonNegativeDur("gc.imageMinimumGCAge", g.ImageMinimumGCAge) },
		func() error { return nonNegativeDur("gc.imageMaximumGCAge", g.ImageMaximumGCAge) },
		func() error {
			q, err := resource.ParseQuantity(g.ContainerLogMaxSize)
			if err != nil || q.Sign() <= 0 {
				return &Error{Key: "gc.containerLogMaxSize", Problem: fmt.Sprintf("%q is not a positive quantity (e.g. 10Mi)", g.ContainerLogMaxSize)}
			}
			return nil
		},
		func() error {
			if g.ContainerLogMaxFiles < 2 {
				return &Error{Key: "gc.containerLogMaxFiles", Problem: fmt.Sprintf("%d must be at least 2", g.ContainerLogMaxFiles)}
			}
			return nil
		},
		func() error { return positiveDur("gc.containerLogMonitorInterval", g.ContainerLogMonitorInterval) },
		func() error { return thresholds("gc.evictionHard", g.EvictionHard) },
		func() error { return thresholds("gc.evictionSoft", g.EvictionSoft) },
		func() error {
			for sig, d := range g.EvictionSoftGracePeriod {
				if _, ok := g.EvictionSoft[sig]; !ok {
					return &Error{Key: "gc.evictionSoftGracePeriod", Problem: fmt.Sprintf("%s has no gc.evictionSoft threshold", sig)}
				}
				if dd, err := time.ParseDuration(d); err != nil || dd < 0 {
					return &Error{Key: "gc.evictionSoftGracePeriod", Problem: fmt.Sprintf("%s: invalid duration %q", sig, d)}
				}
			}
			for sig := range g.EvictionSoft {
				if _, ok := g.EvictionSoftGracePeriod[sig]; !ok {
					return &Error{Key: "gc.evictionSoftGracePeriod", Problem: fmt.Sprintf("soft threshold %s needs a grace period", sig)}
				}
			}
			return nil
		},
		func() error {
			return nonNegativeDur("gc.evictionPressureTransitionPeriod", g.EvictionPressureTransitionPeriod)
		},
		func() error { return positiveDur("gc.evictionMonitoringPeriod", g.EvictionMonitoringPeriod) },
		func() error { return nonNegativeDur("gc.shutdownGracePeriod", g.ShutdownGracePeriod) },
		func() error {
			return nonNegativeDur("gc.shutdownGracePeriodCriticalPods", g.ShutdownGracePeriodCriticalPods)
		},
		func() error {
			// The kubelet's ValidateKubeletConfiguration.
			if g.ShutdownGracePeriodCriticalPods > g.ShutdownGracePeriod {
				return &Error{Key: "gc.shutdownGracePeriodCriticalPods", Problem: fmt.Sprintf("%v must not exceed gc.shutdownGracePeriod (%v)",
					g.ShutdownGracePeriodCriticalPods, g.ShutdownGracePeriod)}
			}
			if g.ShutdownGracePeriod%time.Second != 0 || g.ShutdownGracePeriodCriticalPods%time.Second != 0 {
				return &Error{Key: "gc.shutdownGracePeriod", Problem: "shutdownGracePeriod and shutdownGracePeriodCriticalPods must be whole seconds"}
			}
			return nil
		},
	)
}

// Validate checks the supervisor section and returns its first problem as an
// *Error.
func (s *SupervisorConfig) Validate() error {
	return firstError(
		func() error { return absPath("supervisor.binDir", s.BinDir, true) },
		func() error { return positiveDur("supervisor.restartBackoff", s.RestartBackoff) },
		func() error { return positiveDur("supervisor.restartBackoffMax", s.RestartBackoffMax) },
		func() error { return positiveDur("supervisor.restartBackoffReset", s.RestartBackoffReset) },
		func() error { return positiveDur("supervisor.readyTimeout", s.ReadyTimeout) },
	)
}
