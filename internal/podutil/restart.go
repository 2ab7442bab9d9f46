package podutil

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// ContainerShouldRestart is the kubelet's podutil.ContainerShouldRestart
// (container restart rules are on by default since 1.35): a matching
// restart rule of the container, then the container's own restart policy,
// then the pod's.
func ContainerShouldRestart(c *corev1.Container, spec *corev1.PodSpec, exitCode int32) bool {
	if c.RestartPolicy != nil {
		for _, rule := range c.RestartPolicyRules {
			if rule.ExitCodes == nil {
				continue
			}
			matched := slices.Contains(rule.ExitCodes.Values, exitCode)
			op := rule.ExitCodes.Operator
			if (op == corev1.ContainerRestartRuleOnExitCodesOpIn && matched) ||
				(op == corev1.ContainerRestartRuleOnExitCodesOpNotIn && !matched) {
				if rule.Action == corev1.ContainerRestartRuleActionRestart {
					return true
				}
				break
			}
		}
		switch *c.RestartPolicy {
		case corev1.ContainerRestartPolicyAlways:
			return true
		case corev1.ContainerRestartPolicyOnFailure:
			return exitCode != 0
		case corev1.ContainerRestartPolicyNever:
			return false
		}
	}
	switch spec.RestartPolicy {
	case corev1.RestartPolicyOnFailure:
		return exitCode != 0
	case corev1.RestartPolicyNever:
		return false
	default:
		return true
	}
}

// IsRestartableInit is the kubelet's podutil.IsRestartableInitContainer: an
// init container with restartPolicy Always, a sidecar (KEP-753). A nil
// container is none.
func IsRestartableInit(c *corev1.Container) bool {
	return c != nil && c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
}
