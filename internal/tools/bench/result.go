package bench

import (
	"fmt"
	"slices"
	"time"
)

// Contenders.
const (
	Nodelet = "nodelet"
	Floor   = "floor"
	Kubelet = "kubelet"
)

// Result is everything one bench run measured; it is written as JSON.
type Result struct {
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	Command  string    `json:"command"`
	Machine  Machine   `json:"machine"`
	// NodeLifecycle says how nodelet was run across rounds.
	NodeLifecycle  string          `json:"nodeLifecycle"`
	Runs           []Run           `json:"runs"`
	Summaries      []Summary       `json:"summaries"`
	Recommendation *Recommendation `json:"recommendation,omitempty"`
	Notes          []string        `json:"notes,omitempty"`
}

// Machine is what the numbers were measured on.
type Machine struct {
	Hostname   string `json:"hostname"`
	Kernel     string `json:"kernel"`
	CPUModel   string `json:"cpuModel"`
	CPUs       int    `json:"cpus"`
	MemTotal   uint64 `json:"memTotalBytes"`
	Containerd string `json:"containerd"`
	// LoadStart and LoadEnd are /proc/loadavg's 1, 5, 15 min averages: the
	// machine may be shared.
	LoadStart string `json:"loadStart"`
	LoadEnd   string `json:"loadEnd"`
}

// Run is one contender starting and stopping N pods once.
type Run struct {
	Contender string `json:"contender"`
	// Bound is the concurrency bound on RunPodSandbox (0 = unbounded).
	Bound int    `json:"bound"`
	N     int    `json:"n"`
	Round int    `json:"round"`
	Load  string `json:"load"`
	// WallRunning: first write → the last container running (CRI StartedAt).
	WallRunning Dur `json:"wallRunning"`
	// WallReady: first write → the last pod seen Running and Ready.
	WallReady Dur `json:"wallReady,omitempty"`
	// Running and Ready are the per-pod times from the write.
	Running []Dur `json:"running"`
	Ready   []Dur `json:"ready,omitempty"`
	// Teardown: manifests removed (floor: first stop call) → no container
	// or sandbox of the pods left in CRI.
	Teardown Dur `json:"teardown"`
	// ExitToStatus: a container's main process killed (CRI finishedAt) →
	// the agent's /pods no longer shows it running, for a sample of the
	// burst's containers one at a time (agents only).
	ExitToStatus []Dur        `json:"exitToStatus,omitempty"`
	Agent        *AgentCost   `json:"agent,omitempty"`
	Runtime      *RuntimeCost `json:"runtime,omitempty"`
	Idle         *IdleCost    `json:"idle,omitempty"`
	// Empty is the agent's memory on the settled node before the burst,
	// no pod running (measured with Idle).
	Empty *IdleCost `json:"empty,omitempty"`
	// Summary is /stats/summary timed with the burst running, after the
	// idle window (agents only).
	Summary   *SummaryLatency `json:"summary,omitempty"`
	Bus       *BusCost        `json:"bus,omitempty"`
	Breakdown *Breakdown      `json:"breakdown,omitempty"`
	Timelines []Timeline      `json:"timelines,omitempty"`
	// Leftovers counts sandboxes of an earlier round that had to be removed
	// before this one (0 when every teardown finished).
	Leftovers int `json:"leftovers,omitempty"`
	// MetricFamilies are the agent's /metrics families once its pods ran
	// (agents only; the coverage step).
	MetricFamilies []string `json:"metricFamilies,omitempty"`
	Error          string   `json:"error,omitempty"`
}

// AgentCost is what the agent's own processes (supervisor, bus, six
// daemons) used during the burst: first write → every pod Running+Ready.
type AgentCost struct {
	CPU          Dur            `json:"cpu"`
	CPUByProcess map[string]Dur `json:"cpuByProcess"`
	// PeakRSS is the peak of the processes' summed RSS, sampled.
	PeakRSS uint64 `json:"peakRSSBytes"`
	// HWMSum is the sum of the processes' own peaks (VmHWM) since they
	// started: an upper bound of the total's peak.
	HWMSum uint64 `json:"hwmSumBytes"`
}

// RuntimeCost is the container runtime's CPU during the burst: containerd
// (with the CNI plugins it ran) and the shims (with runc).
type RuntimeCost struct {
	CPU Dur `json:"cpu"`
}

// IdleCost is the agent at rest with Pods pods running.
type IdleCost struct {
	Pods   int `json:"pods"`
	Window Dur `json:"window"`
	CPU    Dur `json:"cpu"`
	// CPUPercent is of one core.
	CPUPercent float64 `json:"cpuPercent"`
	RSS        uint64  `json:"rssBytes"`
	// PSS is the processes' summed proportional set size.
	PSS uint64 `json:"pssBytes"`
	// ByProcess is each process's memory at the end of the window (its
	// HWM: its peak since it started).
	ByProcess map[string]ProcMemory `json:"byProcess,omitempty"`
}

// BusCost is what the pods' start put on the bus's streams (KV buckets and
// the events stream) from the first write until every pod was Ready.
type BusCost struct {
	Messages       int            `json:"messages"`
	Bytes          int64          `json:"bytes"`
	PerPodMessages float64        `json:"perPodMessages"`
	PerPodBytes    float64        `json:"perPodBytes"`
	ByStream       map[string]int `json:"byStream"`
	// TeardownMessages were stored while the pods were removed.
	TeardownMessages int `json:"teardownMessages"`
}

// Summary is one contender at one bound and N over its rounds.
type Summary struct {
	Contender string `json:"contender"`
	Bound     int    `json:"bound"`
	N         int    `json:"n"`
	Rounds    int    `json:"rounds"`
	Failed    int    `json:"failed,omitempty"`
	// Medians over rounds.
	WallRunning Dur `json:"wallRunning"`
	WallReady   Dur `json:"wallReady,omitempty"`
	Teardown    Dur `json:"teardown"`
	// Per-pod times pooled over rounds.
	Running Dist  `json:"running"`
	Ready   *Dist `json:"ready,omitempty"`
	// ExitToStatus pooled over rounds (agents only).
	ExitToStatus *Dist `json:"exitToStatus,omitempty"`
	// Ratios: this contender's WallRunning / the floor's, per round of the
	// same bound and N, and their median. Empty for the floor.
	Ratios    []float64 `json:"ratios,omitempty"`
	Ratio     float64   `json:"ratio,omitempty"`
	P50Ratios []float64 `json:"p50Ratios,omitempty"`
	P50Ratio  float64   `json:"p50Ratio,omitempty"`
	// Medians over rounds of the agent's cost.
	AgentCPU   Dur       `json:"agentCPU,omitempty"`
	PeakRSS    uint64    `json:"peakRSSBytes,omitempty"`
	RuntimeCPU Dur       `json:"runtimeCPU,omitempty"`
	BusMsgs    float64   `json:"busMessagesPerPod,omitempty"`
	BusBytes   float64   `json:"busBytesPerPod,omitempty"`
	Idle       *IdleCost `json:"idle,omitempty"`
	Empty      *IdleCost `json:"empty,omitempty"`
	// Summary is /stats/summary with the burst running (agents only).
	Summary *SummaryStats `json:"summary,omitempty"`
	// Breakdown over every pod of every round.
	Breakdown *Breakdown `json:"breakdown,omitempty"`
}

// Recommendation is the sandbox bound that starts a burst of new pods soonest
// (not the default: under a sustained churn a bound caps the sandboxes made
// a minute, docs/soak.md).
type Recommendation struct {
	Bound  int    `json:"bound"`
	N      int    `json:"n"`
	Reason string `json:"reason"`
}

// Summarize aggregates runs per contender, bound and N, pairing each round
// with the floor's same round for the ratios. Summaries are ordered by
// bound (in the order the bounds first ran), then N, then contender (in
// the order they first ran). tolerance is the breakdown's.
func Summarize(runs []Run, tolerance float64) []Summary {
	type key struct {
		c    string
		b, n int
	}
	var order []key
	groups := map[key][]Run{}
	floorWall := map[[3]int]time.Duration{}
	floorP50 := map[[3]int]time.Duration{}
	for _, r := range runs {
		k := key{r.Contender, r.Bound, r.N}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], r)
		if r.Contender == Floor && r.Error == "" {
			floorWall[[3]int{r.Bound, r.N, r.Round}] = r.WallRunning.D()
			floorP50[[3]int{r.Bound, r.N, r.Round}] = Percentile(durs(r.Running), 50)
		}
	}
	rank := func(get func(key) any) map[any]int {
		m := map[any]int{}
		for _, k := range order {
			if _, ok := m[get(k)]; !ok {
				m[get(k)] = len(m)
			}
		}
		return m
	}
	boundRank, contRank := rank(func(k key) any { return k.b }), rank(func(k key) any { return k.c })
	slices.SortStableFunc(order, func(x, y key) int {
		if d := boundRank[x.b] - boundRank[y.b]; d != 0 {
			return d
		}
		if x.n != y.n {
			return x.n - y.n
		}
		return contRank[x.c] - contRank[y.c]
	})
	var out []Summary
	for _, k := range order {
		s := Summary{Contender: k.c, Bound: k.b, N: k.n}
		var walls, readies, teardowns, cpus, rtcpus []time.Duration
		var running, ready, exits []time.Duration
		var msgs, bytes []float64
		var tls []Timeline
		var summaries []*SummaryLatency
		for _, r := range groups[k] {
			if r.Error != "" {
				s.Failed++
				continue
			}
			s.Rounds++
			walls = append(walls, r.WallRunning.D())
			if r.WallReady > 0 {
				readies = append(readies, r.WallReady.D())
			}
			teardowns = append(teardowns, r.Teardown.D())
			running = append(running, durs(r.Running)...)
			ready = append(ready, durs(r.Ready)...)
			exits = append(exits, durs(r.ExitToStatus)...)
			if r.Agent != nil {
				cpus = append(cpus, r.Agent.CPU.D())
				s.PeakRSS = max(s.PeakRSS, r.Agent.PeakRSS)
			}
			if r.Runtime != nil {
				rtcpus = append(rtcpus, r.Runtime.CPU.D())
			}
			if r.Bus != nil {
				msgs = append(msgs, r.Bus.PerPodMessages)
				bytes = append(bytes, r.Bus.PerPodBytes)
			}
			if r.Idle != nil && s.Idle == nil {
				s.Idle = r.Idle
			}
			if r.Empty != nil && s.Empty == nil {
				s.Empty = r.Empty
			}
			tls = append(tls, r.Timelines...)
			summaries = append(summaries, r.Summary)
			if k.c != Floor {
				rk := [3]int{r.Bound, r.N, r.Round}
				if fw, ok := floorWall[rk]; ok {
					s.Ratios = append(s.Ratios, Ratio(r.WallRunning.D(), fw))
					s.P50Ratios = append(s.P50Ratios, Ratio(Percentile(durs(r.Running), 50), floorP50[rk]))
				}
			}
		}
		s.WallRunning, s.WallReady, s.Teardown = Dur(Median(walls)), Dur(Median(readies)), Dur(Median(teardowns))
		s.Running = Distribution(running)
		if len(ready) > 0 {
			d := Distribution(ready)
			s.Ready = &d
		}
		if len(exits) > 0 {
			d := Distribution(exits)
			s.ExitToStatus = &d
		}
		s.Ratio, s.P50Ratio = Median(s.Ratios), Median(s.P50Ratios)
		s.AgentCPU, s.RuntimeCPU = Dur(Median(cpus)), Dur(Median(rtcpus))
		s.BusMsgs, s.BusBytes = Median(msgs), Median(bytes)
		s.Summary = summarizeSummary(summaries)
		if len(tls) > 0 {
			b := ComputeBreakdown(tls, tolerance)
			s.Breakdown = &b
		}
		out = append(out, s)
	}
	return out
}

func durs(ds []Dur) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.D()
	}
	return out
}

// wallSlack is how much longer than the best all-running wall time a bound
// may make the burst and still be recommended for its earlier pods.
const wallSlack = 0.10

// Recommend picks nodelet's sandbox bound: judged at N=20 when it was run
// (else the largest N), the bound with the lowest per-pod p50 among those
// whose all-running wall time is within 10 % of the best.
func Recommend(sums []Summary) *Recommendation {
	n := 0
	for _, s := range sums {
		if s.Contender == Nodelet && s.Rounds > 0 && (s.N == 20 || n != 20 && s.N > n) {
			n = s.N
		}
	}
	var cands []Summary
	for _, s := range sums {
		if s.Contender == Nodelet && s.Rounds > 0 && s.N == n {
			cands = append(cands, s)
		}
	}
	if len(cands) == 0 {
		return nil
	}
	best := slices.MinFunc(cands, func(a, b Summary) int { return cmpDur(a.WallRunning, b.WallRunning) })
	var ok []Summary
	for _, s := range cands {
		if float64(s.WallRunning) <= float64(best.WallRunning)*(1+wallSlack) {
			ok = append(ok, s)
		}
	}
	pick := slices.MinFunc(ok, func(a, b Summary) int {
		if c := cmpDur(a.Running.P50, b.Running.P50); c != 0 {
			return c
		}
		return a.Bound - b.Bound
	})
	return &Recommendation{Bound: pick.Bound, N: n, Reason: fmt.Sprintf(
		"at N=%d bound %s gives the lowest per-pod p50 (%s) of the bounds whose all-running wall time is within %.0f%% of the best (%s at bound %s); its wall time is %s",
		n, boundName(pick.Bound), pick.Running.P50, wallSlack*100, best.WallRunning, boundName(best.Bound), pick.WallRunning)}
}

func cmpDur(a, b Dur) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func boundName(b int) string {
	if b == 0 {
		return "unbounded"
	}
	return fmt.Sprint(b)
}
