package bench

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodelet/nodelet/internal/kubeletmetrics"
	"github.com/nodelet/nodelet/internal/testenv"
)

var (
	binsOnce sync.Once
	binsDir  string
	binsErr  error
)

// TestMain removes the binaries benchBinaries built (225 MB a run, which
// piled up under /tmp).
func TestMain(m *testing.M) {
	code := m.Run()
	if binsDir != "" {
		os.RemoveAll(binsDir)
	}
	os.Exit(code)
}

// benchBinaries builds nodelet's binaries once per test binary.
func benchBinaries(t *testing.T) string {
	t.Helper()
	binsOnce.Do(func() {
		if binsDir, binsErr = os.MkdirTemp("", "nodelet-bench-bin-"); binsErr == nil {
			binsErr = testenv.BuildBinaries(binsDir)
		}
	})
	if binsErr != nil {
		t.Fatal(binsErr)
	}
	return binsDir
}

// kubeletBinary is the kubelet of the control plane's version, as
// scripts/bench.sh uses it (built once and cached by controlplane.sh).
func kubeletBinary(t *testing.T) string {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("bash", filepath.Join(root, "scripts", "controlplane.sh"), "tools", "kubelet").Output()
	if err != nil {
		t.Fatalf("controlplane.sh tools kubelet: %v", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if p, ok := strings.CutPrefix(line, "KUBELET="); ok {
			return p
		}
	}
	t.Fatalf("controlplane.sh tools kubelet printed no path: %q", out)
	return ""
}

func measureSmall(t *testing.T, kubelet string, idle time.Duration) *Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	res, err := Measure(ctx, Options{Ns: []int{2}, Rounds: 1, Bounds: []int{0}, BinDir: benchBinaries(t),
		Out: filepath.Join(t.TempDir(), "result.json"), Idle: idle, Settle: time.Second, KubeletBin: kubelet, SummaryRequests: 3,
		Log: io.Discard, WorkDir: t.TempDir()}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// minCoveragePercent is the share of the kubelet's metric families on
// the bench's static pods that nodelet's /metrics must have: the lowest
// figure of docs/metrics.md, rounded down. Both counts move from run to
// run (a family appears once something it counts happened: the kubelet
// showed 249 to 254, nodelet 173 or 174), so the floor sits below the
// lowest run, not at the best one (69 failed the suite at 173/253).
const minCoveragePercent = 66

// nodelet, the floor and a real kubelet each run the burst on one
// containerd; both agents' exit → status latency and memory at rest are
// measured.
func TestMeasureBesideKubelet(t *testing.T) {
	res := measureSmall(t, kubeletBinary(t), 2*time.Second)
	for _, r := range res.Runs {
		if r.Error != "" {
			t.Fatalf("%s run failed: %s", r.Contender, r.Error)
		}
	}
	for _, c := range []string{Nodelet, Floor, Kubelet} {
		s := find(res.Summaries, c, 0, 2)
		if s == nil || s.Rounds != 1 || s.Running.N != 2 {
			t.Fatalf("%s: summary %+v", c, s)
		}
		if c == Floor {
			if s.ExitToStatus != nil {
				t.Errorf("floor has an exit → status figure: %+v", s.ExitToStatus)
			}
			continue
		}
		if s.ExitToStatus == nil || s.ExitToStatus.N != 2 || s.ExitToStatus.P50 <= 0 {
			t.Errorf("%s: exit → status %+v, want 2 positive samples", c, s.ExitToStatus)
		}
		if s.Idle == nil || s.Idle.PSS == 0 || s.Idle.RSS < s.Idle.PSS {
			t.Errorf("%s: idle memory %+v", c, s.Idle)
		}
		// /stats/summary answered three times, listing both pods each time.
		if m := s.Summary; m == nil || m.Latency.N != 3 || m.Latency.P50 <= 0 || m.Pods != 2 || m.Bytes == 0 {
			t.Errorf("%s: /stats/summary %+v, want 3 answers listing both pods", c, m)
		}
	}
	// The coverage step: the kubelet's families on the same static pods,
	// and which of them nodelet's /metrics has (docs/metrics.md).
	c := res.Coverage()
	if c == nil || c.Kubelet < 50 {
		t.Fatalf("metric family coverage %+v: want both agents' families scraped", c)
	}
	t.Logf("metric family coverage: %s", c.missingLine())
	if 100*c.Present < minCoveragePercent*c.Kubelet {
		t.Errorf("nodelet has %s of the kubelet's metric families, below the %d%% docs/metrics.md gives", c, minCoveragePercent)
	}
	for _, name := range kubeletmetrics.Required {
		if slices.Contains(c.Missing, name) {
			t.Errorf("the kubelet has %s on the bench's static pods; nodelet has not", name)
		}
	}
	if m := find(res.Summaries, Kubelet, 0, 2).Idle.ByProcess; m["kubelet"].RSS == 0 {
		t.Errorf("kubelet's own memory missing: %+v", m)
	}
	if m := find(res.Summaries, Nodelet, 0, 2).Idle.ByProcess; m["runtime"].RSS == 0 || m["bus"].RSS == 0 || m["supervisor"].RSS == 0 {
		t.Errorf("nodelet's processes missing: %+v", m)
	}
}

// A kubelet that exits at start fails its run at once with its own words,
// and the other contenders' runs are unaffected.
func TestKubeletThatExitsFailsFast(t *testing.T) {
	fake := filepath.Join(t.TempDir(), "kubelet")
	script := "#!/bin/sh\necho 'E1203 run.go:72] \"command failed\" err=\"failed to run Kubelet: the bench test says no\"' >&2\nexit 1\n"
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	res := measureSmall(t, fake, 0)
	for _, r := range res.Runs {
		switch r.Contender {
		case Kubelet:
			if !strings.Contains(r.Error, "kubelet exited") || !strings.Contains(r.Error, "the bench test says no") {
				t.Fatalf("kubelet run error %q, want its exit and its own message", r.Error)
			}
		default:
			if r.Error != "" {
				t.Fatalf("%s run failed: %s", r.Contender, r.Error)
			}
		}
	}
}

// Interrupted (SIGTERM or SIGINT cancel the command's context), the bench
// stops at once: the runs so far are reported with a note, the node it
// started is stopped, and nothing of the bench's is left running.
func TestMeasureStopsWhenInterrupted(t *testing.T) {
	bin := benchBinaries(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var log testenv.Buffer
	done := make(chan struct{})
	var (
		res *Result
		err error
	)
	go func() {
		defer close(done)
		res, err = Measure(ctx, Options{Ns: []int{2}, Rounds: 3, Bounds: []int{0}, BinDir: bin,
			Out: filepath.Join(t.TempDir(), "result.json"), Settle: time.Second, Log: &log, WorkDir: t.TempDir()}, io.Discard)
	}()
	// Interrupt once the first round is under way.
	waitLog(t, &log, "Run done", done)
	cancel()
	select {
	case <-done:
	case <-time.After(3 * time.Minute):
		t.Fatalf("Measure still running 3 minutes after the interrupt:\n%s", log.String())
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Measure returned %v, want context.Canceled", err)
	}
	if res == nil || len(res.Runs) == 0 || len(res.Runs) >= 6 || !slices.ContainsFunc(res.Notes, func(n string) bool { return strings.Contains(n, "interrupted") }) {
		t.Fatalf("result after the interrupt: %+v", res)
	}
	if out, _ := exec.Command("pgrep", "-f", bin+"/nodelet").Output(); len(out) > 0 {
		t.Fatalf("processes of the bench's binaries left: %s", out)
	}
}

// waitLog waits until log contains s (or done closes first).
func waitLog(t *testing.T, log *testenv.Buffer, s string, done <-chan struct{}) {
	t.Helper()
	deadline := time.After(5 * time.Minute)
	for !strings.Contains(log.String(), s) {
		select {
		case <-done:
			t.Fatalf("Measure ended before %q:\n%s", s, log.String())
		case <-deadline:
			t.Fatalf("no %q in the bench's log:\n%s", s, log.String())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
