package soak

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/cluster"
	"github.com/nodelet/nodelet/internal/testenv"
)

// TestShortSoak soaks a one-node nodelet cluster for a few dozen
// lifecycles at a few pods: every sample has every daemon's figures and the
// node's counts, nothing is left once the node is drained, and every event
// produced on the bus reached the API or was dropped for a counted reason.
// A whole cluster for about four minutes: too long for scripts/test.sh's
// budget, so it runs only with NODELET_SOAK_TEST=1 (as root).
func TestShortSoak(t *testing.T) {
	if os.Getenv("NODELET_SOAK_TEST") != "1" {
		t.Skip("a cluster for minutes: set NODELET_SOAK_TEST=1 to run it")
	}
	testenv.RequiresRoot(t)
	bins := testBinaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	out := t.TempDir()
	rep, err := Run(ctx, Options{
		Agents: []cluster.Agent{cluster.Nodelet}, Bins: bins, Work: filepath.Join(t.TempDir(), "work"),
		Pods: 12, Lifecycles: 30, Warmup: 5, Every: 3 * time.Second, Quiet: 5 * time.Second, Settle: time.Minute,
		FillTimeout: 5 * time.Minute, Out: out, LockWait: 30 * time.Minute,
		Log: func(f string, a ...any) { t.Logf(f, a...) },
	})
	var b strings.Builder
	if rep != nil {
		rep.Print(&b)
	}
	t.Log(b.String())
	if err != nil {
		t.Fatal(err)
	}
	res := rep.Results[0]
	if res.Lifecycles < 30 {
		t.Errorf("%d lifecycles, want 30 at least", res.Lifecycles)
	}
	churn := 0
	for _, s := range res.Samples {
		if s.Phase != PhaseChurn {
			continue
		}
		churn++
		for _, d := range append([]string{"supervisor"}, bus.Daemons...) {
			p, ok := s.Procs[d]
			if !ok || p.PSS == 0 || p.FDs == 0 {
				t.Fatalf("sample at %.0fs: %s missing or empty: %+v", s.At, d, p)
			}
			if d != "supervisor" && p.Goroutines <= 0 {
				t.Errorf("sample at %.0fs: %s: no goroutine count", s.At, d)
			}
		}
		if s.Node.Sandboxes == 0 || s.Node.Mounts == 0 || s.Node.IPs == 0 || s.Node.PodCgroups == 0 || s.Node.Veths == 0 {
			t.Errorf("sample at %.0fs with pods running: %+v", s.At, s.Node)
		}
		if len(s.Bus) == 0 || s.Bus["KV_"+bus.BucketStatus].DiskBytes == 0 {
			t.Errorf("sample at %.0fs: bus %+v", s.At, s.Bus)
		}
	}
	if churn < 2 {
		t.Errorf("%d samples in the churn", churn)
	}
	if len(res.Leftovers) > 0 {
		t.Errorf("left after the drain: %+v", res.Leftovers)
	}
	if res.Events.Produced == 0 || res.Events.Received == 0 {
		t.Errorf("no events counted: %+v", res.Events)
	}
	if m := res.Events.Mismatch(); m != "" {
		t.Errorf("events: %s", m)
	}
	if len(res.Growth) == 0 {
		t.Error("no growth figures")
	}
	if l := res.PodStart; l == nil || l.N == 0 || l.Max < l.P50 {
		t.Errorf("pod start latency in the churn: %+v", l)
	}
	for _, name := range []string{"result.json", "nodelet.png"} {
		if _, err := os.Stat(filepath.Join(out, name)); err != nil {
			t.Error(err)
		}
	}
}

// testBinaries builds (or takes from the cache) what a cluster runs.
func testBinaries(t *testing.T) cluster.Binaries {
	t.Helper()
	var b cluster.Binaries
	for name, dst := range map[string]*string{"kube-controller-manager": &b.KubeControllerManager,
		"kube-scheduler": &b.KubeScheduler, "kube-proxy": &b.KubeProxy} {
		p, err := testenv.Tool(name)
		if err != nil {
			t.Fatal(err)
		}
		*dst = p
	}
	b.Nodelet = filepath.Join(t.TempDir(), "bin")
	if err := testenv.BuildBinaries(b.Nodelet); err != nil {
		t.Fatal(err)
	}
	return b
}
