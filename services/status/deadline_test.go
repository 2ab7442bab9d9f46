package status

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/internal/podutil"
	"github.com/nodelet/nodelet/schemas"
)

// A pod past spec.activeDeadlineSeconds since its status.startTime is
// Failed with the kubelet's DeadlineExceeded reason and message, once the
// runtime has stopped its containers; a deadline lowered on a running pod
// counts from the same start time.
func TestActiveDeadlineStatus(t *testing.T) {
	pod := testPod(corev1.RestartPolicyAlways, "app")
	start := metav1.NewTime(t0)
	runningObs := &schemas.PodObserved{Sandbox: readySandbox(), Containers: []schemas.ContainerObserved{running("app")}}
	killed := &schemas.PodObserved{Sandbox: &schemas.SandboxObserved{ID: "sb1", IPs: []string{"10.88.0.5"}},
		Containers: []schemas.ContainerObserved{exited("app", 137)}, Terminated: true,
		Reason: podutil.ReasonDeadlineExceeded, Message: podutil.MessageDeadlineExceeded}
	old := func(p corev1.PodPhase) *corev1.PodStatus {
		return &corev1.PodStatus{Phase: p, StartTime: &start}
	}
	withDeadline := func(secs int64) *corev1.Pod {
		p := pod.DeepCopy()
		p.Spec.ActiveDeadlineSeconds = ptr.To(secs)
		return p
	}
	for _, tc := range []struct {
		name       string
		pod        *corev1.Pod
		obs        *schemas.PodObserved
		now        time.Duration
		wantPhase  corev1.PodPhase
		wantReason string
	}{
		{"no deadline", pod, runningObs, time.Hour, corev1.PodRunning, ""},
		{"before the deadline", withDeadline(30), runningObs, 29 * time.Second, corev1.PodRunning, ""},
		{"past it, containers still running: the phase waits", withDeadline(30), runningObs, 31 * time.Second, corev1.PodRunning, ""},
		{"past it, killed", withDeadline(30), killed, 31 * time.Second, corev1.PodFailed, podutil.ReasonDeadlineExceeded},
		{"lowered on a running pod, killed", withDeadline(5), killed, 10 * time.Minute, corev1.PodFailed, podutil.ReasonDeadlineExceeded},
		{"the runtime's verdict counts on its own", withDeadline(5), killed, time.Second, corev1.PodFailed, podutil.ReasonDeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := ComputePodStatus(PodInputs{Pod: tc.pod, Verdict: admitted(), Observed: tc.obs,
				Old: old(corev1.PodRunning), Now: t0.Add(tc.now)})
			expect(t, s.Phase, tc.wantPhase, "phase")
			expect(t, s.Reason, tc.wantReason, "reason")
			if tc.wantReason != "" {
				expect(t, s.Message, podutil.MessageDeadlineExceeded, "message")
				expect(t, condStatus(s, corev1.PodReady), corev1.ConditionFalse, "Ready")
			}
			if !s.StartTime.Equal(&start) {
				t.Fatalf("start time moved: %v", s.StartTime)
			}
		})
	}
}
