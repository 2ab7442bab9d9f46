package runtime

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/bus/bustest"
	"github.com/nodelet/nodelet/schemas"
)

// The active deadline runs on the injected clock: a pod's worker is woken
// when its deadline falls due, and then finds it past — no sleeping. The
// start time is nodelet-status's (the status bucket), else the API's.
func TestActiveDeadlineOnFakeClock(t *testing.T) {
	b := bustest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	clk := testingclock.NewFakeClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	m := &Daemon{bus: b.Connect(bus.Runtime), clock: clk, log: bustest.Logger(), pods: newPodStates()}

	pod := newPod("deadline", busybox("app", ""))
	start := metav1.NewTime(clk.Now().Add(-10 * time.Second))
	st := m.pods.get(string(pod.UID))

	// No deadline: nothing to wait for.
	if past, left := m.activeDeadline(ctx, pod, st); past || left != 0 {
		t.Fatalf("without a deadline: %v %v", past, left)
	}
	pod.Spec.ActiveDeadlineSeconds = ptr.To(int64(30))
	// No start time anywhere yet: look again soon.
	if past, left := m.activeDeadline(ctx, pod, st); past || left != startTimeRecheck {
		t.Fatalf("without a start time: %v %v", past, left)
	}
	// The API's start time is the fallback...
	api := pod.DeepCopy()
	api.Status.StartTime = ptr.To(metav1.NewTime(clk.Now().Add(-time.Hour)))
	if past, _ := m.activeDeadline(ctx, api, m.pods.get("other")); !past {
		t.Fatal("API start time an hour ago, deadline 30s: not past")
	}
	// ...but the status bucket's wins.
	if _, err := b.Connect(bus.Status).Put(ctx, bus.BucketStatus, string(pod.UID), &schemas.PodStatusRecord{
		UID: string(pod.UID), Status: corev1.PodStatus{StartTime: &start}}); err != nil {
		t.Fatal(err)
	}
	pod.Status.StartTime = api.Status.StartTime
	if past, left := m.activeDeadline(ctx, pod, st); past || left != 20*time.Second {
		t.Fatalf("started 10s ago, deadline 30s: %v %v", past, left)
	}

	// The worker requeues itself for the deadline on the fake clock.
	woke := make(chan bool, 10)
	workers := newPodWorkers(ctx, clk, func(ctx context.Context, uid string) syncResult {
		past, left := m.activeDeadline(ctx, pod, st)
		woke <- past
		return syncResult{RequeueAfter: left}
	})
	workers.Update(string(pod.UID))
	if past := <-woke; past {
		t.Fatal("past at once")
	}
	for !clk.HasWaiters() {
		time.Sleep(time.Millisecond) // the worker sets its timer after the sync returns
	}
	clk.Step(20 * time.Second)
	if past := <-woke; !past {
		t.Fatal("not past once the deadline fell due")
	}
	// The deadline lowered below the time already active: past at once,
	// and it stays past.
	st2 := m.pods.get("lowered")
	lowered := pod.DeepCopy()
	lowered.Spec.ActiveDeadlineSeconds = ptr.To(int64(1))
	st2.setStartTime(clk.Now().Add(-5 * time.Second))
	if past, _ := m.activeDeadline(ctx, lowered, st2); !past {
		t.Fatal("lowered deadline not past")
	}
	lowered.Spec.ActiveDeadlineSeconds = ptr.To(int64(3600))
	if past, _ := m.activeDeadline(ctx, lowered, st2); !past {
		t.Fatal("a pod killed for its deadline came back")
	}
	cancel()
	workers.Wait()
}
