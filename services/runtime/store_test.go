package runtime

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/schemas"
)

// TestStatusOnlyChangeWakesNoWorker: a desired pod whose API status alone
// changed is the kubelet's RECONCILE and syncs nothing, but for the status
// a sync reads (terminal phase, start time, extended-resource claims);
// any change the kubelet's podsDifferSemantically sees wakes the worker.
// Every status write of nodelet-status comes back this way, and woke the
// pod's worker: a crashed container in back-off recorded BackOff once per
// write (264 BackOff events in a 12-minute churn to the kubelet's 19).
func TestStatusOnlyChangeWakesNoWorker(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC))
	for _, tc := range []struct {
		name   string
		change func(p *corev1.Pod)
		wake   bool
	}{
		{"nothing", func(p *corev1.Pod) {}, false},
		{"resourceVersion", func(p *corev1.Pod) { p.ResourceVersion = "2" }, false},
		{"container statuses", func(p *corev1.Pod) {
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "app", RestartCount: 3,
				State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reasonCrashLoopBackOff}}}}
		}, false},
		{"conditions", func(p *corev1.Pod) {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}
		}, false},
		{"phase running", func(p *corev1.Pod) { p.Status.Phase = corev1.PodRunning }, false},
		{"a local annotation", func(p *corev1.Pod) { p.Annotations["kubernetes.io/config.seen"] = "later" }, false},
		{"phase failed", func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed }, true},
		{"phase succeeded", func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }, true},
		{"start time", func(p *corev1.Pod) { p.Status.StartTime = &now }, true},
		{"extended resource claim", func(p *corev1.Pod) {
			p.Status.ExtendedResourceClaimStatus = &corev1.PodExtendedResourceClaimStatus{ResourceClaimName: "c"}
		}, true},
		{"spec", func(p *corev1.Pod) { p.Spec.Containers[0].Image = "other" }, true},
		{"label", func(p *corev1.Pod) { p.Labels = map[string]string{"a": "b"} }, true},
		{"annotation", func(p *corev1.Pod) { p.Annotations["a"] = "b" }, true},
		{"deletion", func(p *corev1.Pod) { p.DeletionTimestamp = &now }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, woken := newLoadedStore()
			pod := newPod("p", busybox("app", ""))
			pod.Annotations = map[string]string{"kubernetes.io/config.seen": "first"}
			uid := string(pod.UID)
			ctx := context.Background()
			s.onVerdict(bus.Update[schemas.AdmissionVerdict]{Kind: bus.Put, Key: uid, Value: &schemas.AdmissionVerdict{Admitted: true}})
			s.onDesired(ctx, bus.Update[schemas.PodDesired]{Kind: bus.Put, Key: uid, Value: &schemas.PodDesired{Pod: pod}})
			if len(*woken) != 2 {
				t.Fatalf("the verdict and the first desired pod woke %d times, want 2", len(*woken))
			}
			next := pod.DeepCopy()
			tc.change(next)
			s.onDesired(ctx, bus.Update[schemas.PodDesired]{Kind: bus.Put, Key: uid, Value: &schemas.PodDesired{Pod: next}})
			if got := len(*woken) == 3; got != tc.wake {
				t.Errorf("woke: %v, want %v", got, tc.wake)
			}
			if r := s.get(uid); r.Pod != next {
				t.Error("the record does not hold the newest pod")
			}
		})
	}

	t.Run("back after a wipe", func(t *testing.T) {
		s, woken := newLoadedStore()
		pod := newPod("p", busybox("app", ""))
		uid := string(pod.UID)
		ctx := context.Background()
		s.onVerdict(bus.Update[schemas.AdmissionVerdict]{Kind: bus.Put, Key: uid, Value: &schemas.AdmissionVerdict{Admitted: true}})
		s.onDesired(ctx, bus.Update[schemas.PodDesired]{Kind: bus.Put, Key: uid, Value: &schemas.PodDesired{Pod: pod}})
		s.onDesired(ctx, bus.Update[schemas.PodDesired]{Kind: bus.Deleted, Key: uid})
		*woken = nil
		s.onDesired(ctx, bus.Update[schemas.PodDesired]{Kind: bus.Put, Key: uid, Value: &schemas.PodDesired{Pod: pod.DeepCopy()}})
		if len(*woken) != 1 {
			t.Errorf("the same pod desired again after it was gone woke %d times, want 1", len(*woken))
		}
	})
}
