package eventually

import (
	"context"
	"errors"
	"testing"
	"time"

	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"
)

func TestPoll(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(0, 0))
	calls := 0
	done := make(chan error, 1)
	go func() {
		done <- Poll(t.Context(), clk, time.Second, 100*time.Millisecond, func() error {
			calls++
			return errors.New("still 3 pods")
		})
	}()
	// Time passes only when the test says so: 10 steps of the interval
	// reach the deadline.
	for i := 0; i < 10; i++ {
		for !clk.HasWaiters() {
			time.Sleep(time.Millisecond)
		}
		clk.Step(100 * time.Millisecond)
	}
	err := <-done
	if !errors.Is(err, context.DeadlineExceeded) || err.Error() != "context deadline exceeded after 1s: still 3 pods" {
		t.Fatalf("Poll = %v", err)
	}
	if calls != 11 {
		t.Errorf("cond called %d times, want 11 (at 0 and after each of 10 intervals)", calls)
	}

}

func TestPollHolds(t *testing.T) {
	n := 0
	ok := Bool(func() bool { n++; return n == 3 })
	if err := Poll(t.Context(), clock.RealClock{}, time.Minute, time.Millisecond, ok); err != nil || n != 3 {
		t.Fatalf("Poll = %v after %d calls", err, n)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := Poll(ctx, clock.RealClock{}, time.Minute, time.Millisecond, Bool(func() bool { return false })); !errors.Is(err, context.Canceled) {
		t.Fatalf("Poll after cancel = %v", err)
	}
}
