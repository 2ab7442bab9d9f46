package runtime

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	testingclock "k8s.io/utils/clock/testing"
)

// A container that crashes right after each start restarts at once the
// first time, then waits exactly 10, 20, 40, ... s before each restart,
// capped at 300 s, as the kubelet's doBackOff (e2e_node "Container restart
// backs off": restarts at 0, 0, 10, 30, 70, 150, 310 s); once it ran more
// than 10 minutes the sequence starts over.
func TestCrashLoopBackOffSequence(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	b := newBackOff(clk, initialBackOff, 300*time.Second)
	const key = "uid_app"

	// crash runs one container instance for ran, lets it exit, and returns
	// the wait the back-off imposes, checking that a sync in the middle of
	// the wait sees the rest of it and that the restart is allowed exactly
	// when the wait is over.
	n := 0
	crash := func(ran time.Duration) time.Duration {
		t.Helper()
		n++
		id := fmt.Sprintf("c%d", n)
		clk.Step(ran)
		finished := clk.Now()
		wait := b.ContainerFailed(key, id, finished)
		if wait == 0 {
			if again := b.ContainerFailed(key, id, finished); again != 0 {
				t.Fatalf("asking twice about %s after its restart: %v", id, again)
			}
			return 0
		}
		if again := b.ContainerFailed(key, id, finished); again != wait {
			t.Fatalf("asking twice about %s changed the wait: %v then %v", id, wait, again)
		}
		if _, of := b.Remaining(key); of != wait {
			t.Fatalf("Remaining says the back-off is %v, the wait is %v", of, wait)
		}
		clk.Step(wait / 2)
		if left := b.ContainerFailed(key, id, finished); left != wait-wait/2 {
			t.Fatalf("half way: left %v, want %v", left, wait-wait/2)
		}
		clk.Step(wait - wait/2 - time.Millisecond)
		if left := b.ContainerFailed(key, id, finished); left != time.Millisecond {
			t.Fatalf("1ms before the end: left %v", left)
		}
		clk.Step(time.Millisecond)
		if left := b.ContainerFailed(key, id, finished); left != 0 {
			t.Fatalf("at the end: left %v", left)
		}
		if left := b.ContainerFailed(key, id, finished); left != 0 {
			t.Fatalf("asked again after the restart: left %v", left)
		}
		return wait
	}

	want := []time.Duration{0, 10, 20, 40, 80, 160, 300, 300, 300}
	for i, w := range want {
		if got := crash(time.Second); got != w*time.Second {
			t.Fatalf("restart %d: back-off %v, want %v", i+1, got, w*time.Second)
		}
	}
	// Failed 10 minutes after its restart: still capped (the kubelet's
	// HasExpiredFunc is "more than 600 s").
	if got := crash(10 * time.Minute); got != 300*time.Second {
		t.Fatalf("after 10m of running: %v, want 300s", got)
	}
	// Ran for longer: starts over.
	for i, w := range []time.Duration{0, 10, 20, 40} {
		ran := time.Second
		if i == 0 {
			ran = 10*time.Minute + time.Second
		}
		if got := crash(ran); got != w*time.Second {
			t.Fatalf("after reset, restart %d: %v, want %v", i+1, got, w*time.Second)
		}
	}
}

func TestBackOffMaxFromConfig(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Now())
	b := newBackOff(clk, initialBackOff, 25*time.Second)
	var got []time.Duration
	for i := range 5 {
		id := fmt.Sprint(i)
		wait := b.ContainerFailed("k", id, clk.Now())
		got = append(got, wait)
		clk.Step(wait)
		if left := b.ContainerFailed("k", id, clk.Now().Add(-wait)); left != 0 {
			t.Fatalf("crash %d: still %v after its wait", i, left)
		}
		clk.Step(time.Second)
	}
	if fmt.Sprint(got) != "[0s 10s 20s 25s 25s]" {
		t.Fatalf("got %v", got)
	}
}

// TestContainerBackOffKey: as the kubelet's GetBackoffKey, a new image or
// new resources give the container a fresh back-off; the key starts with
// the pod's UID, which Forget drops.
func TestContainerBackOffKey(t *testing.T) {
	pod := newPod("p", busybox("app", ""))
	c := &pod.Spec.Containers[0]
	key := containerBackOffKey(pod, c)
	if !strings.HasPrefix(key, string(pod.UID)+"_app_") {
		t.Fatalf("key %q does not start with the pod's UID and the container's name", key)
	}
	if again := containerBackOffKey(pod, c); again != key {
		t.Fatalf("key not stable: %q then %q", key, again)
	}
	image := pod.DeepCopy()
	image.Spec.Containers[0].Image = "busybox:other"
	resources := pod.DeepCopy()
	resources.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}
	for name, p := range map[string]*corev1.Pod{"image": image, "resources": resources} {
		if k := containerBackOffKey(p, &p.Spec.Containers[0]); k == key {
			t.Errorf("a new %s keeps the back-off key", name)
		}
	}

	clk := testingclock.NewFakeClock(time.Now())
	b := newBackOff(clk, initialBackOff, 300*time.Second)
	b.ContainerFailed(key, "c1", clk.Now())
	if wait := b.ContainerFailed(key, "c2", clk.Now()); wait != 10*time.Second {
		t.Fatalf("second crash: %v", wait)
	}
	if wait := b.ContainerFailed(containerBackOffKey(image, &image.Spec.Containers[0]), "c3", clk.Now()); wait != 0 {
		t.Fatalf("the first crash with a new image waits %v", wait)
	}
	b.Forget(string(pod.UID) + "_")
	if wait := b.ContainerFailed(key, "c4", clk.Now()); wait != 0 {
		t.Fatalf("a crash after Forget waits %v", wait)
	}
}

func TestImageBackOff(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Now())
	b := newBackOff(clk, initialBackOff, 300*time.Second)
	if left, _ := b.Remaining("img"); left != 0 {
		t.Fatalf("fresh key waits %v", left)
	}
	if w := b.Failed("img"); w != 10*time.Second {
		t.Fatalf("first failure: %v", w)
	}
	clk.Step(4 * time.Second)
	if left, of := b.Remaining("img"); left != 6*time.Second || of != 10*time.Second {
		t.Fatalf("remaining %v of %v", left, of)
	}
	clk.Step(6 * time.Second)
	if w := b.Failed("img"); w != 20*time.Second {
		t.Fatalf("second failure: %v", w)
	}
	clk.Step(backOffResetAfter)
	if w := b.Failed("img"); w != 10*time.Second {
		t.Fatalf("failure after a quiet period: %v", w)
	}
	b.Reset("img")
	b.Failed("pod1_x")
	b.Forget("pod1_")
	if left, _ := b.Remaining("pod1_x"); left != 0 {
		t.Fatal("Forget kept the key")
	}
}

// TestBackOffClockSteps: the wall clock stepped while a container waits out
// its back-off. Forward: the wait ends (at most sooner, never a burst of
// restarts: the next failure still doubles it). Back by an hour: the
// restart comes one back-off later at most, not an hour later; the same
// for an image pull's back-off (Remaining).
func TestBackOffClockSteps(t *testing.T) {
	for _, tc := range []struct {
		name string
		step time.Duration
		// wantLeft is the wait right after the step.
		wantLeft time.Duration
	}{
		{"forward an hour", time.Hour, 0},
		{"forward 5s", 5 * time.Second, 30 * time.Second},
		{"back an hour", -time.Hour, 40 * time.Second},
		{"back 5s", -5 * time.Second, 40 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			b := newBackOff(clk, initialBackOff, 300*time.Second)
			const key = "uid_app"
			// Three crashes, restarted after 0, 10 and 20 s, then a
			// fourth: 40 s.
			for i, want := range []time.Duration{0, 10, 20, 40} {
				clk.Step(time.Second)
				finished := clk.Now()
				if got := b.ContainerFailed(key, fmt.Sprintf("c%d", i), finished); got != want*time.Second {
					t.Fatalf("crash %d: %v, want %v", i, got, want*time.Second)
				}
				if i < 3 {
					clk.Step(want * time.Second)
					if got := b.ContainerFailed(key, fmt.Sprintf("c%d", i), finished); got != 0 {
						t.Fatalf("crash %d: still %v after its wait", i, got)
					}
				}
			}
			finished := clk.Now()
			clk.Step(5 * time.Second)
			clk.SetTime(clk.Now().Add(tc.step))
			if got := b.ContainerFailed(key, "c3", finished); got != tc.wantLeft {
				t.Fatalf("right after the step: %v, want %v", got, tc.wantLeft)
			}
			if tc.wantLeft > 0 {
				if left, of := b.Remaining(key); left != tc.wantLeft || of != 40*time.Second {
					t.Fatalf("Remaining: %v of %v", left, of)
				}
			}
			clk.Step(tc.wantLeft)
			if got := b.ContainerFailed(key, "c3", finished); got != 0 {
				t.Fatalf("after the wait: still %v", got)
			}
			// The next crash doubles, as without the step.
			clk.Step(time.Second)
			if got := b.ContainerFailed(key, "c4", clk.Now()); got != 80*time.Second {
				t.Fatalf("the crash after: %v, want 80s", got)
			}
		})
	}
}
