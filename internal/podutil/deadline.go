package podutil

import (
	"time"

	corev1 "k8s.io/api/core/v1"
)

// The kubelet's reason and message for a pod past its
// spec.activeDeadlineSeconds (pkg/kubelet/active_deadline.go): the pod's
// status reason and message, and its event.
const (
	ReasonDeadlineExceeded  = "DeadlineExceeded"
	MessageDeadlineExceeded = "Pod was active on the node longer than the specified deadline"
)

// PastActiveDeadline is the kubelet's activeDeadlineHandler.pastActiveDeadline:
// the pod has been active at least spec.activeDeadlineSeconds since
// startTime (its status.startTime). Without a deadline or a start time it
// is not; otherwise left is how long until it will be (0 once past).
func PastActiveDeadline(pod *corev1.Pod, startTime, now time.Time) (past bool, left time.Duration) {
	if pod.Spec.ActiveDeadlineSeconds == nil || startTime.IsZero() {
		return false, 0
	}
	allowed := time.Duration(*pod.Spec.ActiveDeadlineSeconds) * time.Second
	active := now.Sub(startTime)
	if active >= allowed {
		return true, 0
	}
	return false, allowed - active
}
