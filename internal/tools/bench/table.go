package bench

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/nodelet/nodelet/internal/component"
)

// WriteTable prints the result for people: one table per bound, the bound
// sweep, where the time goes, the agent's cost, and the recommendation.
func WriteTable(w io.Writer, r *Result) error {
	ew := &errWriter{w: w}
	m := r.Machine
	ew.printf("nodelet-bench: %s, %d CPUs (%s), %s RAM, kernel %s, containerd %s\n",
		m.Hostname, m.CPUs, m.CPUModel, mib(m.MemTotal), m.Kernel, m.Containerd)
	ew.printf("load average %s at start, %s at end; %s\n", m.LoadStart, m.LoadEnd, r.Command)
	if r.NodeLifecycle != "" {
		ew.printf("%s\n", r.NodeLifecycle)
	}

	bounds := boundsOf(r.Summaries)
	for _, b := range bounds {
		ew.printf("\n== sandbox bound %s (runtime.maxConcurrentSandboxCreations=%d; the floor uses the same bound) ==\n", boundName(b), b)
		tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "N\tcontender\trounds\twall running\twall ready\tpod p50\tpod p99\tready p50\tready p99\tteardown\texit→status p50/p99\tratio\tper round\t")
		for _, s := range r.Summaries {
			if s.Bound != b {
				continue
			}
			ready50, ready99, wallReady := "-", "-", "-"
			if s.Ready != nil {
				ready50, ready99 = s.Ready.P50.String(), s.Ready.P99.String()
			}
			if s.WallReady > 0 {
				wallReady = s.WallReady.String()
			}
			ratio, per := "-", "-"
			if len(s.Ratios) > 0 {
				ratio = fmt.Sprintf("%.2f", s.Ratio)
				per = floats(s.Ratios)
			}
			rounds := fmt.Sprint(s.Rounds)
			if s.Failed > 0 {
				rounds += fmt.Sprintf(" (+%d failed)", s.Failed)
			}
			exits := "-"
			if e := s.ExitToStatus; e != nil {
				exits = fmt.Sprintf("%s / %s", msec(e.P50), msec(e.P99))
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", s.N, s.Contender, rounds,
				s.WallRunning, wallReady, s.Running.P50, s.Running.P99, ready50, ready99, s.Teardown, exits, ratio, per)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}

	ns := nsOf(r.Summaries)
	ew.printf("\n== bound sweep: per-pod p50 to running / all-running wall time (medians) ==\n")
	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := "bound\t"
	for _, n := range ns {
		head += fmt.Sprintf("nodelet N=%d\tfloor N=%d\t", n, n)
	}
	fmt.Fprintln(tw, head)
	for _, b := range bounds {
		line := boundName(b) + "\t"
		for _, n := range ns {
			for _, c := range []string{Nodelet, Floor} {
				s := find(r.Summaries, c, b, n)
				if s == nil || s.Rounds == 0 {
					line += "-\t"
					continue
				}
				line += fmt.Sprintf("%s / %s\t", s.Running.P50, s.WallRunning)
			}
		}
		fmt.Fprintln(tw, line)
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	ew.printf("\n== where a pod start goes (mean per pod over all rounds; bus envelope and event times) ==\n")
	tw = tabwriter.NewWriter(ew, 0, 0, 2, ' ', tabwriter.AlignRight)
	head = "bound\tN\tcontender\t"
	for _, s := range Stages {
		head += s.Name + "\t"
	}
	fmt.Fprintln(tw, head+"sum\tmeasured\tdeviation\t")
	for _, s := range r.Summaries {
		if s.Breakdown == nil || s.Contender == Kubelet {
			continue
		}
		bd := s.Breakdown
		line := fmt.Sprintf("%s\t%d\t%s\t", boundName(s.Bound), s.N, s.Contender)
		for _, st := range bd.Stages {
			line += st.Mean.String() + "\t"
		}
		verdict := "ok"
		if !bd.Within {
			verdict = "OVER"
		}
		if bd.Incomplete > 0 {
			verdict += fmt.Sprintf(", %d/%d pods incomplete", bd.Incomplete, bd.Pods)
		}
		fmt.Fprintf(tw, "%s%s\t%s\t%.1f%% %s\t\n", line, bd.Sum, bd.Measured, bd.Deviation*100, verdict)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	ew.printf("stages: ")
	for i, s := range Stages {
		if i > 0 {
			ew.printf("; ")
		}
		ew.printf("%s = %s", s.Name, s.What)
	}
	ew.printf(".\nmeasured = first write → Running+Ready seen by the bench's status watch (floor: CRI StartedAt).\n")

	ew.printf("\n== agent cost during the burst (nodelet: supervisor + bus + %d daemons) and the runtime's (containerd + shims); medians over rounds ==\n", len(component.Declared.Daemons()))
	tw = tabwriter.NewWriter(ew, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "bound\tN\tcontender\tagent CPU\truntime CPU\tagent peak RSS\tbus msgs/pod\tbus bytes/pod\tidle pods\tidle agent CPU\tidle agent RSS\t")
	for _, s := range r.Summaries {
		if s.Rounds == 0 {
			continue
		}
		idlePods, idleCPU, idleRSS := "-", "-", "-"
		if s.Idle != nil {
			idlePods = fmt.Sprint(s.Idle.Pods)
			idleCPU = fmt.Sprintf("%.1f%% of a core", s.Idle.CPUPercent)
			idleRSS = mib(s.Idle.RSS)
		}
		msgs, bytes := "-", "-"
		if s.BusMsgs > 0 {
			msgs, bytes = fmt.Sprintf("%.1f", s.BusMsgs), fmt.Sprintf("%.0f", s.BusBytes)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", boundName(s.Bound), s.N, s.Contender, orDash(s.AgentCPU), orDash(s.RuntimeCPU),
			mib(s.PeakRSS), msgs, bytes, idlePods, idleCPU, idleRSS)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	writeAtRest(ew, r.Summaries)
	writeIdleMemory(ew, r.Summaries)
	if rec := r.Recommendation; rec != nil {
		ew.printf("\nbest runtime.maxConcurrentSandboxCreations for a burst: %d (%s)\n", rec.Bound, rec.Reason)
	}
	for _, n := range r.Notes {
		ew.printf("note: %s\n", n)
	}
	return ew.err
}

type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}

func (e *errWriter) printf(format string, args ...any) { fmt.Fprintf(e, format, args...) }

func orDash(d Dur) string {
	if d == 0 {
		return "-"
	}
	return d.String()
}

func mib(b uint64) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1fMiB", float64(b)/(1<<20))
}

func floats(xs []float64) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprintf("%.2f", x)
	}
	return strings.Join(s, " ")
}

// boundsOf lists the bounds in the order they ran.
func boundsOf(sums []Summary) []int {
	var out []int
	for _, s := range sums {
		if !slices.Contains(out, s.Bound) {
			out = append(out, s.Bound)
		}
	}
	return out
}

func nsOf(sums []Summary) []int {
	var out []int
	for _, s := range sums {
		if !slices.Contains(out, s.N) {
			out = append(out, s.N)
		}
	}
	slices.Sort(out)
	return out
}

func find(sums []Summary, contender string, bound, n int) *Summary {
	for i := range sums {
		if s := &sums[i]; s.Contender == contender && s.Bound == bound && s.N == n {
			return s
		}
	}
	return nil
}

// writeAtRest puts the agents side by side with their bursts running: CPU
// in the idle window and the latency of /stats/summary after it.
func writeAtRest(ew *errWriter, sums []Summary) {
	var rows []Summary
	for _, s := range sums {
		if s.Contender != Floor && s.Rounds > 0 && (s.Idle != nil || s.Summary != nil) {
			rows = append(rows, s)
		}
	}
	if len(rows) == 0 {
		return
	}
	ew.printf("\n== at rest with the burst running: agent CPU in the idle window, then /stats/summary (sequential GETs on the read-only port) ==\n")
	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "bound\tN\tcontender\tidle agent CPU\tidle PSS\tsummary GETs\tsummary p50 / p99 / max\tpods listed\tanswer size\tagent CPU/GET\truntime CPU/GET\t")
	for _, s := range rows {
		idleCPU, idlePSS := "-", "-"
		if s.Idle != nil {
			idleCPU, idlePSS = fmt.Sprintf("%.1f%% of a core (%s)", s.Idle.CPUPercent, s.Idle.Window), mib(s.Idle.PSS)
		}
		gets, lat, pods, size, agent, rt := "-", "-", "-", "-", "-", "-"
		if m := s.Summary; m != nil {
			gets = fmt.Sprint(m.Latency.N)
			lat = fmt.Sprintf("%s / %s / %s", msec1(m.Latency.P50), msec1(m.Latency.P99), msec1(m.Latency.Max))
			pods = fmt.Sprintf("%d/%d", m.Pods, s.N)
			size = fmt.Sprintf("%.0fKiB", float64(m.Bytes)/1024)
			agent, rt = msec1(m.AgentCPU), msec1(m.RuntimeCPU)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", boundName(s.Bound), s.N, s.Contender, idleCPU, idlePSS,
			gets, lat, pods, size, agent, rt)
	}
	ew.err = errors.Join(ew.err, tw.Flush())
}

// writeIdleMemory prints each agent process's memory at rest, on the
// empty node and in the idle window with the largest burst running: RSS,
// PSS with its anonymous part (heap, stacks; the rest is the process's
// share of its executable's pages) and its peak RSS since it started, and
// the sums, one column per contender.
func writeIdleMemory(ew *errWriter, sums []Summary) {
	for _, w := range []struct {
		title string
		at    func(Summary) *IdleCost
	}{
		{"on the settled node before the burst, no pod running", func(s Summary) *IdleCost { return s.Empty }},
		{"idle window with the largest burst running", func(s Summary) *IdleCost { return s.Idle }},
	} {
		writeMemoryTable(ew, sums, w.title, w.at)
	}
}

func writeMemoryTable(ew *errWriter, sums []Summary, title string, at func(Summary) *IdleCost) {
	var cols []Summary
	for _, s := range sums {
		if c := at(s); c != nil && len(c.ByProcess) > 0 {
			cols = append(cols, s)
		}
	}
	if len(cols) == 0 {
		return
	}
	ew.printf("\n== agent memory at rest, per process: RSS / PSS (anonymous) / peak RSS (%s) ==\n", title)
	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', tabwriter.AlignRight)
	var procs []string
	head := "process\t"
	for _, s := range cols {
		head += fmt.Sprintf("%s bound %s N=%d\t", s.Contender, boundName(s.Bound), at(s).Pods)
		for p := range at(s).ByProcess {
			if !slices.Contains(procs, p) {
				procs = append(procs, p)
			}
		}
	}
	slices.Sort(procs)
	fmt.Fprintln(tw, head)
	cell := func(m ProcMemory) string {
		return fmt.Sprintf("%s / %s (%s) / %s\t", mib(m.RSS), mib(m.PSS), mib(m.PSSAnon), mib(m.HWM))
	}
	for _, p := range procs {
		line := p + "\t"
		for _, s := range cols {
			m, ok := at(s).ByProcess[p]
			if !ok {
				line += "-\t"
				continue
			}
			line += cell(m)
		}
		fmt.Fprintln(tw, line)
	}
	line := "sum\t"
	for _, s := range cols {
		var sum ProcMemory
		for _, m := range at(s).ByProcess {
			sum.RSS += m.RSS
			sum.PSS += m.PSS
			sum.PSSAnon += m.PSSAnon
			sum.HWM += m.HWM
		}
		line += cell(sum)
	}
	fmt.Fprintln(tw, line)
	ew.err = errors.Join(ew.err, tw.Flush())
}

func msec(d Dur) string { return fmt.Sprintf("%dms", d.D().Milliseconds()) }

// msec1 is milliseconds with a decimal: the summary's figures are short.
func msec1(d Dur) string { return fmt.Sprintf("%.1fms", float64(d.D().Microseconds())/1000) }
