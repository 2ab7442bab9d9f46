package testenv

import (
	"context"
	"sync"
	"testing"
	"time"
)

// StopTimeout is how long Start's stop waits for a daemon to return after
// its context ends.
const StopTimeout = 30 * time.Second

// Start runs run (a daemon's Run) in a goroutine with a context of its own.
// The stop it returns cancels that context and waits up to StopTimeout for
// run to return, failing t when run returned an error or did not return.
// stop may be called more than once; the end of the test calls it too.
func Start(t testing.TB, run func(context.Context) error) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(StopTimeout):
				t.Errorf("Run did not return %s after its context ended", StopTimeout)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// Runner runs one daemon at a time for a test harness: Start after Stop
// starts a new one, as a restarted process would.
type Runner struct{ stop func() }

// Start runs run (see Start); a second Start while one runs fails t.
func (r *Runner) Start(t testing.TB, run func(context.Context) error) {
	t.Helper()
	if r.stop != nil {
		t.Fatal("testenv.Runner: already running")
	}
	r.stop = Start(t, run)
}

// Stop ends the running daemon, if any, and waits for it.
func (r *Runner) Stop() {
	if r.stop != nil {
		r.stop()
		r.stop = nil
	}
}
