package soak

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

const mib = 1 << 20

// progress is one sample as a log line.
func progress(agent string, s Sample) string {
	v := s.Series()
	return fmt.Sprintf("%s %5.0fs %-6s lifecycles %5d pods %3d | agent PSS %6.1f MiB goroutines %5.0f fds %4.0f | containers %3d sandboxes %3d mounts %4d IPs %3d | events %s",
		agent, s.At, s.Phase, s.Lifecycles, s.Pods, v["agent.pss"]/mib, v["agent.goroutines"], v["agent.fds"],
		s.Node.Containers, s.Node.Sandboxes, s.Node.Mounts, s.Node.IPs, eventsLine(s.Events))
}

func eventsLine(e *Events) string {
	if e == nil {
		return "-"
	}
	if e.Produced == 0 && e.Posted == 0 {
		return fmt.Sprintf("received %d", e.Received)
	}
	return fmt.Sprintf("produced %d posted %d dropped %d received %d", e.Produced, e.Posted, e.DroppedTotal(), e.Received)
}

// lastChurn is the last sample of the churn (the node still full).
func (res *Result) lastChurn() *Sample {
	for i := len(res.Samples) - 1; i >= 0; i-- {
		if res.Samples[i].Phase == PhaseChurn {
			return &res.Samples[i]
		}
	}
	return nil
}

// churnDelta is how much of a process's counter (CPU seconds, bytes)
// grew between the churn's first and last samples, with the seconds and
// the lifecycles between them; for "agent", summed over the agent's
// processes. Not known when a process is missing from either sample,
// restarted in between, or told nothing of the counter.
func (res *Result) churnDelta(name string, counter func(Proc) (float64, bool)) (delta, seconds float64, lifecycles int, ok bool) {
	var first, last *Sample
	for i := range res.Samples {
		if res.Samples[i].Phase == PhaseChurn {
			if first == nil {
				first = &res.Samples[i]
			}
			last = &res.Samples[i]
		}
	}
	if first == nil || last.At <= first.At {
		return 0, 0, 0, false
	}
	var names []string
	if name == "agent" {
		for n, p := range last.Procs {
			if p.Agent {
				names = append(names, n)
			}
		}
	} else {
		names = []string{name}
	}
	for _, n := range names {
		a, ok1 := first.Procs[n]
		b, ok2 := last.Procs[n]
		if !ok1 || !ok2 || a.PID != b.PID {
			return 0, 0, 0, false
		}
		x, okA := counter(a)
		y, okB := counter(b)
		if !okA || !okB {
			return 0, 0, 0, false
		}
		delta += y - x
	}
	return delta, last.At - first.At, last.Lifecycles - first.Lifecycles, len(names) > 0
}

// cpuCell is the CPU a process used in the churn, in cores (CPU seconds
// per second).
func (res *Result) cpuCell(name string) string {
	if d, sec, _, ok := res.churnDelta(name, func(p Proc) (float64, bool) { return p.CPU, p.CPU != 0 }); ok {
		return fmt.Sprintf("%.2f", d/sec)
	}
	return "-"
}

// diskCell is what a process wrote to and read from storage in the churn,
// in MiB per 1,000 lifecycles: the cost of a pod's life in I/O, which
// does not depend on how fast the machine churned.
func (res *Result) diskCell(name string) string {
	w, _, n, ok := res.churnDelta(name, func(p Proc) (float64, bool) { return float64(p.DiskWrite), p.IO })
	r, _, _, _ := res.churnDelta(name, func(p Proc) (float64, bool) { return float64(p.DiskRead), p.IO })
	if !ok || n <= 0 {
		return "-"
	}
	per := func(b float64) string { return fmt.Sprintf("%.0f", b/mib/float64(n)*1000) }
	return per(w) + "/" + per(r)
}

func (res *Result) growth(series string) (Growth, bool) {
	for _, g := range res.Growth {
		if g.Series == series {
			return g, true
		}
	}
	return Growth{}, false
}

// Print writes the report's tables.
func (rep *Report) Print(w io.Writer) {
	for _, res := range rep.Results {
		res.Print(w)
	}
	if len(rep.Results) > 1 {
		printCompare(w, rep.Results)
	}
}

// value reads series k of a sample (NaN-free: 0 when absent), and says
// whether it was there.
func value(s *Sample, k string) (float64, bool) {
	if s == nil {
		return 0, false
	}
	v, ok := s.Series()[k]
	return v, ok
}

func cell(s *Sample, k string, scale float64, format string) string {
	v, ok := value(s, k)
	if !ok {
		return "-"
	}
	return fmt.Sprintf(format, v/scale)
}

func (res *Result) growthCell(k string, scale float64) string {
	g, ok := res.growth(k)
	if !ok {
		return "-"
	}
	s := fmt.Sprintf("%+.2f", g.Per1000/scale)
	if g.LateSamples != g.Samples {
		s += fmt.Sprintf(" %+.2f", g.Late/scale)
	}
	if g.Over {
		s += "!"
	}
	return s
}

// Print writes one agent's figures.
func (res *Result) Print(w io.Writer) {
	end := res.lastChurn()
	var before, after *Sample
	if res.Before != nil {
		before = &res.Before.Sample
	}
	if res.After != nil {
		after = &res.After.Sample
	}
	fmt.Fprintf(w, "\n== %s on %s: %d lifecycles at %d pods; fill %.0fs, churn %.0fs, drain %.0fs; %d container restarts\n",
		res.Agent, res.Node, res.Lifecycles, res.Pods, res.FillSeconds, res.ChurnSeconds, res.DrainSeconds, res.Restarts)
	if len(res.Actions) > 0 {
		fmt.Fprintf(w, "actions: %s\n", mapLine(res.Actions))
	}
	if l := res.PodStart; l != nil {
		fmt.Fprintf(w, "pod start in the churn (bound to first container started, whole seconds): %d pods, p50 %.0f, p90 %.0f, p99 %.0f, max %.0f s\n",
			l.N, l.P50, l.P90, l.P99, l.Max)
	}
	if len(res.Steps) > 0 {
		fmt.Fprintf(w, "steps in the churn, the agent's own histograms (n, mean, p50/p90/p99 s):\n")
		for _, st := range res.Steps {
			fmt.Fprintf(w, "  %-44s %7d %7.3f %s\n", stepLabel(st.Name), st.N, st.Mean, st.quantiles())
		}
	}
	var cpu []string
	for _, name := range append(procNames(res), "agent") {
		cpu = append(cpu, name+" "+res.cpuCell(name))
	}
	fmt.Fprintf(w, "CPU in the churn (cores): %s\n", strings.Join(cpu, ", "))
	var disk []string
	for _, name := range append(procNames(res), "agent") {
		disk = append(disk, name+" "+res.diskCell(name))
	}
	fmt.Fprintf(w, "disk written/read in the churn (MiB per 1,000 lifecycles): %s\n", strings.Join(disk, ", "))
	fmt.Fprintf(w, "growth per 1,000 lifecycles after the first %d, then over the last half of those (least squares over the churn's samples; ! the last half over the bound)\n", res.Warmup)
	fmt.Fprintf(w, "%-12s %27s %13s %13s %23s %12s %17s %11s\n", "process", "PSS MiB before/end/after", "PSS/1k", "RSS/1k",
		"goroutines b/e/a", "gor/1k", "fds b/e/a", "fds/1k")
	names := procNames(res)
	for _, name := range append(names, "agent") {
		k := "proc." + name + "."
		if name == "agent" {
			k = "agent."
		}
		label := name
		if end != nil {
			if p, ok := end.Procs[name]; ok && !p.Agent {
				label += "*"
			}
		}
		fmt.Fprintf(w, "%-12s %27s %13s %13s %23s %12s %17s %11s\n", label,
			cell(before, k+"pss", mib, "%.1f")+"/"+cell(end, k+"pss", mib, "%.1f")+"/"+cell(after, k+"pss", mib, "%.1f"),
			res.growthCell(k+"pss", mib), res.growthCell(k+"rss", mib),
			cell(before, k+"goroutines", 1, "%.0f")+"/"+cell(end, k+"goroutines", 1, "%.0f")+"/"+cell(after, k+"goroutines", 1, "%.0f"),
			res.growthCell(k+"goroutines", 1),
			cell(before, k+"fds", 1, "%.0f")+"/"+cell(end, k+"fds", 1, "%.0f")+"/"+cell(after, k+"fds", 1, "%.0f"),
			res.growthCell(k+"fds", 1))
	}
	fmt.Fprintln(w, "(* not the agent's: no bound)")
	var node []string
	for _, k := range sortedKeys(Counts{}.values()) {
		node = append(node, fmt.Sprintf("%s %s/%s/%s (%s)", k, cell(before, "node."+k, 1, "%.0f"), cell(end, "node."+k, 1, "%.0f"),
			cell(after, "node."+k, 1, "%.0f"), res.growthCell("node."+k, 1)))
	}
	fmt.Fprintf(w, "node before/end/after (per 1k): %s\n", strings.Join(node, ", "))
	if end != nil && len(end.Bus) > 0 {
		fmt.Fprintf(w, "bus store on disk before/end/after: %s/%s/%s MiB (%s MiB per 1k)", cell(before, "bus.total.diskBytes", mib, "%.1f"),
			cell(end, "bus.total.diskBytes", mib, "%.1f"), cell(after, "bus.total.diskBytes", mib, "%.1f"), res.growthCell("bus.total.diskBytes", mib))
		var streams []string
		for _, name := range sortedKeys(end.Bus) {
			streams = append(streams, fmt.Sprintf("%s %.2f (%s)", name, float64(end.Bus[name].DiskBytes)/mib, res.growthCell("bus."+name+".diskBytes", mib)))
		}
		fmt.Fprintf(w, "; by stream at the end: %s\n", strings.Join(streams, ", "))
	}
	e := res.Events
	if e.Produced > 0 || e.Posted > 0 {
		status := "balanced"
		if m := e.Mismatch(); m != "" {
			status = "MISMATCH: " + m
		}
		fmt.Fprintf(w, "events: produced %d = posted %d + dropped %d (%s); received %d in %d objects: %s\n",
			e.Produced, e.Posted, e.DroppedTotal(), mapLine(e.Dropped), e.Received, e.Objects, status)
	} else {
		fmt.Fprintf(w, "events: received %d in %d objects (the kubelet counts nothing it produced)\n", e.Received, e.Objects)
	}
	fmt.Fprintf(w, "events received by reason: %s\n", mapLine(e.ByReason))
	if len(res.Leftovers) == 0 {
		fmt.Fprintf(w, "after the drain: nothing left (clean %.0fs after the last pod left the API)\n", res.CleanAfterSeconds)
	} else {
		fmt.Fprintln(w, "after the drain, LEFT:")
		for _, l := range res.Leftovers {
			items := l.Items
			more := ""
			if len(items) > 10 {
				items, more = items[:10], fmt.Sprintf(" … and %d more", len(l.Items)-10)
			}
			fmt.Fprintf(w, "  %s (%d): %s%s\n", l.Kind, len(l.Items), strings.Join(items, "; "), more)
		}
	}
	var over []string
	for _, g := range res.Growth {
		if g.Over {
			unit := 1.0
			if _, fig, _ := procSeries(g.Series); fig == "pss" || fig == "rss" {
				unit = mib
			}
			over = append(over, fmt.Sprintf("%s %+.1f/1k over the last half > %g", g.Series, g.Late/unit, g.Bound/unit))
		}
	}
	if len(over) > 0 {
		fmt.Fprintf(w, "OVER BOUND: %s\n", strings.Join(over, ", "))
	}
	if len(res.Errors) > 0 {
		fmt.Fprintf(w, "errors (%d), first: %s\n", len(res.Errors), res.Errors[0])
	}
}

func procNames(res *Result) []string {
	seen := map[string]bool{}
	for _, s := range res.Samples {
		for name := range s.Procs {
			seen[name] = true
		}
	}
	names := sortedKeys(seen)
	// The agent's processes first.
	sort.SliceStable(names, func(i, j int) bool {
		return isAgentProc(res, names[i]) && !isAgentProc(res, names[j])
	})
	return names
}

func isAgentProc(res *Result, name string) bool {
	for _, s := range res.Samples {
		if p, ok := s.Procs[name]; ok {
			return p.Agent
		}
	}
	return false
}

func printCompare(w io.Writer, results []*Result) {
	fmt.Fprintf(w, "\n== side by side\n%-34s", "")
	for _, r := range results {
		fmt.Fprintf(w, " %16s", r.Agent)
	}
	fmt.Fprintln(w)
	row := func(label string, f func(r *Result) string) {
		fmt.Fprintf(w, "%-34s", label)
		for _, r := range results {
			fmt.Fprintf(w, " %16s", f(r))
		}
		fmt.Fprintln(w)
	}
	rest := func(r *Result, after bool) *Sample {
		if after && r.After != nil {
			return &r.After.Sample
		}
		if !after && r.Before != nil {
			return &r.Before.Sample
		}
		return nil
	}
	row("lifecycles (per minute of churn)", func(r *Result) string {
		return fmt.Sprintf("%d (%.0f)", r.Lifecycles, float64(r.Lifecycles)/max(r.ChurnSeconds, 1)*60)
	})
	for _, f := range []struct {
		label, k string
		scale    float64
		format   string
	}{{"agent PSS MiB", "agent.pss", mib, "%.1f"}, {"agent RSS MiB", "agent.rss", mib, "%.1f"},
		{"agent goroutines", "agent.goroutines", 1, "%.0f"}, {"agent fds", "agent.fds", 1, "%.0f"}} {
		row(f.label+" before/end/after", func(r *Result) string {
			return cell(rest(r, false), f.k, f.scale, f.format) + "/" + cell(r.lastChurn(), f.k, f.scale, f.format) + "/" +
				cell(rest(r, true), f.k, f.scale, f.format)
		})
		row(f.label+" per 1k lifecycles", func(r *Result) string { return r.growthCell(f.k, f.scale) })
	}
	row("pod start p50/p99/max in the churn", func(r *Result) string { return r.PodStart.String() })
	for _, name := range stepNames(results) {
		row(stepLabel(name)+" p50/p99", func(r *Result) string {
			for _, st := range r.Steps {
				if st.Name == name {
					return fmt.Sprintf("%.2f/%.2f", st.P50, st.P99)
				}
			}
			return "-"
		})
	}
	row("agent CPU in the churn (cores)", func(r *Result) string { return r.cpuCell("agent") })
	row("containerd CPU in the churn (cores)", func(r *Result) string { return r.cpuCell("containerd") })
	row("agent disk written/read, MiB per 1k lifecycles", func(r *Result) string { return r.diskCell("agent") })
	row("containerd disk written/read, MiB per 1k", func(r *Result) string { return r.diskCell("containerd") })
	row("containerd PSS MiB per 1k", func(r *Result) string { return r.growthCell("proc.containerd.pss", mib) })
	row("leftovers after drain", func(r *Result) string {
		n := 0
		for _, l := range r.Leftovers {
			n += len(l.Items)
		}
		return fmt.Sprint(n)
	})
	row("events received", func(r *Result) string { return fmt.Sprint(r.Events.Received) })
	row("container restarts", func(r *Result) string { return fmt.Sprint(r.Restarts) })
}

func mapLine[V int | int64](m map[string]V) string {
	var parts []string
	for _, k := range sortedKeys(m) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
