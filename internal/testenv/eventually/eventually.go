// Package eventually is the tests' one way to wait for a condition: poll it
// on a clock until it holds or a timeout passes, then fail naming what was
// awaited and the condition's last answer. Tests wait on the state that
// proves a thing, never sleep and then assert.
package eventually

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"k8s.io/utils/clock"
)

// Interval is how often conditions are polled.
const Interval = 20 * time.Millisecond

// ErrNotYet is what Poll returns for a yes/no condition that never held.
var ErrNotYet = errors.New("condition not met")

// Poll calls cond every interval on clk until it returns nil (Poll returns
// nil), ctx ends, or timeout passes on clk; then it returns cond's last
// error wrapped with context.DeadlineExceeded. It does not touch a
// testing.T, so goroutines and non-test helpers may use it.
func Poll(ctx context.Context, clk clock.Clock, timeout, interval time.Duration, cond func() error) error {
	deadline := clk.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if !clk.Now().Before(deadline) {
			return fmt.Errorf("%w after %s: %w", context.DeadlineExceeded, timeout, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", ctx.Err(), err)
		case <-clk.After(interval):
		}
	}
}

// Nil waits until cond returns nil, failing t after timeout with what and
// cond's last error (which should say what the state was).
func Nil(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	if err := Poll(t.Context(), clock.RealClock{}, timeout, Interval, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// True waits until ok returns true, failing t after timeout.
func True(t testing.TB, timeout time.Duration, what string, ok func() bool) {
	t.Helper()
	Nil(t, timeout, what, Bool(ok))
}

// State waits until cond reports ok, failing t after timeout with the last
// state it described.
func State(t testing.TB, timeout time.Duration, what string, cond func() (ok bool, state string)) {
	t.Helper()
	Nil(t, timeout, what, func() error {
		if ok, state := cond(); !ok {
			return errors.New(state)
		}
		return nil
	})
}

// Bool adapts a yes/no condition to Poll.
func Bool(ok func() bool) func() error {
	return func() error {
		if ok() {
			return nil
		}
		return ErrNotYet
	}
}
