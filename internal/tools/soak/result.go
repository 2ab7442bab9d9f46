package soak

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"sort"
	"strings"
	"time"
)

// Result is one soak of one agent; Report holds one per agent and is
// written as JSON.
type Result struct {
	Agent   string    `json:"agent"`
	Node    string    `json:"node"`
	Started time.Time `json:"started"`
	// Pods is the number of pods the node is kept at (its maxPods).
	Pods int `json:"pods"`
	// Lifecycles is how many pods were created on the node and then
	// deleted from the API (the agent confirmed them gone).
	Lifecycles int `json:"lifecycles"`
	// Restarts is the sum of the containers' restarts the API saw.
	Restarts int `json:"restarts"`
	// Warmup is the lifecycles of the churn left out of the growth
	// figures; ChurnBase the lifecycles (of the fill's pods) when the churn
	// began.
	Warmup    int `json:"warmupLifecycles"`
	ChurnBase int `json:"churnBaseLifecycles"`
	// FillSeconds is how long the node took to run Pods pods; ChurnSeconds
	// the churn; DrainSeconds from the drain's start to no pod in the API.
	FillSeconds  float64 `json:"fillSeconds"`
	ChurnSeconds float64 `json:"churnSeconds"`
	DrainSeconds float64 `json:"drainSeconds"`
	// Actions counts the churn's API actions by kind.
	Actions map[string]int `json:"actions"`
	// Samples is the series, every Options.Every.
	Samples []Sample `json:"samples"`
	// Growth is each series' growth per 1,000 lifecycles after warm-up.
	Growth []Growth `json:"growth"`
	// Before is the empty node before the fill, After the node once drained.
	Before *Rest `json:"before"`
	After  *Rest `json:"after,omitempty"`
	// Leftovers is what After has and Before had not; CleanAfterSeconds is
	// how long after the last pod left the API the node took to be clean
	// (-1: it was not, within Options.Settle).
	Leftovers         []Leftover `json:"leftovers"`
	CleanAfterSeconds float64    `json:"cleanAfterSeconds"`
	// PodStart is the start latency of the pods bound to the node during
	// the churn: from binding to first container started.
	PodStart *Latency `json:"podStart,omitempty"`
	// Steps are the agent's own timings of a pod's steps over the churn
	// (stepFamilies, from its /metrics at the churn's start and end).
	Steps []Step `json:"steps,omitempty"`
	// Events are the node's events, produced and received.
	Events Events `json:"events"`
	// Errors are what went wrong on the way (a sample that could not be
	// taken, an action the API refused); the run goes on.
	Errors []string `json:"errors,omitempty"`
}

// Latency sums up durations, in seconds.
type Latency struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

// latencyOf is v's percentiles (nearest rank); nil for no values.
func latencyOf(v []float64) *Latency {
	if len(v) == 0 {
		return nil
	}
	v = slices.Clone(v)
	slices.Sort(v)
	rank := func(q float64) float64 { return v[max(0, int(math.Ceil(q*float64(len(v))))-1)] }
	return &Latency{N: len(v), P50: rank(0.5), P90: rank(0.9), P99: rank(0.99), Max: v[len(v)-1]}
}

func (l *Latency) String() string {
	if l == nil {
		return "-"
	}
	return fmt.Sprintf("%.0f/%.0f/%.0f s", l.P50, l.P99, l.Max)
}

// Report is what a soak writes: one Result per agent.
type Report struct {
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	Command  string    `json:"command"`
	Load     string    `json:"load"`
	Results  []*Result `json:"results"`
}

// Sample is the node at one moment.
type Sample struct {
	// At is the time since the soak started, in seconds.
	At    float64 `json:"t"`
	Phase string  `json:"phase"`
	// Lifecycles so far, and the pods bound to the node and not finished.
	Lifecycles int `json:"lifecycles"`
	Pods       int `json:"pods"`
	// Procs are the agent's processes (and, named as such, containerd and
	// kube-proxy, which are not the agent's).
	Procs map[string]Proc `json:"procs"`
	Node  Counts          `json:"node"`
	// Bus is the bus store's streams (nodelet only), by stream name.
	Bus    map[string]Stream `json:"bus,omitempty"`
	Events *Events           `json:"events,omitempty"`
}

// Proc is one process's cost at a moment. Goroutines is -1 where the
// process does not tell.
type Proc struct {
	PID        int    `json:"pid"`
	Agent      bool   `json:"agent"`
	RSS        uint64 `json:"rssBytes"`
	PSS        uint64 `json:"pssBytes"`
	PSSAnon    uint64 `json:"pssAnonBytes"`
	FDs        int    `json:"fds"`
	Threads    int    `json:"threads"`
	Goroutines int    `json:"goroutines"`
	// CPU is the process's user and system time since it started, seconds.
	CPU float64 `json:"cpuSeconds,omitempty"`
	// DiskWrite and DiskRead are the bytes the process sent to or fetched
	// from the storage layer since it started (/proc/<pid>/io write_bytes
	// less cancelled_write_bytes, and read_bytes): page-cache reads are
	// not in them, buffered writes are, counted as the pages are dirtied.
	// IO says the two were read (they may well be 0).
	DiskWrite uint64 `json:"diskWriteBytes,omitempty"`
	DiskRead  uint64 `json:"diskReadBytes,omitempty"`
	IO        bool   `json:"io,omitempty"`
}

// Counts are the node's resources that pods come and go with.
type Counts struct {
	Containers        int `json:"containers"`
	ContainersRunning int `json:"containersRunning"`
	Sandboxes         int `json:"sandboxes"`
	SandboxesReady    int `json:"sandboxesReady"`
	Shims             int `json:"shims"`
	// Mounts are those under the node's and its containerd's dirs.
	Mounts int `json:"mounts"`
	// PodCgroups are pod<uid> cgroups under the node's cgroup root (memory
	// hierarchy), Cgroups every cgroup there.
	PodCgroups int `json:"podCgroups"`
	Cgroups    int `json:"cgroups"`
	// IPs are host-local's leases of the node's network.
	IPs int `json:"ips"`
	// IPTables counts the rules in the node's network namespace, CNIRules
	// those of the CNI plugins' chains (CNI-*).
	IPTables int `json:"iptablesRules"`
	CNIRules int `json:"cniRules"`
	// Veths are the ports of the pods' bridge.
	Veths int `json:"veths"`
	// PodLogDirs and PodDirs are the entries of the pod log dir and of the
	// agent's pods dir (volumes).
	PodLogDirs int `json:"podLogDirs"`
	PodDirs    int `json:"podDirs"`
	// CNINetns counts /run/netns/cni-*: machine-wide, other tests' too.
	CNINetns int `json:"cniNetnsMachineWide"`
	// BusKeys is the live keys of every bucket (nodelet; only at rest).
	BusKeys int `json:"busKeys,omitempty"`
}

// Stream is one bus stream's size: its bytes on disk, and from JetStream
// its messages and subjects (0 where the tap credential cannot ask).
type Stream struct {
	DiskBytes int64  `json:"diskBytes"`
	Bytes     uint64 `json:"bytes"`
	Msgs      uint64 `json:"msgs"`
	Subjects  uint64 `json:"subjects"`
	LastSeq   uint64 `json:"lastSeq"`
}

// Rest is the node at rest: the figures of a sample, and the inventory of
// what pods leave behind when they go.
type Rest struct {
	Sample    Sample    `json:"sample"`
	Inventory Inventory `json:"inventory"`
}

// Events tallies the node's events. For nodelet, every event produced on
// the bus ends either posted to the API or dropped for a counted reason,
// and what was posted the API received: Produced = Posted + ΣDropped and
// Posted ≤ Received ≤ Posted + Dropped["spam_filter"]. Received may exceed
// Posted by events the spam filter skipped: client-go's correlator counts
// an event before its spam filter decides (EventCorrelate: eventObserve,
// then filterFunc), so the next repeat that is posted carries the skipped
// ones in its count, the kubelet's as nodelet's. (The kubelet tells
// neither Produced nor Posted: only Received.)
type Events struct {
	// Produced is the events stored on the producers' streams (their last
	// sequence: all ever stored, also those aged out since).
	Produced int64 `json:"produced"`
	// Posted and Dropped are nodelet-status's counters.
	Posted  int64            `json:"posted"`
	Dropped map[string]int64 `json:"dropped"`
	// Received is the sum of the counts of the node's Event objects in the
	// API (source kubelet, host the node), each at the highest count seen;
	// Objects the number of them.
	Received int64 `json:"received"`
	Objects  int   `json:"objects"`
	// ByReason is Received by the events' reason.
	ByReason map[string]int64 `json:"byReason"`
}

// DroppedTotal is the sum of Dropped.
func (e Events) DroppedTotal() int64 {
	var n int64
	for _, v := range e.Dropped {
		n += v
	}
	return n
}

// Mismatch says what does not add up, or "" when it all does (or, with no
// producer count, when there is nothing to check).
func (e Events) Mismatch() string {
	if e.Produced == 0 && e.Posted == 0 {
		return ""
	}
	var out []string
	if d := e.Produced - e.Posted - e.DroppedTotal(); d != 0 {
		out = append(out, fmt.Sprintf("produced %d != posted %d + dropped %d (%+d unaccounted)", e.Produced, e.Posted, e.DroppedTotal(), d))
	}
	if spam := e.Dropped["spam_filter"]; e.Received < e.Posted || e.Received > e.Posted+spam {
		out = append(out, fmt.Sprintf("received %d outside posted %d to posted + spam-filtered %d", e.Received, e.Posted, e.Posted+spam))
	}
	return strings.Join(out, "; ")
}

// Leftover is one kind of thing the drained node still has.
type Leftover struct {
	Kind  string   `json:"kind"`
	Items []string `json:"items"`
}

// agentNames are the agent's processes of a sample, sorted.
func (s Sample) agentNames() []string {
	var out []string
	for name, p := range s.Procs {
		if p.Agent {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// ReadReports reads the result.json of past soaks (one agent's run each,
// say, from two sessions) as one Report, its growth figures computed again
// by this build's measure with bounds and, if warmup > 0, that warm-up.
func ReadReports(paths []string, bounds Bounds, warmup int) (*Report, error) {
	out := &Report{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		var rep Report
		if err := json.Unmarshal(b, &rep); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		if len(rep.Results) == 0 {
			return nil, fmt.Errorf("%s: no soak results", p)
		}
		out.Command = strings.TrimPrefix(out.Command+"; "+rep.Command, "; ")
		out.Load = strings.TrimPrefix(out.Load+"; "+rep.Load, "; ")
		if out.Started.IsZero() || rep.Started.Before(out.Started) {
			out.Started = rep.Started
		}
		if rep.Finished.After(out.Finished) {
			out.Finished = rep.Finished
		}
		for _, res := range rep.Results {
			if warmup > 0 {
				res.Warmup = warmup
			}
			res.regrow(bounds)
			out.Results = append(out.Results, res)
		}
	}
	return out, nil
}

// regrow computes the growth figures again. A result written before
// ChurnBase was kept takes the churn's first sample's lifecycles for it.
func (res *Result) regrow(bounds Bounds) {
	base := res.ChurnBase
	if base == 0 {
		for _, s := range res.Samples {
			if s.Phase == PhaseChurn {
				base = s.Lifecycles
				break
			}
		}
	}
	res.Growth = ComputeGrowth(res.Samples, base+res.Warmup, bounds)
}
