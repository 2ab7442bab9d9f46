package soak

import (
	"math"
	"os"
	"testing"
)

// The churn's steps are the histograms' growth between two scrapes, with
// histogram_quantile's percentiles; series that did not move are left out.
func TestStepsBetween(t *testing.T) {
	read := func(name string) []byte {
		b, err := os.ReadFile("testdata/" + name)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	before, err := parseSteps(read("steps-before.txt"))
	if err != nil {
		t.Fatal(err)
	}
	after, err := parseSteps(read("steps-after.txt"))
	if err != nil {
		t.Fatal(err)
	}
	got := stepsBetween(before, after)
	want := []Step{
		{Name: `kubelet_pod_worker_duration_seconds{operation_type="create"}`, N: 4, Mean: 1.5, P50: 2.0 / 3, P90: 1, P99: 1},
		{Name: `kubelet_runtime_operations_duration_seconds{operation_type="list_containers"}`, N: 1000, Mean: 0.01, P50: 0.25, P90: 0.45, P99: 0.495},
		{Name: `kubelet_runtime_operations_duration_seconds{operation_type="run_podsandbox"}`, N: 40, Mean: 2, P50: 1.5, P90: 2, P99: 2},
	}
	if len(got) != len(want) {
		t.Fatalf("steps = %+v, want %+v", got, want)
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	for i, w := range want {
		g := got[i]
		if g.Name != w.Name || g.N != w.N || !near(g.Mean, w.Mean) || !near(g.P50, w.P50) || !near(g.P90, w.P90) || !near(g.P99, w.P99) {
			t.Errorf("step %d = %+v, want %+v", i, g, w)
		}
	}
	if l := stepLabel(want[2].Name); l != "cri run_podsandbox" {
		t.Errorf("label %q", l)
	}
	if l := stepLabel(want[0].Name); l != "pod_worker create" {
		t.Errorf("label %q", l)
	}
	if l := stepLabel(`rest_client_rate_limiter_duration_seconds{verb="GET"}`); l != "rest_client_rate_limiter GET" {
		t.Errorf("label %q", l)
	}
	// A process that restarted between the scrapes (its count fell) says
	// nothing of the churn.
	if s := stepsBetween(after, before); len(s) != 0 {
		t.Errorf("counts that fell gave %+v", s)
	}
}

func TestBucketQuantile(t *testing.T) {
	inf := math.Inf(1)
	for _, c := range []struct {
		name   string
		q      float64
		bounds []float64
		counts []uint64
		want   float64
	}{
		{"first bucket from 0", 0.5, []float64{1, 2, inf}, []uint64{4, 8, 8}, 1},
		{"within a bucket", 0.75, []float64{1, 2, inf}, []uint64{4, 8, 8}, 1.5},
		{"past the last finite bound", 0.99, []float64{1, 2, inf}, []uint64{4, 8, 10}, 2},
		{"no +Inf bucket", 0.99, []float64{1, 2}, []uint64{4, 8}, 2},
	} {
		n := c.counts[len(c.counts)-1]
		if c.name == "no +Inf bucket" {
			n = 10
		}
		if got := bucketQuantile(c.q, c.bounds, c.counts, n); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
