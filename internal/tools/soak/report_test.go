package soak

import (
	"bytes"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func TestReceivedCountsEachEventAtItsHighestCount(t *testing.T) {
	r := &received{node: "node-1", by: map[types.UID]eventCount{}}
	ev := func(uid, host, reason string, count int32) *corev1.Event {
		return &corev1.Event{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid)}, Reason: reason, Count: count,
			Source: corev1.EventSource{Component: "kubelet", Host: host}}
	}
	r.see(ev("a", "node-1", "Pulled", 1))
	r.see(ev("a", "node-1", "Pulled", 3))
	r.see(ev("a", "node-1", "Pulled", 2))  // an older copy seen late
	r.see(ev("b", "node-1", "Started", 0)) // count unset: one
	r.see(ev("c", "node-2", "Started", 5)) // another node's
	r.see("not an event")
	got := r.tally()
	if got.Received != 4 || got.Objects != 2 || got.ByReason["Pulled"] != 3 || got.ByReason["Started"] != 1 {
		t.Errorf("tally %+v", got)
	}
}

func testResult() *Result {
	samples := churnSamples(12, func(l float64) (float64, float64, float64) { return 40<<20 + l*1024, 80, 20 })
	for i := range samples {
		samples[i].Node = Counts{Containers: 110, Sandboxes: 110, Mounts: 400, IPs: 110}
		samples[i].Bus = map[string]Stream{"KV_nodelet_v1_pods_status": {DiskBytes: int64(1<<20 + i*1000)}}
		samples[i].Events = &Events{Produced: int64(i * 10), Posted: int64(i * 10), Received: int64(i * 10)}
	}
	rest := Sample{Phase: PhaseBefore, Procs: map[string]Proc{"runtime": {Agent: true, PSS: 30 << 20, Goroutines: 60, FDs: 15}}}
	res := &Result{Agent: "nodelet", Node: "node-1", Pods: 110, Lifecycles: 1100, Warmup: 200, Samples: samples,
		Before: &Rest{Sample: rest}, After: &Rest{Sample: rest},
		Actions: map[string]int{"job": 3, "rollout": 1},
		Events: Events{Produced: 120, Posted: 100, Dropped: map[string]int64{"spam_filter": 20}, Received: 100,
			ByReason: map[string]int64{"Started": 100}},
		Leftovers: []Leftover{{Kind: "mounts", Items: []string{"/x/y"}}}}
	res.Growth = ComputeGrowth(res.Samples, res.Warmup, Bounds{})
	return res
}

func TestPrint(t *testing.T) {
	res := testResult()
	other := testResult()
	other.Agent = "kubelet"
	var b bytes.Buffer
	(&Report{Results: []*Result{res, other}}).Print(&b)
	out := b.String()
	for _, want := range []string{
		"== nodelet on node-1: 1100 lifecycles at 110 pods",
		"runtime",
		"containerd*",
		"30.0/41.1/30.0",
		"events: produced 120 = posted 100 + dropped 20 (spam_filter 20); received 100 in 0 objects: balanced",
		"mounts (1): /x/y",
		"== side by side",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	// Growth over a bound is named, memory in MiB.
	steep := testResult()
	steep.Samples = churnSamples(12, func(l float64) (float64, float64, float64) { return 40<<20 + l*3*mib/1000, 80, 20 })
	steep.Growth = ComputeGrowth(steep.Samples, steep.Warmup, Bounds{})
	b.Reset()
	steep.Print(&b)
	if want := "OVER BOUND: proc.runtime.pss +3.0/1k over the last half > 2, proc.runtime.rss +3.0/1k over the last half > 2"; !strings.Contains(b.String(), want) {
		t.Errorf("report lacks %q:\n%s", want, b.String())
	}
}

func TestPlotsArePNGs(t *testing.T) {
	dir := t.TempDir()
	res := testResult()
	rep := &Report{Results: []*Result{res, testResult()}}
	rep.Results[1].Agent = "kubelet"
	if err := rep.Write(dir); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"nodelet.png", "kubelet.png", "compare.png"} {
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if b := img.Bounds(); b.Dx() < 500 || b.Dy() < 300 {
			t.Errorf("%s: %v", name, b)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "result.json")); err != nil {
		t.Error(err)
	}
	// A run that failed before its churn still plots (empty panels).
	if err := PlotResult(&Result{Agent: "nodelet"}, filepath.Join(dir, "empty.png")); err != nil {
		t.Error(err)
	}
}

func TestReadReports(t *testing.T) {
	// Two sessions' runs, one agent each, their growth figures written by
	// an older measure (here: none at all).
	dir := t.TempDir()
	var paths []string
	for _, agent := range []string{"nodelet", "kubelet"} {
		res := testResult()
		res.Agent, res.Growth = agent, nil
		if agent == "kubelet" {
			// The churn began at 300 lifecycles: the warm-up counts from there.
			res.ChurnBase = 300
		}
		p := filepath.Join(dir, agent+".json")
		if err := writeJSON(p, &Report{Command: "soak -agent " + agent, Results: []*Result{res}}); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	rep, err := ReadReports(paths, Bounds{Memory: 512 << 10}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != 2 || rep.Results[0].Agent != "nodelet" || rep.Results[1].Agent != "kubelet" {
		t.Fatalf("results %+v", rep.Results)
	}
	if rep.Command != "soak -agent nodelet; soak -agent kubelet" {
		t.Errorf("command %q", rep.Command)
	}
	// testResult's runtime grows 1,000 KiB per 1,000 lifecycles: over the
	// bound given here. The window starts at ChurnBase + Warmup (the first
	// churn sample's lifecycles, 0, when ChurnBase was not kept).
	for i, wantSamples := range []int{10, 7} {
		g, ok := rep.Results[i].growth("proc.runtime.pss")
		if !ok || !g.Over || g.Samples != wantSamples || math.Abs(g.Late-1024000) > 1 {
			t.Errorf("%s: %+v (found %v), want over, %d samples", rep.Results[i].Agent, g, ok, wantSamples)
		}
	}
	// -warmup overrides the runs' own.
	rep, err = ReadReports(paths[:1], Bounds{}, 900)
	if err != nil {
		t.Fatal(err)
	}
	if g, _ := rep.Results[0].growth("proc.runtime.pss"); g.Samples != 3 || g.Over {
		t.Errorf("warm-up 900: %+v", g)
	}
	for _, bad := range []string{filepath.Join(dir, "missing.json"), writeFile(t, dir, "bad.json", "{"), writeFile(t, dir, "empty.json", "{}")} {
		if _, err := ReadReports([]string{bad}, Bounds{}, 0); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestChurnCPU: a process's CPU in the churn is its CPU seconds between the
// churn's first and last samples over the time between them; the agent's
// is the sum of its processes'; a process that restarted in between has
// none, nor has an agent one of whose processes did.
func TestChurnCPU(t *testing.T) {
	sample := func(at float64, phase string, procs map[string]Proc) Sample {
		return Sample{At: at, Phase: phase, Procs: procs}
	}
	res := &Result{Samples: []Sample{
		sample(0, "fill", map[string]Proc{"runtime": {PID: 1, Agent: true, CPU: 1}}),
		sample(10, PhaseChurn, map[string]Proc{"runtime": {PID: 1, Agent: true, CPU: 5}, "status": {PID: 2, Agent: true, CPU: 1},
			"containerd": {PID: 3, CPU: 10}}),
		sample(30, PhaseChurn, map[string]Proc{"runtime": {PID: 1, Agent: true, CPU: 15}, "status": {PID: 2, Agent: true, CPU: 3},
			"containerd": {PID: 3, CPU: 40}}),
		sample(40, "drain", map[string]Proc{"runtime": {PID: 1, Agent: true, CPU: 100}}),
	}}
	for name, want := range map[string]string{"runtime": "0.50", "status": "0.10", "agent": "0.60", "containerd": "1.50", "gone": "-"} {
		if got := res.cpuCell(name); got != want {
			t.Errorf("%s: %s, want %s", name, got, want)
		}
	}
	res.Samples[2].Procs["status"] = Proc{PID: 9, Agent: true, CPU: 0.5}
	if got := res.cpuCell("status"); got != "-" {
		t.Errorf("a restarted process: %s, want -", got)
	}
	if got := res.cpuCell("agent"); got != "-" {
		t.Errorf("an agent with a restarted process: %s, want -", got)
	}
}

// TestChurnDisk: what a process wrote and read in the churn, per 1,000
// lifecycles between the churn's first and last samples; none where the
// I/O counters were not read (a result from before they were).
func TestChurnDisk(t *testing.T) {
	res := &Result{Samples: []Sample{
		{At: 0, Phase: "fill", Procs: map[string]Proc{"bus": {PID: 1, Agent: true, IO: true}}},
		{At: 10, Phase: PhaseChurn, Lifecycles: 100, Procs: map[string]Proc{
			"bus":        {PID: 1, Agent: true, IO: true, DiskWrite: 10 * mib, DiskRead: mib},
			"sources":    {PID: 2, Agent: true, IO: true},
			"containerd": {PID: 3, CPU: 1}}},
		{At: 70, Phase: PhaseChurn, Lifecycles: 600, Procs: map[string]Proc{
			"bus":        {PID: 1, Agent: true, IO: true, DiskWrite: 60 * mib, DiskRead: mib},
			"sources":    {PID: 2, Agent: true, IO: true, DiskWrite: 5 * mib},
			"containerd": {PID: 3, CPU: 2}}},
		{At: 80, Phase: "drain", Lifecycles: 700, Procs: map[string]Proc{"bus": {PID: 1, Agent: true, IO: true, DiskWrite: 900 * mib}}},
	}}
	for name, want := range map[string]string{"bus": "100/0", "sources": "10/0", "agent": "110/0", "containerd": "-", "gone": "-"} {
		if got := res.diskCell(name); got != want {
			t.Errorf("%s: %s, want %s", name, got, want)
		}
	}
}

// TestReadIO reads this process's I/O counters after it wrote a file
// through to the disk.
func TestReadIO(t *testing.T) {
	_, before, err := readIO(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(bytes.Repeat([]byte("x"), 1<<20)); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	_, after, err := readIO(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if after < before+1<<20 {
		t.Fatalf("write_bytes %d -> %d after writing and syncing 1 MiB", before, after)
	}
}

// TestReadCPU reads this process's CPU time, which grows as it works.
func TestReadCPU(t *testing.T) {
	before, err := readCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for x := 0; time.Now().Before(deadline); x++ {
		after, err := readCPU(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		if after > before {
			return
		}
	}
	t.Fatalf("no CPU time counted in 5 s of spinning (%v)", before)
}
