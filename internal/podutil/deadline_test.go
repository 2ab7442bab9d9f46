package podutil

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

func TestPastActiveDeadline(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	secs := func(n int64) *int64 { return &n }
	for _, tc := range []struct {
		name     string
		deadline *int64
		start    time.Time
		now      time.Duration // after start
		past     bool
		left     time.Duration
	}{
		{"no deadline", nil, start, time.Hour, false, 0},
		{"no start time", secs(5), time.Time{}, time.Hour, false, 0},
		{"before", secs(5), start, 2 * time.Second, false, 3 * time.Second},
		{"exactly at the deadline", secs(5), start, 5 * time.Second, true, 0},
		{"after", secs(5), start, 6 * time.Second, true, 0},
		{"deadline lowered below the time already active", secs(1), start, 30 * time.Second, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{Spec: corev1.PodSpec{ActiveDeadlineSeconds: tc.deadline}}
			past, left := PastActiveDeadline(pod, tc.start, start.Add(tc.now))
			if past != tc.past || left != tc.left {
				t.Fatalf("got (%v, %v), want (%v, %v)", past, left, tc.past, tc.left)
			}
		})
	}
}
