package bench

import (
	"math"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/schemas"
)

// Timeline is one pod's start, as moments on the machine's clock. The
// bus moments are the envelope (or event) times the daemons stamped; a zero
// moment was not seen.
type Timeline struct {
	// Pod is namespace/name.
	Pod string `json:"pod"`
	UID string `json:"uid,omitempty"`
	// Written: the manifest was renamed into the static pod dir (nodelet),
	// or the first CRI call was made (floor).
	Written time.Time `json:"written"`
	// Desired: sources' first PodDesired put for the UID.
	Desired time.Time `json:"desired,omitzero"`
	// Admitted: admission's first AdmissionVerdict put that admits it.
	Admitted time.Time `json:"admitted,omitzero"`
	// SandboxReady: the runtime had a ready sandbox: the earliest of its
	// first observed state with a ready sandbox and its "Pulled"/"Created"
	// events, which follow RunPodSandbox at once (floor: RunPodSandbox
	// returned).
	SandboxReady time.Time `json:"sandboxReady,omitzero"`
	// Started: the runtime's "Started" event, stamped when StartContainer
	// returned (floor: StartContainer returned).
	Started time.Time `json:"started,omitzero"`
	// Observed: the runtime's first PodObserved put with every container
	// running.
	Observed time.Time `json:"observed,omitzero"`
	// Status: status's first PodStatusRecord put with phase Running and
	// condition Ready true.
	Status time.Time `json:"status,omitzero"`
	// Running: when CRI says the container started (ContainerStatus
	// StartedAt), measured by the runtime itself.
	Running time.Time `json:"running,omitzero"`
	// Measured is the end of the start measured independently of the
	// points above: when the bench's status watch received Running+Ready
	// (nodelet), CRI StartedAt (floor).
	Measured time.Time `json:"measured,omitzero"`
}

// StageDef names one stage of a pod start.
type StageDef struct {
	Name string
	What string
}

// Stages are the consecutive stages of a pod start; stage i ends at point
// i+1 of Timeline.points.
var Stages = []StageDef{
	{"sources", "manifest written → desired put (file watch, decode, defaults, put)"},
	{"admission", "desired → admission verdict put"},
	{"sandbox", "admitted → sandbox ready (pod worker, sandbox bound, RunPodSandbox with CNI)"},
	{"container", "sandbox ready → container started (image check, CreateContainer, StartContainer)"},
	{"observed", "started → observed state with the container running put (runtime)"},
	{"status", "observed → status Running+Ready put (status, prober)"},
}

// points lists the moments in stage order, Written first.
func (t Timeline) points() []time.Time {
	return []time.Time{t.Written, t.Desired, t.Admitted, t.SandboxReady, t.Started, t.Observed, t.Status}
}

// StageDurations splits the pod's start into Stages. A moment not seen
// (the floor has no desired, admitted, observed or status) makes its stage
// zero and the next one longer; a moment earlier than the one before (two
// processes stamping within the same millisecond) is taken as the one
// before. So the stages always add up to end − Written, where end is the
// last moment seen. missing counts the unseen moments before end.
func (t Timeline) StageDurations() (stages []time.Duration, end time.Time, missing int) {
	pts := t.points()
	prev := t.Written
	last := len(pts) - 1
	for last > 0 && pts[last].IsZero() {
		last--
	}
	stages = make([]time.Duration, len(pts)-1)
	for i := 1; i < len(pts); i++ {
		p := pts[i]
		if p.IsZero() {
			if i < last {
				missing++
			}
			continue
		}
		if p.Before(prev) {
			p = prev
		}
		stages[i-1] = p.Sub(prev)
		prev = p
	}
	return stages, prev, missing
}

// StageStat is one stage over many pods.
type StageStat struct {
	Name string `json:"name"`
	What string `json:"what"`
	Mean Dur    `json:"mean"`
	P50  Dur    `json:"p50"`
	P99  Dur    `json:"p99"`
}

// Breakdown is where the time of a pod start goes, over many pods.
type Breakdown struct {
	Pods int `json:"pods"`
	// Incomplete pods lacked a moment (counted as a zero stage).
	Incomplete int         `json:"incomplete"`
	Stages     []StageStat `json:"stages"`
	// Sum of the stage means: the mean of end − written.
	Sum Dur `json:"sum"`
	// Measured is the mean start time measured independently (Timeline.Measured).
	Measured Dur `json:"measured"`
	// Deviation is |Sum − Measured| / Measured; Within says it is at most
	// the tolerance (the breakdown accounts for the whole start).
	Deviation float64 `json:"deviation"`
	Within    bool    `json:"within"`
}

// ComputeBreakdown aggregates the timelines. Stage means add up to the mean
// total exactly, so Sum is also the mean of end − written.
func ComputeBreakdown(ts []Timeline, tolerance float64) Breakdown {
	b := Breakdown{Stages: make([]StageStat, len(Stages))}
	per := make([][]time.Duration, len(Stages))
	var measured []time.Duration
	for _, t := range ts {
		stages, _, missing := t.StageDurations()
		b.Pods++
		if missing > 0 {
			b.Incomplete++
		}
		for i, d := range stages {
			per[i] = append(per[i], d)
		}
		if !t.Measured.IsZero() {
			measured = append(measured, t.Measured.Sub(t.Written))
		}
	}
	var sum time.Duration
	for i, s := range Stages {
		m := Mean(per[i])
		sum += m
		b.Stages[i] = StageStat{Name: s.Name, What: s.What, Mean: Dur(m), P50: Dur(Percentile(per[i], 50)), P99: Dur(Percentile(per[i], 99))}
	}
	b.Sum = Dur(sum)
	b.Measured = Dur(Mean(measured))
	if b.Measured > 0 {
		b.Deviation = math.Abs(float64(b.Sum-b.Measured)) / float64(b.Measured)
		b.Within = b.Deviation <= tolerance
	}
	return b
}

// timelines builds the bus moments of pods from what the daemons put on the
// bus, fed in any order.
type timelines struct {
	byUID map[string]*Timeline
}

func newTimelines() *timelines { return &timelines{byUID: map[string]*Timeline{}} }

func (b *timelines) of(uid string) *Timeline {
	t := b.byUID[uid]
	if t == nil {
		t = &Timeline{UID: uid}
		b.byUID[uid] = t
	}
	return t
}

// earliest sets *dst to at when it is earlier than what *dst holds.
func earliest(dst *time.Time, at time.Time) {
	if at.IsZero() {
		return
	}
	if dst.IsZero() || at.Before(*dst) {
		*dst = at
	}
}

func (b *timelines) desired(at time.Time, d *schemas.PodDesired) {
	if d == nil || d.Pod == nil {
		return
	}
	t := b.of(string(d.Pod.UID))
	t.Pod = d.Pod.Namespace + "/" + d.Pod.Name
	earliest(&t.Desired, at)
}

func (b *timelines) admission(at time.Time, v *schemas.AdmissionVerdict) {
	if v == nil || !v.Admitted {
		return
	}
	earliest(&b.of(v.UID).Admitted, at)
}

func (b *timelines) observed(at time.Time, o *schemas.PodObserved) {
	if o == nil || o.Terminating || o.Terminated {
		return
	}
	t := b.of(o.UID)
	if o.Sandbox != nil && o.Sandbox.Ready {
		earliest(&t.SandboxReady, at)
	}
	running := len(o.Containers) > 0
	for _, c := range o.Containers {
		running = running && c.State.Running != nil
	}
	if running {
		earliest(&t.Observed, at)
	}
}

// event takes the runtime's events: "Pulled" and "Created" come right after
// the sandbox is ready, "Started" right after StartContainer.
func (b *timelines) event(e *schemas.Event) {
	if e == nil || e.Object.UID == "" || e.Component != "" && e.Component != "runtime" {
		return
	}
	t := b.of(string(e.Object.UID))
	switch e.Reason {
	case "Pulled", "Created":
		earliest(&t.SandboxReady, e.Time)
	case "Started":
		earliest(&t.Started, e.Time)
	}
}

func (b *timelines) status(at time.Time, r *schemas.PodStatusRecord) {
	if r == nil || !runningReady(&r.Status) {
		return
	}
	earliest(&b.of(r.UID).Status, at)
}

// runningReady says whether a pod status is phase Running with Ready true.
func runningReady(s *corev1.PodStatus) bool {
	if s.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range s.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// byPod returns the timelines keyed by namespace/name; a UID never seen in
// the desired bucket (not one of ours) is left out.
func (b *timelines) byPod() map[string]*Timeline {
	out := map[string]*Timeline{}
	for _, t := range b.byUID {
		if t.Pod != "" {
			out[t.Pod] = t
		}
	}
	return out
}
