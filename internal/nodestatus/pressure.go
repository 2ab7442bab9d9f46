package nodestatus

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
)

// Pressure is the kubelet's wording for one pressure condition
// (nodestatus.MemoryPressureCondition, DiskPressureCondition,
// PIDPressureCondition): reason and message while True and while False,
// and the node event recorded when it turns either way.
type Pressure struct {
	Type                      corev1.NodeConditionType
	TrueReason, TrueMessage   string
	FalseReason, FalseMessage string
	TrueEvent, FalseEvent     string
}

// PressureConditions are the three pressure conditions in the order the
// kubelet's setters run them.
var PressureConditions = []Pressure{
	{corev1.NodeMemoryPressure,
		"KubeletHasInsufficientMemory", "kubelet has insufficient memory available",
		"KubeletHasSufficientMemory", "kubelet has sufficient memory available",
		"NodeHasInsufficientMemory", "NodeHasSufficientMemory"},
	{corev1.NodeDiskPressure,
		"KubeletHasDiskPressure", "kubelet has disk pressure",
		"KubeletHasNoDiskPressure", "kubelet has no disk pressure",
		"NodeHasDiskPressure", "NodeHasNoDiskPressure"},
	{corev1.NodePIDPressure,
		"KubeletHasInsufficientPID", "kubelet has insufficient PID available",
		"KubeletHasSufficientPID", "kubelet has sufficient PID available",
		"NodeHasInsufficientPID", "NodeHasSufficientPID"},
}

// Condition is p in status (True or False) with the kubelet's reason and
// message; times are left to the caller.
func (p Pressure) Condition(status bool) corev1.NodeCondition {
	if status {
		return corev1.NodeCondition{Type: p.Type, Status: corev1.ConditionTrue, Reason: p.TrueReason, Message: p.TrueMessage}
	}
	return corev1.NodeCondition{Type: p.Type, Status: corev1.ConditionFalse, Reason: p.FalseReason, Message: p.FalseMessage}
}

// Event is the reason of the node event the kubelet records when p turns
// to status.
func (p Pressure) Event(status corev1.ConditionStatus) string {
	if status == corev1.ConditionTrue {
		return p.TrueEvent
	}
	return p.FalseEvent
}

// StatusMessage is the message of the kubelet's node events for a
// condition change (recordNodeStatusEvent): "Node <name> status is now:
// <event>".
func StatusMessage(node, event string) string {
	return fmt.Sprintf("Node %s status is now: %s", node, event)
}
