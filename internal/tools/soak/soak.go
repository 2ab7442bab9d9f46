// Package soak runs a node of a real cluster at its pod limit through
// thousands of pod lifecycles and follows what the node agent costs as
// they pass (scripts/soak.sh, issue 37): every few seconds each agent
// process's memory (PSS, RSS), goroutines and open fds, the bus store's
// bytes per stream, and what pods leave on a node (containers and
// sandboxes in containerd, mounts, pod cgroups, CNI leases, iptables rules,
// veths, pod log and volume dirs); the growth of each per 1,000 lifecycles
// after a warm-up; whatever is left once the node is drained; and whether
// every event the agent produced reached the API. The kubelet runs the same
// churn on the same layout (internal/cluster), for the figures side by side.
package soak

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/internal/cluster"
	"github.com/nodelet/nodelet/internal/tools/bench"
)

// Options choose the soak. Bins is required.
type Options struct {
	// Agents run one after the other, each on a cluster of its own.
	// Default: nodelet, then the kubelet.
	Agents []cluster.Agent
	// Bins are the cluster's programs.
	Bins cluster.Binaries
	// Work is the cluster's scratch directory. Default: internal/cluster's.
	Work string
	// Pods is the number of pods the node is kept at. Default: 110 (the
	// node's maxPods).
	Pods int
	// Lifecycles ends the churn after this many pod lifecycles. Default: 5000.
	Lifecycles int
	// Duration ends the churn after this long, if sooner. Default: 0 (none).
	Duration time.Duration
	// EndChurn, once closed, ends the churn as Lifecycles would: the node
	// drains and the figures are made of the lifecycles so far (every
	// later agent's churn ends as it begins). Default: nil (never).
	EndChurn <-chan struct{}
	// Warmup is the lifecycles left out of the growth figures. Default:
	// a fifth of Lifecycles, at most 500.
	Warmup int
	// Every is the time between samples. Default: 15s.
	Every time.Duration
	// Quiet is how long the empty node settles before the first figures.
	// Default: 30s.
	Quiet time.Duration
	// Settle bounds the wait for a drained node to be clean. Default: 2m.
	Settle time.Duration
	// FillTimeout bounds the fill. Default: 20m.
	FillTimeout time.Duration
	// DrainTimeout bounds the wait for the drained pods to leave the API
	// (the slowest takes its 30s grace period); those still there then
	// are leftovers. Default: 5m.
	DrainTimeout time.Duration
	// Seed makes the churn's choices. Default: 1.
	Seed uint64
	// Bounds are the growth allowed per 1,000 lifecycles.
	Bounds Bounds
	// Out is where result.json and the plots go. Default: none written.
	Out string
	// LockWait is how long to wait for another cluster on the machine to
	// go. Default: 0 (fail at once).
	LockWait time.Duration
	// Log reports progress. Default: silent.
	Log func(format string, args ...any)
	// Command is the command line, for the report. Default: "".
	Command string
}

func (o Options) withDefaults() Options {
	if len(o.Agents) == 0 {
		o.Agents = []cluster.Agent{cluster.Nodelet, cluster.Kubelet}
	}
	if o.Pods <= 0 {
		o.Pods = 110
	}
	if o.Lifecycles <= 0 {
		o.Lifecycles = 5000
	}
	if o.Warmup <= 0 {
		o.Warmup = min(500, o.Lifecycles/5)
	}
	if o.Every <= 0 {
		o.Every = 15 * time.Second
	}
	if o.Quiet <= 0 {
		o.Quiet = 30 * time.Second
	}
	if o.Settle <= 0 {
		o.Settle = 2 * time.Minute
	}
	if o.FillTimeout <= 0 {
		o.FillTimeout = 20 * time.Minute
	}
	if o.DrainTimeout <= 0 {
		o.DrainTimeout = 5 * time.Minute
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	if o.Log == nil {
		o.Log = func(string, ...any) {}
	}
	return o
}

// Run soaks each agent in turn and writes the report (and plots) to Out.
// A run that fails keeps what it measured and names the failure in its
// Errors; Run's error is then every run's first.
func Run(ctx context.Context, o Options) (*Report, error) {
	o = o.withDefaults()
	rep := &Report{Started: time.Now(), Command: o.Command, Load: bench.LoadAvg()}
	var errs []error
	for _, a := range o.Agents {
		res, err := runOne(ctx, o, a)
		if res != nil {
			rep.Results = append(rep.Results, res)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", a, err))
			o.Log("%s: %v", a, err)
		}
		if ctx.Err() != nil {
			break
		}
	}
	rep.Finished = time.Now()
	if o.Out != "" {
		errs = append(errs, rep.Write(o.Out))
	}
	return rep, errors.Join(errs...)
}

// run is one agent's soak while it runs.
type run struct {
	o     Options
	res   *Result
	start time.Time
	view  *nodeView
	pods  *podTracker
	mu    sync.Mutex
	phase string
}

func (r *run) errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.res.Errors) < 200 {
		r.res.Errors = append(r.res.Errors, fmt.Sprintf("%.0fs: ", time.Since(r.start).Seconds())+fmt.Sprintf(format, args...))
	}
}

func (r *run) setPhase(p string) {
	r.mu.Lock()
	r.phase = p
	r.mu.Unlock()
	r.o.Log("%s: %s", r.res.Agent, p)
}

func runOne(ctx context.Context, o Options, agent cluster.Agent) (*Result, error) {
	c, err := cluster.Start(ctx, cluster.Options{Nodes: 1, Agent: agent, Work: o.Work, Bins: o.Bins, LockWait: o.LockWait, Log: o.Log})
	if err != nil {
		return nil, err
	}
	defer c.Stop()
	// The informers and the sampler end before the cluster does.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	n := c.Nodes[0]
	r := &run{o: o, start: time.Now(), res: &Result{Agent: string(agent), Node: n.Name, Started: time.Now(), Pods: o.Pods,
		Warmup: o.Warmup, CleanAfterSeconds: -1}}
	if err := r.soak(ctx, c, n); err != nil {
		r.errorf("%v", err)
		return r.res, err
	}
	return r.res, nil
}

func (r *run) soak(ctx context.Context, c *cluster.Cluster, n *cluster.Node) error {
	o := r.o
	if _, err := c.Admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}},
		metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	if err := waitServiceAccount(ctx, c); err != nil {
		return err
	}
	var err error
	if r.view, err = openNode(ctx, c, n); err != nil {
		return err
	}
	defer r.view.Close()
	if r.pods, err = trackPods(ctx, c.Admin, n.Name); err != nil {
		return err
	}
	r.setPhase(PhaseBefore)
	sleep(ctx, o.Quiet)
	if r.res.Before, err = r.view.rest(ctx); err != nil {
		r.errorf("before: %v", err)
	}
	r.stamp(&r.res.Before.Sample)

	sctx, stopSampling := context.WithCancel(ctx)
	sampled := r.sampleEvery(sctx)
	defer func() {
		stopSampling()
		<-sampled
	}()

	ch := newChurner(c.Admin, r.pods, o.Pods, o.Seed, r.errorf)
	r.res.Actions = ch.actions
	r.setPhase(PhaseFill)
	t0 := time.Now()
	if err := ch.setUp(ctx); err != nil {
		return err
	}
	if !r.pods.waitPods(ctx, o.FillTimeout, func(pc podCounts) bool { return pc.Started >= o.Pods }) {
		return fmt.Errorf("the node did not run %d pods in %s: %+v", o.Pods, o.FillTimeout, r.pods.counts())
	}
	r.res.FillSeconds = time.Since(t0).Seconds()

	r.setPhase(PhaseChurn)
	stepsBefore, err := scrapeSteps(ctx, c.Admin, n.Name)
	if err != nil {
		r.errorf("steps: %v", err)
	}
	t0 = time.Now()
	churnBase := r.pods.counts().Lifecycles
	r.res.ChurnBase = churnBase
	tick := time.NewTicker(500 * time.Millisecond)
churn:
	for r.pods.counts().Lifecycles-churnBase < o.Lifecycles && (o.Duration == 0 || time.Since(t0) < o.Duration) {
		select {
		case <-ctx.Done():
			tick.Stop()
			return ctx.Err()
		case <-o.EndChurn:
			r.o.Log("%s: churn ended early after %d lifecycles", r.res.Agent, r.pods.counts().Lifecycles-churnBase)
			break churn
		case <-tick.C:
		}
		ch.step(ctx)
	}
	tick.Stop()
	r.res.ChurnSeconds = time.Since(t0).Seconds()
	r.res.PodStart = r.pods.startLatency(t0)
	if stepsAfter, err := scrapeSteps(ctx, c.Admin, n.Name); err != nil {
		r.errorf("steps: %v", err)
	} else if stepsBefore != nil {
		r.res.Steps = stepsBetween(stepsBefore, stepsAfter)
	}

	r.setPhase(PhaseDrain)
	t0 = time.Now()
	if err := ch.drain(ctx); err != nil {
		return err
	}
	if !r.pods.waitPods(ctx, o.DrainTimeout, func(pc podCounts) bool { return pc.Total == 0 }) {
		r.errorf("drain: pods still in the API after %s: %+v", o.DrainTimeout, r.pods.counts())
	}
	r.res.DrainSeconds = time.Since(t0).Seconds()
	pc := r.pods.counts()
	r.res.Lifecycles, r.res.Restarts = pc.Lifecycles, pc.Restarts
	r.res.Events = r.settleEvents(ctx)

	r.setPhase(PhaseAfter)
	t0 = time.Now()
	for {
		after, err := r.view.rest(ctx)
		if err != nil {
			r.errorf("after: %v", err)
		}
		r.res.After = after
		r.res.Leftovers = Leftovers(&r.res.Before.Inventory, &after.Inventory)
		if api := r.pods.remaining(time.Now()); len(api) > 0 {
			// A pod the agent never finished: the API still has it.
			r.res.Leftovers = append([]Leftover{{Kind: "pods in the API", Items: api}}, r.res.Leftovers...)
		}
		if len(r.res.Leftovers) == 0 {
			r.res.CleanAfterSeconds = time.Since(t0).Seconds()
			break
		}
		if time.Since(t0) > o.Settle || ctx.Err() != nil {
			break
		}
		sleep(ctx, 5*time.Second)
	}
	stopSampling()
	<-sampled
	r.stamp(&r.res.After.Sample)
	r.res.Growth = ComputeGrowth(r.res.Samples, churnBase+o.Warmup, o.Bounds)
	return nil
}

// settleEvents waits, a while at most, for the node's events to be
// posted and received, and returns the tally.
func (r *run) settleEvents(ctx context.Context) Events {
	deadline := time.Now().Add(2 * time.Minute)
	var last Events
	stable := 0
	for {
		ev, err := r.view.tallyEvents(nil)
		if err != nil {
			r.errorf("events: %v", err)
		}
		if r.view.bus != nil && ev.Mismatch() == "" {
			return ev
		}
		// The kubelet says nothing of what it produced: wait for the
		// count to stop moving.
		if ev.Received == last.Received {
			stable++
		} else {
			stable = 0
		}
		if r.view.bus == nil && stable >= 10 || time.Now().After(deadline) || ctx.Err() != nil {
			return ev
		}
		last = ev
		sleep(ctx, time.Second)
	}
}

// stamp sets a sample's time, phase and pod counts.
func (r *run) stamp(s *Sample) {
	r.mu.Lock()
	s.Phase = r.phase
	r.mu.Unlock()
	s.At = time.Since(r.start).Seconds()
	pc := r.pods.counts()
	s.Lifecycles, s.Pods = pc.Lifecycles, pc.Bound
}

// sampleEvery samples the node until ctx ends; the channel closes then.
func (r *run) sampleEvery(ctx context.Context) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(r.o.Every)
		defer t.Stop()
		for {
			s, err := r.view.sample(ctx)
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				r.errorf("sample: %v", err)
			}
			r.stamp(&s)
			r.mu.Lock()
			r.res.Samples = append(r.res.Samples, s)
			r.mu.Unlock()
			r.o.Log("%s", progress(r.res.Agent, s))
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return done
}

func waitServiceAccount(ctx context.Context, c *cluster.Cluster) error {
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); sleep(ctx, 500*time.Millisecond) {
		if _, err := c.Admin.CoreV1().ServiceAccounts(Namespace).Get(ctx, "default", metav1.GetOptions{}); err == nil {
			return nil
		}
	}
	return fmt.Errorf("no ServiceAccount default in %s after 2m", Namespace)
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// Write writes result.json and each agent's plot (and, with both agents,
// the comparison) to dir.
func (rep *Report) Write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := writeJSON(filepath.Join(dir, "result.json"), rep); err != nil {
		return err
	}
	var errs []error
	for _, res := range rep.Results {
		errs = append(errs, PlotResult(res, filepath.Join(dir, res.Agent+".png")))
	}
	if len(rep.Results) > 1 {
		errs = append(errs, PlotCompare(rep.Results, filepath.Join(dir, "compare.png")))
	}
	return errors.Join(errs...)
}
