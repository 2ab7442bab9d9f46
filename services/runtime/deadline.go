package runtime

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/podutil"
	"github.com/nodelet/nodelet/schemas"
)

// startTimeRecheck: how soon a pod with a deadline looks for its start time
// again while nodelet-status has written none yet.
const startTimeRecheck = time.Second

// activeDeadline is the kubelet's activeDeadlineHandler (ShouldSync and
// ShouldEvict, pkg/kubelet/active_deadline.go): whether pod has been active
// longer than spec.activeDeadlineSeconds since its status.startTime, and
// else how long until it will be (0 when it has no deadline). The time is
// the injected clock's; the start time is the status manager's (the status
// bucket), else the API's (pod.Status), as the kubelet's podStatusProvider
// with its fallback. Once past, the pod stays past: the deadline can only
// be lowered.
func (m *Daemon) activeDeadline(ctx context.Context, pod *corev1.Pod, st *podState) (bool, time.Duration) {
	if pod.Spec.ActiveDeadlineSeconds == nil {
		return false, 0
	}
	exceeded, start := st.deadline()
	if exceeded {
		return true, 0
	}
	if start.IsZero() {
		if start = m.podStartTime(ctx, pod); start.IsZero() {
			return false, startTimeRecheck
		}
		st.setStartTime(start) // a pod's start time never changes
	}
	past, left := podutil.PastActiveDeadline(pod, start, m.clock.Now())
	if !past {
		return false, left
	}
	st.exceedDeadline()
	m.log.Info("Pod was active on the node longer than the specified deadline, killing it", "pod", podRef(pod), "podUID", pod.UID,
		"activeDeadlineSeconds", *pod.Spec.ActiveDeadlineSeconds, "startTime", start)
	m.event(pod, nil, "", corev1.EventTypeNormal, podutil.ReasonDeadlineExceeded, podutil.MessageDeadlineExceeded)
	return true, 0
}

// podStartTime is the pod's status.startTime: nodelet-status's, else the
// API server's; zero when neither has one yet.
func (m *Daemon) podStartTime(ctx context.Context, pod *corev1.Pod) time.Time {
	rec, _, err := bus.Get[schemas.PodStatusRecord](ctx, m.bus, bus.BucketStatus, string(pod.UID))
	if err != nil {
		m.log.Warn("Cannot read pod status for its start time", "pod", podRef(pod), "podUID", pod.UID, "err", err)
	}
	if rec != nil && rec.Status.StartTime != nil && !rec.Status.StartTime.IsZero() {
		return rec.Status.StartTime.Time
	}
	if pod.Status.StartTime != nil {
		return pod.Status.StartTime.Time
	}
	return time.Time{}
}

// syncWithDeadline runs a pod that should run under its active deadline:
// past it, the pod is killed and reports DeadlineExceeded; before it, the
// pod's worker is woken when it falls due.
func (s *podSync) syncWithDeadline(ctx context.Context) syncResult {
	past, left := s.m.activeDeadline(ctx, s.pod, s.st)
	if past {
		s.st.setPodReason(podutil.ReasonDeadlineExceeded, podutil.MessageDeadlineExceeded)
		return s.syncTerminating(ctx, nil)
	}
	res := s.syncRunning(ctx)
	if left > 0 && (res.RequeueAfter == 0 || left < res.RequeueAfter) {
		res.RequeueAfter = left
	}
	return res
}
