package runtime

import (
	"fmt"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"
)

// A container that crashes right after each start waits exactly 10, 20, 40,
// ... s before each restart, capped at 300 s; once it ran 10 minutes the
// sequence starts over.
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
		started := clk.Now()
		clk.Step(ran)
		finished := clk.Now()
		wait := b.ContainerFailed(key, id, started, finished)
		if again := b.ContainerFailed(key, id, started, finished); again != wait {
			t.Fatalf("asking twice about %s changed the wait: %v then %v", id, wait, again)
		}
		clk.Step(wait / 2)
		if left := b.ContainerFailed(key, id, started, finished); left != wait-wait/2 {
			t.Fatalf("half way: left %v, want %v", left, wait-wait/2)
		}
		clk.Step(wait - wait/2 - time.Millisecond)
		if left := b.ContainerFailed(key, id, started, finished); left != time.Millisecond {
			t.Fatalf("1ms before the end: left %v", left)
		}
		clk.Step(time.Millisecond)
		if left := b.ContainerFailed(key, id, started, finished); left != 0 {
			t.Fatalf("at the end: left %v", left)
		}
		return wait
	}

	want := []time.Duration{10, 20, 40, 80, 160, 300, 300, 300}
	for i, w := range want {
		if got := crash(time.Second); got != w*time.Second {
			t.Fatalf("restart %d: back-off %v, want %v", i+1, got, w*time.Second)
		}
	}
	// Ran for 9m59s: still capped.
	if got := crash(10*time.Minute - time.Second); got != 300*time.Second {
		t.Fatalf("after 9m59s of running: %v, want 300s", got)
	}
	// Ran for 10 minutes: starts over.
	for i, w := range []time.Duration{10, 20, 40} {
		ran := time.Second
		if i == 0 {
			ran = 10 * time.Minute
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
	for i := range 4 {
		got = append(got, b.ContainerFailed("k", fmt.Sprint(i), clk.Now(), clk.Now()))
		clk.Step(time.Minute)
	}
	if fmt.Sprint(got) != "[10s 20s 25s 25s]" {
		t.Fatalf("got %v", got)
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
			// Two crashes: the back-off is 20 s, then a third: 40 s.
			for i, want := range []time.Duration{10, 20, 40} {
				started := clk.Now()
				clk.Step(time.Second)
				if got := b.ContainerFailed(key, fmt.Sprintf("c%d", i), started, clk.Now()); got != want*time.Second {
					t.Fatalf("crash %d: %v, want %v", i, got, want*time.Second)
				}
				if i < 2 {
					clk.Step(want * time.Second)
				}
			}
			finished := clk.Now()
			clk.Step(5 * time.Second)
			clk.SetTime(clk.Now().Add(tc.step))
			if got := b.ContainerFailed(key, "c2", finished.Add(-time.Second), finished); got != tc.wantLeft {
				t.Fatalf("right after the step: %v, want %v", got, tc.wantLeft)
			}
			if left, of := b.Remaining(key); left != tc.wantLeft || of != 40*time.Second {
				t.Fatalf("Remaining: %v of %v", left, of)
			}
			clk.Step(tc.wantLeft)
			if got := b.ContainerFailed(key, "c2", finished.Add(-time.Second), finished); got != 0 {
				t.Fatalf("after the wait: still %v", got)
			}
			// The next crash doubles, as without the step.
			started := clk.Now()
			clk.Step(time.Second)
			if got := b.ContainerFailed(key, "c3", started, clk.Now()); got != 80*time.Second {
				t.Fatalf("the crash after: %v, want 80s", got)
			}
		})
	}
}
