package soak

import (
	"fmt"
	"image/color"
	"os"
	"sort"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// PlotResult draws one agent's churn against its lifecycles, one panel
// per figure: the agent's processes' PSS, goroutines and fds, what pods
// leave on the node, and the bus store per stream (nodelet).
func PlotResult(res *Result, path string) error {
	var churn []Sample
	for _, s := range res.Samples {
		if s.Phase == PhaseChurn {
			churn = append(churn, s)
		}
	}
	title := func(what string) string { return fmt.Sprintf("%s: %s", res.Agent, what) }
	names := procNames(res)
	panels := []*plot.Plot{
		linesPlot(title("PSS (MiB)"), churn, prefixed(names, "proc.", ".pss"), mib),
		linesPlot(title("goroutines"), churn, prefixed(names, "proc.", ".goroutines"), 1),
		linesPlot(title("open fds"), churn, prefixed(names, "proc.", ".fds"), 1),
		linesPlot(title("node (counts)"), churn, prefixed([]string{"containers", "sandboxes", "mounts", "podCgroups", "ips",
			"cniRules", "veths", "podLogDirs", "podDirs"}, "node.", ""), 1),
	}
	if len(churn) > 0 && len(churn[len(churn)-1].Bus) > 0 {
		panels = append(panels, linesPlot(title("bus store on disk (MiB)"), churn,
			prefixed(sortedKeys(churn[len(churn)-1].Bus), "bus.", ".diskBytes"), mib))
	}
	return savePanels(panels, 2, path)
}

// PlotCompare draws the agents' summed PSS and fds against lifecycles,
// side by side.
func PlotCompare(results []*Result, path string) error {
	var panels []*plot.Plot
	for _, f := range []struct{ k, what string }{{"agent.pss", "agent PSS (MiB)"}, {"agent.fds", "agent open fds"}} {
		p := plot.New()
		p.Title.Text = f.what
		p.X.Label.Text = "pod lifecycles"
		scale := 1.0
		if f.k == "agent.pss" {
			scale = mib
		}
		var args []any
		for _, res := range results {
			var xys plotter.XYs
			for _, s := range res.Samples {
				if v, ok := s.Series()[f.k]; ok && s.Phase == PhaseChurn {
					xys = append(xys, plotter.XY{X: float64(s.Lifecycles), Y: v / scale})
				}
			}
			if len(xys) > 0 {
				args = append(args, res.Agent, xys)
			}
		}
		if err := plotutil.AddLines(p, args...); err != nil {
			return err
		}
		p.Legend.Top = true
		panels = append(panels, p)
	}
	return savePanels(panels, 2, path)
}

func prefixed(names []string, prefix, suffix string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = prefix + n + suffix
	}
	return out
}

// linesPlot draws one line per series key (those present in the samples),
// labelled by the key without its prefix and suffix.
func linesPlot(title string, samples []Sample, keys []string, scale float64) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "pod lifecycles"
	p.Legend.Top = true
	p.Legend.Left = true
	lines := map[string]plotter.XYs{}
	for _, s := range samples {
		v := s.Series()
		for _, k := range keys {
			if y, ok := v[k]; ok {
				lines[k] = append(lines[k], plotter.XY{X: float64(s.Lifecycles), Y: y / scale})
			}
		}
	}
	ks := make([]string, 0, len(lines))
	for k := range lines {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	for i, k := range ks {
		l, err := plotter.NewLine(lines[k])
		if err != nil {
			continue
		}
		l.Color = plotutil.Color(i)
		l.Dashes = plotutil.Dashes(i / 7)
		p.Add(l)
		p.Legend.Add(shortName(k), l)
	}
	if len(ks) == 0 {
		p.Add(plotter.NewGrid())
		p.Title.Text += " (no samples)"
		p.Title.TextStyle.Color = color.Gray{Y: 100}
	}
	return p
}

// shortName is a series key without its kind and figure: proc.runtime.pss
// is "runtime", node.mounts "mounts".
func shortName(k string) string {
	if name, _, ok := procSeries(k); ok {
		return name
	}
	for _, p := range []string{"node.", "bus."} {
		if len(k) > len(p) && k[:len(p)] == p {
			k = k[len(p):]
		}
	}
	for _, s := range []string{".diskBytes"} {
		if len(k) > len(s) && k[len(k)-len(s):] == s {
			k = k[:len(k)-len(s)]
		}
	}
	return k
}

// savePanels tiles the panels cols wide into one PNG.
func savePanels(panels []*plot.Plot, cols int, path string) error {
	rows := (len(panels) + cols - 1) / cols
	const w, h = 9 * vg.Inch, 4.5 * vg.Inch
	img := vgimg.NewWith(vgimg.UseWH(w*vg.Length(cols), h*vg.Length(rows)), vgimg.UseDPI(96))
	dc := draw.New(img)
	grid := make([][]*plot.Plot, rows)
	for r := range grid {
		grid[r] = make([]*plot.Plot, cols)
		for c := range cols {
			if i := r*cols + c; i < len(panels) {
				grid[r][c] = panels[i]
			}
		}
	}
	t := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Inch / 4, PadY: vg.Inch / 4, PadTop: vg.Inch / 8,
		PadBottom: vg.Inch / 8, PadLeft: vg.Inch / 8, PadRight: vg.Inch / 8}
	canvases := plot.Align(grid, t, dc)
	for r := range grid {
		for c := range grid[r] {
			if grid[r][c] != nil {
				grid[r][c].Draw(canvases[r][c])
			}
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
