// Package bench measures how fast nodelet starts and stops a burst of pods
// against the floor of the same pods made straight through CRI, on one
// private containerd, and what the agent costs while doing it: wall and
// per-pod times, the time of each pipeline stage from the bus's own
// timestamps, CPU and memory of the agent's processes, and what the burst
// puts on the bus. cmd/nodelet-bench is its command; scripts/bench.sh
// runs it. Speed is measured here, never asserted in tests.
package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/nodelet/nodelet/internal/containerd/scratch"
)

// DefaultOut is where the JSON result goes unless told otherwise.
const DefaultOut = "/tmp/nodelet-bench-result.json"

// Defaults of the timing options.
const (
	DefaultIdle    = 20 * time.Second
	DefaultSettle  = 3 * time.Second
	DefaultTimeout = 5 * time.Minute
	// perPodTimeout scales the default timeout with the burst: at 110 pods
	// under a load of 50 on 2 CPUs the kubelet's teardown took 116 s.
	perPodTimeout = 3 * time.Second
)

// Options shape one bench run.
type Options struct {
	// Ns are the burst sizes. Default: 1, 20, 50.
	Ns []int
	// Rounds per contender, bound and N; contenders alternate. Default: 3.
	Rounds int
	// Bounds are the values of runtime.maxConcurrentSandboxCreations to
	// measure (0 = unbounded); the floor uses the same. Default: 1, 2, 4, 0.
	Bounds []int
	// BinDir holds nodelet and the nodelet-* daemons. Default: bin.
	BinDir string
	// Out is the JSON result's path. Default: /tmp/nodelet-bench-result.json
	// (outside the tree, so that it is never committed by accident).
	Out string
	// Idle is how long the agent's idle cost is measured with the largest
	// burst running (first round of each bound). Default: DefaultIdle (set
	// by the command); 0 skips it.
	Idle time.Duration
	// Settle is the pause between the node reporting ready and the burst,
	// so that start-up work does not count. Default: DefaultSettle (set by
	// the command); 0 does not wait.
	Settle time.Duration
	// Timeout bounds each burst and each teardown. Default (0):
	// DefaultTimeout or 3 s per pod of the burst, whichever is longer.
	Timeout time.Duration
	// SummaryRequests is how many GETs of /stats/summary each agent run
	// times with its burst running (after the idle window). Default:
	// DefaultSummaryRequests (set by the command); 0 skips it.
	SummaryRequests int
	// KubeletBin is a kubelet binary to run as a third contender (bound
	// "unbounded" only: it has no such bound); empty skips it.
	KubeletBin string
	// WorkDir holds the nodes' state, manifests and logs. Default: a new
	// temporary directory, removed at the end unless KeepWorkDir.
	WorkDir     string
	KeepWorkDir bool
	// Tolerance of the breakdown's sum against the measured start. Default: 0.10.
	Tolerance float64
	// Timelines puts every pod's moments into the JSON result.
	Timelines bool
	// Log receives progress lines. Default: os.Stderr.
	Log io.Writer
	// ContainerdMajor is the private containerd's major version: 0 or 1
	// for Debian's 1.6, 2 for the containerd 2.x of scripts/containerd2.sh.
	ContainerdMajor int
	// Command is recorded in the result.
	Command string
}

func (o *Options) defaults() {
	if len(o.Ns) == 0 {
		o.Ns = []int{1, 20, 50}
	}
	if o.Rounds <= 0 {
		o.Rounds = 3
	}
	if len(o.Bounds) == 0 {
		o.Bounds = []int{1, 2, 4, 0}
	}
	if o.BinDir == "" {
		o.BinDir = "bin"
	}
	if o.Out == "" {
		o.Out = DefaultOut
	}
	if o.Tolerance == 0 {
		o.Tolerance = 0.10
	}
	if o.Log == nil {
		o.Log = os.Stderr
	}
}

// timeoutFor is the bound on a burst or teardown of n pods.
func (o *Options) timeoutFor(n int) time.Duration {
	if o.Timeout > 0 {
		return o.Timeout
	}
	return max(DefaultTimeout, time.Duration(n)*perPodTimeout)
}

// Validate checks the options before anything starts.
func (o *Options) Validate() error {
	for _, n := range o.Ns {
		if n < 1 || n > 110 {
			return fmt.Errorf("-n: %d pods: want 1..110 (node.maxPods)", n)
		}
	}
	for _, b := range o.Bounds {
		if b < 0 {
			return fmt.Errorf("-bounds: %d: want 0 (unbounded) or more", b)
		}
	}
	if o.Idle < 0 || o.Settle < 0 || o.Timeout < 0 || o.SummaryRequests < 0 {
		return errors.New("-idle, -settle, -timeout and -summary-requests must not be negative")
	}
	abs, err := filepath.Abs(o.BinDir)
	if err != nil {
		return err
	}
	o.BinDir = abs
	for _, b := range []string{"nodelet", "nodelet-bus", "nodelet-runtime"} {
		if _, err := os.Stat(filepath.Join(o.BinDir, b)); err != nil {
			return fmt.Errorf("-bin-dir: %s not found in %s (run scripts/setup.sh)", b, o.BinDir)
		}
	}
	if o.KubeletBin != "" {
		if _, err := os.Stat(o.KubeletBin); err != nil {
			return fmt.Errorf("KUBELET_BIN: %w", err)
		}
	}
	return nil
}

// nodeLifecycle is how nodelet runs across rounds, stated in the result.
const nodeLifecycle = "nodelet: a fresh node (new state dir and bus store, `nodelet up`) for every round, started and settled before the burst " +
	"and stopped after the teardown, because the floor's rounds between nodelet's must run with no agent at all (a running " +
	"nodelet-runtime would also kill the floor's pods as unknown); node start-up is not counted"

// bencher runs the contenders.
type bencher struct {
	o    Options
	log  *slog.Logger
	rt   *runtimeEnv
	cri  *criClient
	work string
	// failed: some run failed; its logs stay in work.
	failed bool
}

// Measure runs the whole bench and returns its result; the JSON result is
// written to o.Out and the table to out.
func Measure(ctx context.Context, o Options, out io.Writer) (*Result, error) {
	o.defaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("nodelet-bench needs root (containerd, runc, CNI and cgroups)")
	}
	res := &Result{Started: time.Now().UTC(), Command: o.Command, Machine: machine(), NodeLifecycle: nodeLifecycle}
	b := &bencher{o: o, log: slog.New(slog.NewTextHandler(o.Log, &slog.HandlerOptions{Level: slog.LevelInfo}))}

	var err error
	b.work = o.WorkDir
	if b.work == "" {
		if b.work, err = os.MkdirTemp("", "nodelet-bench-"); err != nil {
			return nil, err
		}
	}
	defer func() {
		// A failed run's node log stays for a look.
		if !o.KeepWorkDir && !b.failed {
			os.RemoveAll(b.work)
		}
	}()

	b.log.Info("Starting a private containerd")
	ctrd, err := scratch.Start(scratch.Options{Major: o.ContainerdMajor})
	if err != nil {
		return nil, fmt.Errorf("containerd: %w", err)
	}
	defer ctrd.Stop()
	defer removeCgroups(CgroupRoot)
	b.rt = &runtimeEnv{Endpoint: ctrd.Endpoint, Address: ctrd.Address, CNIConfDir: ctrd.CNIConfDir, BridgeName: ctrd.BridgeName,
		NetworkName: ctrd.NetworkName, Subnet: ctrd.Subnet, ContainerdPid: ctrd.Pid(),
		shimPIDs: func() []int { return scratch.ShimPIDs(ctrd.Address) }}
	if b.cri, err = dialCRI(ctrd.Address); err != nil {
		return nil, err
	}
	defer b.cri.Close()
	res.Machine.Containerd = b.cri.version(ctx)
	b.log.Info("Containerd ready", "endpoint", ctrd.Endpoint, "bridge", ctrd.BridgeName, "subnet", ctrd.Subnet, "took", ctrd.StartTime.Round(time.Millisecond))
	if o.KubeletBin == "" {
		res.Notes = append(res.Notes, "KUBELET_BIN not set: no kubelet contender")
	}

	kubeletBound := o.Bounds[0]
	if slices.Contains(o.Bounds, 0) {
		kubeletBound = 0
	}
	// Bounds are interleaved as the contenders are: the machine's load
	// drifts (it may be shared), and a bound measured only early or only
	// late would be judged on another machine than the rest.
runs:
	for _, n := range o.Ns {
		for round := 1; round <= o.Rounds; round++ {
			for _, bound := range o.Bounds {
				if ctx.Err() != nil {
					// Interrupted: report what was measured.
					res.Notes = append(res.Notes, "interrupted: the runs after this point are missing")
					break runs
				}
				idle := time.Duration(0)
				if round == 1 && n == slices.Max(o.Ns) { // once per bound
					idle = o.Idle
				}
				res.Runs = append(res.Runs, b.runNodelet(ctx, bound, n, round, idle))
				res.Runs = append(res.Runs, b.runFloor(ctx, bound, n, round))
				if o.KubeletBin != "" && bound == kubeletBound {
					res.Runs = append(res.Runs, b.runKubelet(ctx, n, round, idle))
				}
			}
		}
	}
	if b.failed && !o.KeepWorkDir {
		res.Notes = append(res.Notes, "work dir kept for the failed runs' logs: "+b.work)
	}
	res.Finished = time.Now().UTC()
	res.Machine.LoadEnd = LoadAvg()
	res.Summaries = Summarize(res.Runs, o.Tolerance)
	res.Recommendation = Recommend(res.Summaries)
	res.Notes = append(res.Notes, breakdownNotes(res.Summaries)...)
	if c := res.Coverage(); c != nil {
		res.Notes = append(res.Notes, c.missingLine())
	}
	if !o.Timelines {
		for i := range res.Runs {
			res.Runs[i].Timelines = nil
		}
	}
	if err := writeJSON(o.Out, res); err != nil {
		return res, err
	}
	if err := WriteTable(out, res); err != nil {
		return res, err
	}
	fmt.Fprintf(out, "result: %s\n", o.Out)
	return res, ctx.Err()
}

// breakdownNotes flags breakdowns that do not account for the start.
func breakdownNotes(sums []Summary) []string {
	var out []string
	for _, s := range sums {
		if s.Breakdown != nil && s.Contender == Nodelet && !s.Breakdown.Within {
			out = append(out, fmt.Sprintf("bound %s N=%d: the stages add up to %s but the measured start is %s (%.1f%% off)",
				boundName(s.Bound), s.N, s.Breakdown.Sum, s.Breakdown.Measured, s.Breakdown.Deviation*100))
		}
	}
	return out
}

func writeJSON(path string, res *Result) error {
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// podNames are the names of a burst's pods before the node suffix.
func podNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("p%03d", i)
	}
	return out
}

// cleanBefore removes whatever an earlier run left of its pods and says
// how many sandboxes that was.
func (b *bencher) cleanBefore(ctx context.Context) int {
	n, err := b.cri.removeAll(ctx)
	if err != nil {
		b.log.Warn("Cannot remove pods left by an earlier round", "err", err)
	}
	if n > 0 {
		b.log.Warn("Removed pods left by an earlier round", "sandboxes", n)
	}
	return n
}

// runtimeCPU is containerd's CPU (and that of the CNI plugins it ran)
// plus every shim's (and runc's under it) now.
func (b *bencher) runtimeCPU() time.Duration {
	c, _ := CPUOf(append([]int{b.rt.ContainerdPid}, b.rt.shimPIDs()...))
	return c.Total()
}

// quietLogger is the tap connection's: its disconnect when the node stops
// is expected.
func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
}
