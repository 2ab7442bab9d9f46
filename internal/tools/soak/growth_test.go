package soak

import (
	"math"
	"testing"
)

// churnSamples makes n churn samples, one every 100 lifecycles, with
// runtime's PSS, goroutines and fds given by f(lifecycles).
func churnSamples(n int, f func(l float64) (pss, gor, fds float64)) []Sample {
	var out []Sample
	for i := range n {
		l := i * 100
		pss, gor, fds := f(float64(l))
		out = append(out, Sample{Phase: PhaseChurn, Lifecycles: l, Pods: 110, Procs: map[string]Proc{
			"runtime":    {Agent: true, PSS: uint64(pss), RSS: uint64(pss), Goroutines: int(gor), FDs: int(fds)},
			"containerd": {PSS: uint64(pss) * 10, Goroutines: -1, FDs: 10},
		}})
	}
	return out
}

func growthOf(t *testing.T, gs []Growth, series string) Growth {
	t.Helper()
	for _, g := range gs {
		if g.Series == series {
			return g
		}
	}
	t.Fatalf("no growth for %s in %+v", series, gs)
	return Growth{}
}

func TestGrowthSlope(t *testing.T) {
	// 3 MiB, 7 goroutines and 1 fd per 1,000 lifecycles, after a warm-up
	// in which everything grows ten times as fast.
	samples := churnSamples(30, func(l float64) (float64, float64, float64) {
		if l < 500 {
			return 50<<20 + 30*l*(3<<20)/1000, 100 + 70*l/1000, 20 + 10*l/1000
		}
		base := 50<<20 + 30*500*(3<<20)/1000.0
		return base + (l-500)*(3<<20)/1000, 100 + 35 + (l-500)*7/1000, 25 + (l-500)/1000
	})
	// Samples of other phases do not count, whatever they say.
	samples = append(samples, Sample{Phase: PhaseDrain, Lifecycles: 5000, Procs: map[string]Proc{"runtime": {Agent: true, PSS: 1 << 40}}})
	gs := ComputeGrowth(samples, 500, Bounds{})
	for _, c := range []struct {
		series string
		want   float64
		over   bool
	}{
		{"proc.runtime.pss", 3 << 20, true},
		{"proc.runtime.rss", 3 << 20, true},
		{"proc.runtime.goroutines", 7, true},
		{"proc.runtime.fds", 1, false},
		{"agent.pss", 3 << 20, false},
		// containerd is not the agent's: no bound.
		{"proc.containerd.pss", 30 << 20, false},
	} {
		g := growthOf(t, gs, c.series)
		// Goroutines and fds are whole numbers: a tenth of tolerance.
		if math.Abs(g.Per1000-c.want) > math.Max(0.1, 1e-6*c.want) || g.Over != c.over {
			t.Errorf("%s: %+v, want %.0f per 1000, over %v", c.series, g, c.want, c.over)
		}
		if g.Samples != 25 {
			t.Errorf("%s: %d samples, want the 25 after warm-up", c.series, g.Samples)
		}
	}
	if _, ok := func() (Growth, bool) {
		for _, g := range gs {
			if g.Series == "proc.containerd.goroutines" {
				return g, true
			}
		}
		return Growth{}, false
	}(); ok {
		t.Error("containerd's unknown goroutines (-1) were fitted")
	}
}

func TestGrowthFlatAndNoisy(t *testing.T) {
	// A GC sawtooth around a flat line: no growth beyond the bound.
	samples := churnSamples(40, func(l float64) (float64, float64, float64) {
		saw := float64(int(l/100)%4) * (1 << 20)
		return 80<<20 + saw, 200 + float64(int(l/100)%3), 30
	})
	gs := ComputeGrowth(samples, 0, Bounds{})
	g := growthOf(t, gs, "proc.runtime.pss")
	if g.Over || math.Abs(g.Per1000) > 0.5*(1<<20) {
		t.Errorf("flat sawtooth: %+v", g)
	}
	if g.Min != 80<<20 || g.Max != 83<<20 {
		t.Errorf("min/max %v/%v", g.Min, g.Max)
	}
	if f := growthOf(t, gs, "proc.runtime.fds"); f.Per1000 != 0 || f.First != 30 || f.Last != 30 {
		t.Errorf("fds: %+v", f)
	}
}

func TestGrowthHeldToTheLastHalf(t *testing.T) {
	// 60 samples, lifecycles 0 to 5,900.
	for _, c := range []struct {
		name        string
		pss         func(l float64) float64
		whole, late float64 // MiB per 1,000, ±0.5
		over        bool
	}{
		// A store that fills at 20 MiB per 1,000 lifecycles and levels off
		// at 2,400 (the bus's hour of history): over the bound over the
		// window, not at its end.
		{"fills then levels", func(l float64) float64 {
			return 70<<20 + min(l, 2400)*(20<<20)/1000
		}, 7.6, 0, false},
		// A leak grows in both halves alike.
		{"steady leak", func(l float64) float64 { return 70<<20 + l*(3<<20)/1000 }, 3, 3, true},
		// A leak that starts halfway is under the bound over the window and
		// over it at the end.
		{"leak from halfway", func(l float64) float64 {
			return 70<<20 + max(0, l-2950)*(3<<20)/1000
		}, 1.5, 3, true},
	} {
		samples := churnSamples(60, func(l float64) (float64, float64, float64) { return c.pss(l), 100, 20 })
		g := growthOf(t, ComputeGrowth(samples, 0, Bounds{}), "proc.runtime.pss")
		if math.Abs(g.Per1000/(1<<20)-c.whole) > 0.5 || math.Abs(g.Late/(1<<20)-c.late) > 0.5 || g.Over != c.over {
			t.Errorf("%s: whole %.2f late %.2f MiB/1k over %v, want %.1f, %.1f, %v",
				c.name, g.Per1000/(1<<20), g.Late/(1<<20), g.Over, c.whole, c.late, c.over)
		}
		if g.Samples != 60 || g.LateSamples != 30 {
			t.Errorf("%s: %d samples, %d in the last half; want 60 and 30", c.name, g.Samples, g.LateSamples)
		}
	}
}

func TestGrowthNeedsSpread(t *testing.T) {
	// Fewer than three samples, or all at one lifecycle count: no figure.
	if gs := ComputeGrowth(churnSamples(2, func(float64) (float64, float64, float64) { return 1, 1, 1 }), 0, Bounds{}); len(gs) != 0 {
		t.Errorf("two samples: %+v", gs)
	}
	same := churnSamples(5, func(float64) (float64, float64, float64) { return 1, 1, 1 })
	for i := range same {
		same[i].Lifecycles = 700
	}
	if gs := ComputeGrowth(same, 0, Bounds{}); len(gs) != 0 {
		t.Errorf("one lifecycle count: %+v", gs)
	}
}

func TestSeries(t *testing.T) {
	s := Sample{Pods: 3, Procs: map[string]Proc{
		"bus":        {Agent: true, PSS: 10, RSS: 20, FDs: 3, Goroutines: 40},
		"supervisor": {Agent: true, PSS: 5, RSS: 6, FDs: 2, Goroutines: -1},
		"containerd": {PSS: 1000, RSS: 1000, FDs: 100, Goroutines: -1},
	}, Node: Counts{Mounts: 7}, Bus: map[string]Stream{"KV_a": {DiskBytes: 100, Msgs: 2}, "KV_b": {DiskBytes: 50}}}
	v := s.Series()
	for k, want := range map[string]float64{"agent.pss": 15, "agent.rss": 26, "agent.fds": 5, "agent.goroutines": 40,
		"proc.bus.goroutines": 40, "node.mounts": 7, "bus.KV_a.msgs": 2, "bus.total.diskBytes": 150, "pods": 3} {
		if v[k] != want {
			t.Errorf("%s = %v, want %v", k, v[k], want)
		}
	}
	if _, ok := v["proc.supervisor.goroutines"]; ok {
		t.Error("the supervisor's unknown goroutines are a series")
	}
}
