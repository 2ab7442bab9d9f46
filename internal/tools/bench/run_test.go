package bench

import (
	"testing"
	"time"
)

// The default bound on a burst or teardown grows with the burst past 100
// pods; one given is kept.
func TestTimeoutFor(t *testing.T) {
	for _, tc := range []struct {
		set  time.Duration
		n    int
		want time.Duration
	}{
		{0, 1, DefaultTimeout},
		{0, 100, DefaultTimeout},
		{0, 110, 330 * time.Second},
		{time.Minute, 110, time.Minute},
	} {
		o := Options{Timeout: tc.set}
		if got := o.timeoutFor(tc.n); got != tc.want {
			t.Errorf("Timeout %v, N=%d: %v, want %v", tc.set, tc.n, got, tc.want)
		}
	}
}
