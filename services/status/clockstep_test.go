package status

import (
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
)

// steppedClock is the real clock with its wall time stepped by offset, as
// an operator or a broken NTP steps a node's clock: Now and Since move,
// timers and tickers (Go's monotonic clock) do not.
type steppedClock struct {
	clock.RealClock
	offset atomic.Int64
}

func (c *steppedClock) Now() time.Time {
	return time.Now().Add(time.Duration(c.offset.Load())).Round(0)
}
func (c *steppedClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// TestLeaseRenewTimeAcrossClockSteps: the node's wall clock stepped back
// an hour, then forward again. renewTime keeps moving forward (else
// kube-controller-manager counts no renewal and marks the node dead for the
// hour) and the Lease is renewed as often as before; stepped forward, it
// follows the clock.
func TestLeaseRenewTimeAcrossClockSteps(t *testing.T) {
	h := newHarness(t)
	h.cfg.Status.NodeLeaseDurationSeconds = 4 // renewed every second
	h.runtimeReady()
	clk := &steppedClock{}
	h.startAPI(func(o *Options) { o.Clock = clk })
	admin := cp.AdminClient(t)
	renewTime := func() time.Time {
		l, err := admin.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctxT(t), "node-1", metav1.GetOptions{})
		if err != nil || l.Spec.RenewTime == nil {
			return time.Time{}
		}
		return l.Spec.RenewTime.Time
	}
	waitFor(t, 60*time.Second, "the Lease", func() bool { return !renewTime().IsZero() })
	advancing := func(what string) time.Time {
		t.Helper()
		first := renewTime()
		var now time.Time
		waitFor(t, 10*time.Second, what, func() bool { now = renewTime(); return now.After(first) })
		return now
	}
	advancing("a renewal")
	clk.offset.Store(int64(-time.Hour))
	before := time.Now()
	for i := 0; i < 3; i++ {
		advancing("a renewal after the clock stepped back an hour")
	}
	if took := time.Since(before); took > 8*time.Second {
		t.Errorf("three renewals took %s after the step back, want about 3s", took)
	}
	clk.offset.Store(int64(time.Hour))
	got := advancing("a renewal after the clock stepped forward")
	if time.Until(got) < 50*time.Minute {
		t.Errorf("renewTime %v after a step forward of an hour: not following the clock", got)
	}
}

// TestRenewTimes: the table under renewTimes.next.
func TestRenewTimes(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	us := time.Microsecond
	r := &renewTimes{}
	for i, tc := range []struct{ now, want time.Time }{
		{t0, t0},
		{t0.Add(10 * time.Second), t0.Add(10 * time.Second)},
		{t0.Add(-time.Hour), t0.Add(10*time.Second + us)},                    // stepped back
		{t0.Add(-time.Hour + 10*time.Second), t0.Add(10*time.Second + 2*us)}, // still behind
		{t0.Add(10*time.Second + 2*us + 300), t0.Add(10*time.Second + 3*us)}, // equal at µs precision
		{t0.Add(time.Hour), t0.Add(time.Hour)},                               // caught up, and forward
	} {
		if got := r.next(tc.now); !got.Equal(tc.want) {
			t.Fatalf("%d: next(%v) = %v, want %v", i, tc.now, got, tc.want)
		}
	}
}
