package soak

import (
	"math"
	"sort"
	"strings"
)

// Phases of a soak, as samples name them.
const (
	PhaseBefore = "before" // the empty node, before the fill
	PhaseFill   = "fill"
	PhaseChurn  = "churn"
	PhaseDrain  = "drain"
	PhaseAfter  = "after" // the drained node
)

// Growth is how one series grew with the lifecycles of the churn after
// warm-up: the least-squares slope of value against lifecycles, per 1,000
// (a regression over every sample rather than last minus first, so that
// one sample caught before a GC does not decide it), and where it stood.
//
// The bound is held against the slope over the window's last half (Late),
// not over the whole window: a store or cache that fills to its limit (the
// bus keeps an hour of deleted keys' history, so its store fills for the
// first hour of churn at any rate) grows over the whole window and not at
// its end, while a leak grows at the same rate in both.
type Growth struct {
	Series  string  `json:"series"`
	Per1000 float64 `json:"per1000"`
	// Late is the slope over the samples in the second half of the
	// window's lifecycles, per 1,000, from LateSamples samples; it is
	// Per1000 when that half has fewer than three.
	Late        float64 `json:"late"`
	LateSamples int     `json:"lateSamples"`
	// First and Last are the means of the window's first and last three
	// samples; Min and Max its extremes.
	First   float64 `json:"first"`
	Last    float64 `json:"last"`
	Min     float64 `json:"min"`
	Max     float64 `json:"max"`
	Samples int     `json:"samples"`
	// Bound is the stated bound per 1,000 lifecycles (0: none), Over that
	// Late exceeds it.
	Bound float64 `json:"bound,omitempty"`
	Over  bool    `json:"over,omitempty"`
}

// Bounds are the growth allowed per 1,000 lifecycles after warm-up, for
// each of the agent's processes.
type Bounds struct {
	// Memory is for PSS and RSS, in bytes. Default: 2 MiB.
	Memory float64
	// Goroutines. Default: 5.
	Goroutines float64
	// FDs (open file descriptors). Default: 5.
	FDs float64
}

func (b Bounds) withDefaults() Bounds {
	if b.Memory == 0 {
		b.Memory = 2 << 20
	}
	if b.Goroutines == 0 {
		b.Goroutines = 5
	}
	if b.FDs == 0 {
		b.FDs = 5
	}
	return b
}

// Series flattens a sample into named values: proc.<name>.<figure> for
// each process, agent.<figure> summed over the agent's processes,
// node.<count> and bus.<stream>.<figure>. Goroutines a process does not
// tell are left out.
func (s Sample) Series() map[string]float64 {
	out := map[string]float64{"pods": float64(s.Pods)}
	var pss, rss, fds, gor float64
	for name, p := range s.Procs {
		k := "proc." + name + "."
		out[k+"pss"] = float64(p.PSS)
		out[k+"rss"] = float64(p.RSS)
		out[k+"fds"] = float64(p.FDs)
		out[k+"threads"] = float64(p.Threads)
		if p.Goroutines >= 0 {
			out[k+"goroutines"] = float64(p.Goroutines)
		}
		if p.Agent {
			pss += float64(p.PSS)
			rss += float64(p.RSS)
			fds += float64(p.FDs)
			gor += float64(max(p.Goroutines, 0))
		}
	}
	out["agent.pss"], out["agent.rss"], out["agent.fds"], out["agent.goroutines"] = pss, rss, fds, gor
	for k, v := range s.Node.values() {
		out["node."+k] = v
	}
	var disk float64
	for name, st := range s.Bus {
		out["bus."+name+".diskBytes"] = float64(st.DiskBytes)
		out["bus."+name+".msgs"] = float64(st.Msgs)
		disk += float64(st.DiskBytes)
	}
	if len(s.Bus) > 0 {
		out["bus.total.diskBytes"] = disk
	}
	return out
}

func (c Counts) values() map[string]float64 {
	return map[string]float64{
		"containers": float64(c.Containers), "containersRunning": float64(c.ContainersRunning),
		"sandboxes": float64(c.Sandboxes), "sandboxesReady": float64(c.SandboxesReady), "shims": float64(c.Shims),
		"mounts": float64(c.Mounts), "podCgroups": float64(c.PodCgroups), "cgroups": float64(c.Cgroups),
		"ips": float64(c.IPs), "iptablesRules": float64(c.IPTables), "cniRules": float64(c.CNIRules),
		"veths": float64(c.Veths), "podLogDirs": float64(c.PodLogDirs), "podDirs": float64(c.PodDirs),
		"cniNetnsMachineWide": float64(c.CNINetns),
	}
}

// ComputeGrowth fits every series over the churn's samples taken at or
// after warmup lifecycles. A series needs three samples at two different
// lifecycle counts at least; the agent's processes' memory, goroutines and
// fds are held to bounds.
func ComputeGrowth(samples []Sample, warmup int, bounds Bounds) []Growth {
	bounds = bounds.withDefaults()
	var window []Sample
	for _, s := range samples {
		if s.Phase == PhaseChurn && s.Lifecycles >= warmup {
			window = append(window, s)
		}
	}
	agent := map[string]bool{}
	xs := make([]float64, len(window))
	series := map[string][]point{}
	for i, s := range window {
		xs[i] = float64(s.Lifecycles)
		for name, p := range s.Procs {
			agent[name] = agent[name] || p.Agent
		}
		for k, v := range s.Series() {
			series[k] = append(series[k], point{xs[i], v})
		}
	}
	var out []Growth
	for k, pts := range series {
		g, ok := fit(pts)
		if !ok {
			continue
		}
		g.Series = k
		g.Late, g.LateSamples = g.Per1000, g.Samples
		if late, ok := fit(lateHalf(pts)); ok {
			g.Late, g.LateSamples = late.Per1000, late.Samples
		}
		if name, fig, ok := procSeries(k); ok && agent[name] {
			switch fig {
			case "pss", "rss":
				g.Bound = bounds.Memory
			case "goroutines":
				g.Bound = bounds.Goroutines
			case "fds":
				g.Bound = bounds.FDs
			}
			g.Over = g.Bound > 0 && g.Late > g.Bound
		}
		out = append(out, g)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Series < out[j].Series })
	return out
}

type point struct{ x, y float64 }

// lateHalf is the points at or past the middle of pts' lifecycles (pts
// are in lifecycle order).
func lateHalf(pts []point) []point {
	mid := (pts[0].x + pts[len(pts)-1].x) / 2
	i := sort.Search(len(pts), func(i int) bool { return pts[i].x >= mid })
	return pts[i:]
}

// fit is the least-squares line through pts, as a Growth without its name.
func fit(pts []point) (Growth, bool) {
	if len(pts) < 3 {
		return Growth{}, false
	}
	var sx, sy float64
	g := Growth{Samples: len(pts), Min: math.Inf(1), Max: math.Inf(-1)}
	for _, p := range pts {
		sx += p.x
		sy += p.y
		g.Min, g.Max = math.Min(g.Min, p.y), math.Max(g.Max, p.y)
	}
	n := float64(len(pts))
	mx, my := sx/n, sy/n
	var sxy, sxx float64
	for _, p := range pts {
		sxy += (p.x - mx) * (p.y - my)
		sxx += (p.x - mx) * (p.x - mx)
	}
	if sxx == 0 {
		return Growth{}, false
	}
	g.Per1000 = 1000 * sxy / sxx
	k := min(3, len(pts))
	for i := range k {
		g.First += pts[i].y / float64(k)
		g.Last += pts[len(pts)-1-i].y / float64(k)
	}
	return g, true
}

// procSeries splits proc.<name>.<figure>.
func procSeries(k string) (name, figure string, ok bool) {
	rest, ok := strings.CutPrefix(k, "proc.")
	if !ok {
		return "", "", false
	}
	i := strings.LastIndexByte(rest, '.')
	if i < 0 {
		return "", "", false
	}
	return rest[:i], rest[i+1:], true
}
