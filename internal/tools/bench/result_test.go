package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

func secs(xs ...float64) []Dur {
	out := make([]Dur, len(xs))
	for i, x := range xs {
		out[i] = Dur(time.Duration(x * float64(time.Second)))
	}
	return out
}

func run(c string, bound, n, round int, wall float64, running ...float64) Run {
	return Run{Contender: c, Bound: bound, N: n, Round: round, WallRunning: secs(wall)[0], Running: secs(running...), Teardown: secs(2.5)[0]}
}

func TestSummarize(t *testing.T) {
	nodelet := func(round int, wall float64, running ...float64) Run {
		r := run(Nodelet, 2, 3, round, wall, running...)
		r.WallReady = r.WallRunning + Dur(100*time.Millisecond)
		r.Ready = secs(running...)
		r.Agent = &AgentCost{CPU: secs(float64(round))[0], PeakRSS: uint64(round) << 20}
		r.Bus = &BusCost{PerPodMessages: 8, PerPodBytes: 6000}
		r.Timelines = []Timeline{{Written: at(0), Desired: at(100), Admitted: at(110), SandboxReady: at(500), Started: at(800),
			Observed: at(810), Status: at(820), Measured: at(830)}}
		return r
	}
	runs := []Run{
		nodelet(1, 2.2, 1, 2, 2.2), run(Floor, 2, 3, 1, 2.0, 1, 1.5, 2),
		nodelet(2, 3.0, 1, 2, 3), run(Floor, 2, 3, 2, 2.0, 1, 1.5, 2),
		nodelet(3, 2.0, 1, 1.5, 2), run(Floor, 2, 3, 3, 2.5, 1, 2, 2.5),
		{Contender: Nodelet, Bound: 2, N: 3, Round: 4, Error: "boom"},
	}
	sums := Summarize(runs, 0.10)
	if len(sums) != 2 || sums[0].Contender != Nodelet || sums[1].Contender != Floor {
		t.Fatalf("summaries %+v", sums)
	}
	s := sums[0]
	if s.Rounds != 3 || s.Failed != 1 {
		t.Fatalf("rounds %d failed %d, want 3 and 1", s.Rounds, s.Failed)
	}
	if s.WallRunning != secs(2.2)[0] || s.WallReady != secs(2.3)[0] || s.Teardown != secs(2.5)[0] {
		t.Fatalf("medians: wall %v ready %v teardown %v", s.WallRunning, s.WallReady, s.Teardown)
	}
	// Ratios pair each round with the floor's same round: 2.2/2, 3/2, 2/2.5.
	want := []float64{1.1, 1.5, 0.8}
	if len(s.Ratios) != 3 {
		t.Fatalf("ratios %v", s.Ratios)
	}
	for i := range want {
		if d := s.Ratios[i] - want[i]; d > 1e-9 || d < -1e-9 {
			t.Fatalf("ratios %v, want %v", s.Ratios, want)
		}
	}
	if d := s.Ratio - 1.1; d > 1e-9 || d < -1e-9 {
		t.Fatalf("median ratio %v, want 1.1", s.Ratio)
	}
	// Pooled per-pod times: 1,2,2.2, 1,2,3, 1,1.5,2 → p50 (5th of 9) = 2.
	if s.Running.N != 9 || s.Running.P50 != secs(2)[0] || s.Running.P99 != secs(3)[0] {
		t.Fatalf("running %+v", s.Running)
	}
	if s.Ready == nil || s.Ready.N != 9 {
		t.Fatalf("ready %+v", s.Ready)
	}
	if s.AgentCPU != secs(2)[0] || s.PeakRSS != 3<<20 || s.BusMsgs != 8 {
		t.Fatalf("cost: cpu %v rss %d msgs %v", s.AgentCPU, s.PeakRSS, s.BusMsgs)
	}
	if s.Breakdown == nil || s.Breakdown.Pods != 3 || !s.Breakdown.Within {
		t.Fatalf("breakdown %+v", s.Breakdown)
	}
	if f := sums[1]; len(f.Ratios) != 0 || f.Rounds != 3 || f.Ready != nil {
		t.Fatalf("floor summary %+v", f)
	}
}

func TestRecommend(t *testing.T) {
	sum := func(bound, n int, wall, p50 float64) Summary {
		return Summary{Contender: Nodelet, Bound: bound, N: n, Rounds: 3, WallRunning: secs(wall)[0], Running: Dist{P50: secs(p50)[0]}}
	}
	tests := []struct {
		name  string
		sums  []Summary
		bound int
		n     int
	}{
		{"lowest p50 with a wall time as good", []Summary{sum(0, 20, 8.0, 7.0), sum(1, 20, 8.3, 4.0), sum(2, 20, 8.1, 4.5)}, 1, 20},
		{"a low p50 that makes the burst 10% longer loses", []Summary{sum(0, 20, 8.0, 7.0), sum(1, 20, 9.5, 3.0), sum(2, 20, 8.5, 4.5)}, 2, 20},
		{"N=20 is the judge even when larger bursts ran", []Summary{sum(1, 50, 20, 9), sum(4, 50, 19, 18), sum(1, 20, 8, 4), sum(4, 20, 8, 6)}, 1, 20},
		{"without N=20 the largest N judges", []Summary{sum(1, 5, 2, 1), sum(4, 5, 2, 1.5), sum(1, 10, 4, 3), sum(4, 10, 4, 2)}, 4, 10},
		{"a tie goes to the smaller bound", []Summary{sum(4, 20, 8, 4), sum(2, 20, 8, 4)}, 2, 20},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// The floor never counts.
			sums := append(tc.sums, Summary{Contender: Floor, Bound: 9, N: tc.n, Rounds: 3, Running: Dist{P50: 1}})
			r := Recommend(sums)
			if r == nil || r.Bound != tc.bound || r.N != tc.n || r.Reason == "" {
				t.Fatalf("Recommend = %+v, want bound %d at N=%d", r, tc.bound, tc.n)
			}
		})
	}
	if r := Recommend([]Summary{{Contender: Floor, N: 20, Rounds: 1}}); r != nil {
		t.Fatalf("recommended %+v without a nodelet run", r)
	}
}

func TestWriteTable(t *testing.T) {
	runs := []Run{
		run(Nodelet, 2, 20, 1, 8.4, 3, 4, 8.4), run(Floor, 2, 20, 1, 8.0, 3, 3.5, 8),
		run(Nodelet, 0, 20, 1, 8.1, 7, 7.5, 8.1), run(Floor, 0, 20, 1, 8.0, 7, 7.4, 8),
	}
	runs[0].Agent = &AgentCost{CPU: secs(1.5)[0], PeakRSS: 300 << 20}
	runs[0].Idle = &IdleCost{Pods: 20, CPUPercent: 2.5, RSS: 280 << 20, PSS: 270 << 20, ByProcess: map[string]ProcMemory{
		"bus": {RSS: 30 << 20, PSS: 29 << 20, HWM: 40 << 20}, "runtime": {RSS: 250 << 20, PSS: 241 << 20, PSSAnon: 200 << 20, HWM: 260 << 20}}}
	runs[0].Empty = &IdleCost{RSS: 100 << 20, PSS: 90 << 20, ByProcess: map[string]ProcMemory{
		"runtime": {RSS: 100 << 20, PSS: 90 << 20, PSSAnon: 50 << 20, HWM: 110 << 20}}}
	runs[0].ExitToStatus = []Dur{Dur(120 * time.Millisecond), Dur(80 * time.Millisecond), Dur(900 * time.Millisecond)}
	runs[0].Bus = &BusCost{PerPodMessages: 8, PerPodBytes: 6570}
	runs[0].Summary = &SummaryLatency{Requests: []Dur{Dur(12 * time.Millisecond), Dur(16 * time.Millisecond)}, Pods: 20, Bytes: 40960,
		AgentCPU: Dur(5 * time.Millisecond), RuntimeCPU: Dur(50 * time.Millisecond)}
	runs[0].Timelines = []Timeline{{Written: at(0), Desired: at(100), Admitted: at(110), SandboxReady: at(500), Started: at(800),
		Observed: at(810), Status: at(820), Measured: at(2000)}} // the stages miss most of the start
	res := &Result{Machine: Machine{Hostname: "vm", CPUs: 2, LoadStart: "1.00 1.00 1.00"}, Command: "nodelet-bench -n 20",
		NodeLifecycle: nodeLifecycle}
	res.Summaries = Summarize(runs, 0.10)
	res.Recommendation = Recommend(res.Summaries)
	var out bytes.Buffer
	if err := WriteTable(&out, res); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, want := range []string{
		"== sandbox bound 2 (runtime.maxConcurrentSandboxCreations=2",
		"== sandbox bound unbounded (runtime.maxConcurrentSandboxCreations=0",
		"20    nodelet       1         8.40s           -    4.00s    8.40s          -          -     2.50s        120ms / 900ms   1.05       1.05",
		"20      floor       1         8.00s           -    3.50s    8.00s",
		"nodelet N=20",
		"4.00s / 8.40s",
		"OVER",
		"2.5% of a core",
		"300.0MiB",
		"agent memory at rest, per process",
		"runtime  250.0MiB / 241.0MiB (200.0MiB) / 260.0MiB",
		"sum  280.0MiB / 270.0MiB (200.0MiB) / 300.0MiB",
		"(on the settled node before the burst, no pod running)",
		"runtime  100.0MiB / 90.0MiB (50.0MiB) / 110.0MiB",
		"best runtime.maxConcurrentSandboxCreations for a burst: 2",
		"== at rest with the burst running",
		"2  20    nodelet  2.5% of a core (0.00s)  270.0MiB             2  12.0ms / 16.0ms / 16.0ms        20/20        40KiB          2.5ms           25.0ms",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("table lacks %q:\n%s", want, s)
		}
	}
	// The bound that ran first comes first.
	if strings.Index(s, "sandbox bound 2") > strings.Index(s, "sandbox bound unbounded") {
		t.Errorf("bounds out of order:\n%s", s)
	}
	// And the result survives JSON.
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var back Result
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Summaries) != 4 || back.Summaries[0].Running.P50 != res.Summaries[0].Running.P50 ||
		back.Summaries[0].Summary == nil || back.Summaries[0].Summary.Latency.P99 != Dur(16*time.Millisecond) {
		t.Fatalf("JSON round trip lost the summaries: %+v", back.Summaries)
	}
}

// Runs interleave bounds and Ns; summaries come grouped by bound, then N.
func TestSummarizeOrder(t *testing.T) {
	var runs []Run
	for _, n := range []int{20, 1} {
		for _, b := range []int{2, 0} {
			runs = append(runs, run(Nodelet, b, n, 1, 1, 1), run(Floor, b, n, 1, 1, 1))
		}
	}
	var got []string
	for _, s := range Summarize(runs, 0.1) {
		got = append(got, fmt.Sprintf("%s/%d/%d", s.Contender, s.Bound, s.N))
	}
	want := "nodelet/2/1 floor/2/1 nodelet/2/20 floor/2/20 nodelet/0/1 floor/0/1 nodelet/0/20 floor/0/20"
	if strings.Join(got, " ") != want {
		t.Fatalf("order %v, want %s", got, want)
	}
}
