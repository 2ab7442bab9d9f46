package bench

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"time"
)

// Dur is a duration that reads as seconds in the JSON result (a number with
// millisecond precision), so the result is easy to plot and compare.
type Dur time.Duration

// D is the plain time.Duration.
func (d Dur) D() time.Duration { return time.Duration(d) }

func (d Dur) MarshalJSON() ([]byte, error) {
	return []byte(fmt.Sprintf("%.3f", time.Duration(d).Seconds())), nil
}

func (d *Dur) UnmarshalJSON(b []byte) error {
	var s float64
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration in seconds: %w", err)
	}
	*d = Dur(time.Duration(math.Round(s * float64(time.Second))))
	return nil
}

// String renders like the table does: seconds with two decimals.
func (d Dur) String() string { return fmtSeconds(time.Duration(d)) }

func fmtSeconds(d time.Duration) string { return fmt.Sprintf("%.2fs", d.Seconds()) }

// Percentile is the p-th percentile (0..100) of ds by the nearest-rank
// method: the smallest value such that at least p % of the values are at or
// below it. Nearest rank never invents a value that was not measured, and
// p99 of fewer than 100 values is the maximum, as it should be. It is 0 for
// no values.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	if p <= 0 {
		return s[0]
	}
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	rank = min(max(rank, 1), len(s))
	return s[rank-1]
}

// Median is the middle value of xs (durations, ratios, CPU seconds), the
// mean of the two middle ones for an even count (so the median of two
// rounds lies between them). It is 0 for no values.
func Median[T time.Duration | float64](xs []T) T {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// Mean is the arithmetic mean of ds, 0 for no values. Means of stages add
// up to the mean of their sum, which medians do not: the breakdown uses it.
func Mean(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return sum / time.Duration(len(ds))
}

// Max is the largest value of ds, 0 for no values.
func Max(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	return slices.Max(ds)
}

// Dist summarises per-pod latencies.
type Dist struct {
	N    int `json:"n"`
	P50  Dur `json:"p50"`
	P99  Dur `json:"p99"`
	Max  Dur `json:"max"`
	Mean Dur `json:"mean"`
}

// Distribution summarises ds.
func Distribution(ds []time.Duration) Dist {
	return Dist{N: len(ds), P50: Dur(Percentile(ds, 50)), P99: Dur(Percentile(ds, 99)), Max: Dur(Max(ds)), Mean: Dur(Mean(ds))}
}

// Ratio is a/b, 0 when b is 0 (a contender that did not run).
func Ratio(a, b time.Duration) float64 {
	if b <= 0 {
		return 0
	}
	return float64(a) / float64(b)
}
