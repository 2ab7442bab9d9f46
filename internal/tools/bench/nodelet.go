package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/schemas"
)

// readyWatch records when the bench first sees each pod Running and Ready
// in the status bucket: what a user watching the node would see.
type readyWatch struct {
	mu     sync.Mutex
	want   map[string]bool
	seen   map[string]time.Time
	all    chan struct{}
	synced chan struct{}
}

func watchReady(ctx context.Context, c *bus.Conn, want map[string]bool) *readyWatch {
	w := &readyWatch{want: want, seen: map[string]time.Time{}, all: make(chan struct{}), synced: make(chan struct{})}
	go func() {
		_ = bus.Watch[schemas.PodStatusRecord](ctx, c, bus.BucketStatus, ">", func(u bus.Update[schemas.PodStatusRecord]) {
			at := time.Now()
			switch u.Kind {
			case bus.Synced:
				select {
				case <-w.synced:
				default:
					close(w.synced)
				}
			case bus.Put:
				pod := u.Value.Namespace + "/" + u.Value.Name
				if !runningReady(&u.Value.Status) {
					return
				}
				w.mu.Lock()
				defer w.mu.Unlock()
				if !w.want[pod] {
					return
				}
				if _, ok := w.seen[pod]; ok {
					return
				}
				w.seen[pod] = at
				if len(w.seen) == len(w.want) {
					close(w.all)
				}
			}
		})
	}()
	return w
}

func (w *readyWatch) times() map[string]time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string]time.Time, len(w.seen))
	for k, v := range w.seen {
		out[k] = v
	}
	return out
}

// runNodelet is one nodelet round: a fresh node, the burst, the idle
// measurement when asked, the teardown, the node stopped.
func (b *bencher) runNodelet(ctx context.Context, bound, n, round int, idle time.Duration) (run Run) {
	run = Run{Contender: Nodelet, Bound: bound, N: n, Round: round}
	run.Leftovers = b.cleanBefore(ctx)
	dir := filepath.Join(b.work, fmt.Sprintf("nodelet-b%d-n%d-r%d", bound, n, round))
	defer func() { b.report(&run) }()
	nd, err := startNode(ctx, dir, b.o.BinDir, b.rt, bound)
	if err != nil {
		run.Error = err.Error()
		return run
	}
	defer func() {
		nd.stop()
		if run.Error == "" && !b.o.KeepWorkDir {
			_ = os.RemoveAll(dir)
		} else if run.Error != "" {
			run.Error += " (node log: " + nd.logPath + ")"
		}
	}()
	if err := b.nodeletBurst(ctx, nd, &run, idle); err != nil {
		run.Error = err.Error()
	}
	// Teardown, also after a failed burst: the next round starts clean.
	marks, _ := markStreams(ctx, nd.tap)
	b.teardown(ctx, &run, func(context.Context) error { return nd.remove(podNames(n)) })
	if after, err := markStreams(ctx, nd.tap); err == nil && marks != nil && run.Bus != nil {
		run.Bus.TeardownMessages, _ = stored(marks, after)
	}
	return run
}

func (b *bencher) nodeletBurst(ctx context.Context, nd *node, run *Run, idle time.Duration) error {
	names := podNames(run.N)
	want := map[string]bool{}
	for _, name := range names {
		want[Namespace+"/"+name+"-"+NodeName] = true
	}
	tag := fmt.Sprintf("%d-%d-%d-%d", run.Bound, run.N, run.Round, time.Now().UnixNano())
	if err := nd.stage(names, tag); err != nil {
		return err
	}
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	rw := watchReady(wctx, nd.tap, want)
	select {
	case <-rw.synced:
	case <-time.After(30 * time.Second):
		return fmt.Errorf("status bucket watch did not sync")
	case <-ctx.Done():
		return ctx.Err()
	}
	// Let the node's start-up work (first relists, node status, cAdvisor)
	// pass before the burst.
	select {
	case <-time.After(b.o.Settle):
	case <-ctx.Done():
		return ctx.Err()
	}
	pids, err := nd.pids()
	if err != nil {
		return err
	}
	if idle > 0 {
		run.Empty = emptyCost(pids)
	}
	var pidList []int
	for _, p := range pids {
		pidList = append(pidList, p)
	}
	cpu0 := map[string]ProcCPU{}
	for name, pid := range pids {
		if cpu0[name], err = ReadCPU(pid); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	marks0, err := markStreams(ctx, nd.tap)
	if err != nil {
		return err
	}
	rt0 := b.runtimeCPU()
	sampler := sampleRSS(ctx, pidList, 200*time.Millisecond)
	run.Load = LoadAvg()

	t0 := time.Now()
	if err := nd.publish(names); err != nil {
		sampler.Stop()
		return err
	}
	bctx, cancel := context.WithTimeout(ctx, b.o.timeoutFor(run.N))
	defer cancel()
	ids, err := b.cri.waitRunning(bctx, want)
	if err != nil {
		sampler.Stop()
		return err
	}
	select {
	case <-rw.all:
	case <-bctx.Done():
		sampler.Stop()
		return fmt.Errorf("%d of %d pods Running and Ready in the status bucket: %w", len(rw.times()), len(want), bctx.Err())
	}
	tEnd := time.Now()
	run.Agent = &AgentCost{PeakRSS: sampler.Stop(), CPUByProcess: map[string]Dur{}, HWMSum: MemoryOf(pidList).HWM}
	run.Runtime = &RuntimeCost{CPU: Dur(b.runtimeCPU() - rt0)}
	// The coverage step, after the costs were taken.
	if run.MetricFamilies, err = metricFamilies(bctx, nd.readOnly); err != nil {
		return err
	}
	for name, pid := range pids {
		c, err := ReadCPU(pid)
		if err != nil {
			return fmt.Errorf("%s exited during the burst: %w", name, err)
		}
		d := c.Total() - cpu0[name].Total()
		run.Agent.CPUByProcess[name] = Dur(d)
		run.Agent.CPU += Dur(d)
	}
	marks1, err := markStreams(ctx, nd.tap)
	if err != nil {
		return err
	}
	started, err := b.cri.startedAt(ctx, ids)
	if err != nil {
		return err
	}
	tl, cost, err := readBurst(ctx, nd.tap, marks0, tEnd)
	if err != nil {
		return err
	}
	total, by := stored(marks0, marks1)
	if total > cost.Messages {
		// History limits dropped some before they were read: count them all.
		cost.Messages, cost.ByStream = total, by
	}
	cost.PerPodMessages = float64(cost.Messages) / float64(run.N)
	cost.PerPodBytes = float64(cost.Bytes) / float64(run.N)
	run.Bus = cost

	ready := rw.times()
	byPod := tl.byPod()
	for pod := range want {
		t := Timeline{Pod: pod}
		if x := byPod[pod]; x != nil {
			t = *x
		}
		t.Written, t.Running, t.Measured = t0, started[pod], ready[pod]
		run.Timelines = append(run.Timelines, t)
		run.Running = append(run.Running, Dur(started[pod].Sub(t0)))
		run.Ready = append(run.Ready, Dur(ready[pod].Sub(t0)))
	}
	sort.Slice(run.Timelines, func(i, j int) bool { return run.Timelines[i].Pod < run.Timelines[j].Pod })
	run.WallRunning = Dur(Max(durs(run.Running)))
	run.WallReady = Dur(Max(durs(run.Ready)))
	bd := ComputeBreakdown(run.Timelines, b.o.Tolerance)
	run.Breakdown = &bd

	if idle > 0 {
		c0, _ := CPUOf(pidList)
		select {
		case <-time.After(idle):
		case <-ctx.Done():
			return ctx.Err()
		}
		c1, err := CPUOf(pidList)
		if err != nil {
			return fmt.Errorf("idle: %w", err)
		}
		cpu := c1.Total() - c0.Total()
		run.Idle = idleCost(run.N, idle, cpu, pids)
	}
	if run.Summary, err = measureSummary(ctx, nd.readOnly, b.o.SummaryRequests, want, cpuOfFunc(pidList), b.runtimeCPU); err != nil {
		return err
	}
	exits, err := b.measureExits(ctx, readOnlyPods(nd.readOnly), ids)
	run.ExitToStatus = exits
	return err
}

// idleCost is the agent's cost over an idle window with pods running.
func idleCost(pods int, window, cpu time.Duration, pids map[string]int) *IdleCost {
	c := emptyCost(pids)
	c.Pods, c.Window, c.CPU, c.CPUPercent = pods, Dur(window), Dur(cpu), 100*cpu.Seconds()/window.Seconds()
	return c
}

// cpuOfFunc reads the summed CPU of pids (0 once one is gone: the run
// fails on that elsewhere).
func cpuOfFunc(pids []int) func() time.Duration {
	return func() time.Duration {
		c, _ := CPUOf(pids)
		return c.Total()
	}
}

// emptyCost is the agent's memory at rest on a node with no pods.
func emptyCost(pids map[string]int) *IdleCost {
	c := &IdleCost{ByProcess: MemoryByProcess(pids)}
	for _, m := range c.ByProcess {
		c.RSS += m.RSS
		c.PSS += m.PSS
	}
	return c
}

// report logs one run's outcome.
func (b *bencher) report(r *Run) {
	if r.Error != "" {
		b.failed = true
		b.log.Error("Run failed", "contender", r.Contender, "bound", r.Bound, "n", r.N, "round", r.Round, "err", r.Error)
		return
	}
	args := []any{"contender", r.Contender, "bound", r.Bound, "n", r.N, "round", r.Round,
		"wallRunning", r.WallRunning, "p50", Dur(Percentile(durs(r.Running), 50)), "teardown", r.Teardown, "load", r.Load}
	if r.WallReady > 0 {
		args = append(args, "wallReady", r.WallReady)
	}
	if r.Agent != nil {
		args = append(args, "agentCPU", r.Agent.CPU)
	}
	if r.Breakdown != nil {
		args = append(args, "stagesSum", r.Breakdown.Sum, "measured", r.Breakdown.Measured)
	}
	b.log.Info("Run done", args...)
}
