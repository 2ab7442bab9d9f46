package bench

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	dto "github.com/prometheus/client_model/go"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// metricFamilies scrapes an agent's read-only /metrics (the kubelet's, or
// nodelet-server's with every daemon's families) and lists its families,
// sorted: the bench's coverage step compares the two agents on the same
// pods.
func metricFamilies(ctx context.Context, addr string) ([]string, error) {
	var fams map[string]*dto.MetricFamily
	err := readOnlyGet(ctx, addr, "/metrics", func(r io.Reader) error {
		parser := expfmt.NewTextParser(model.UTF8Validation)
		var err error
		fams, err = parser.TextToMetricFamilies(r)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("/metrics: %w", err)
	}
	out := make([]string, 0, len(fams))
	for name := range fams {
		out = append(out, name)
	}
	slices.Sort(out)
	return out, nil
}

// MetricCoverage is which of the kubelet's metric families nodelet's
// /metrics has, scraped on the same pods in the same round.
type MetricCoverage struct {
	Kubelet int `json:"kubelet"`
	Present int `json:"present"`
	// Missing are the kubelet's families nodelet lacks.
	Missing []string `json:"missing,omitempty"`
}

// String is the figure as the docs give it: present/kubelet (percent).
func (c MetricCoverage) String() string {
	if c.Kubelet == 0 {
		return "no kubelet families"
	}
	return fmt.Sprintf("%d/%d (%.0f%%)", c.Present, c.Kubelet, 100*float64(c.Present)/float64(c.Kubelet))
}

// coverage compares the families of a kubelet run and a nodelet run.
func coverage(kubelet, nodelet []string) MetricCoverage {
	c := MetricCoverage{Kubelet: len(kubelet)}
	for _, f := range kubelet {
		if slices.Contains(nodelet, f) {
			c.Present++
		} else {
			c.Missing = append(c.Missing, f)
		}
	}
	return c
}

// Coverage is the metric family coverage of the result: for the first
// round of each N where both agents scraped their families.
func (r *Result) Coverage() *MetricCoverage {
	for _, k := range r.Runs {
		if k.Contender != Kubelet || len(k.MetricFamilies) == 0 {
			continue
		}
		for _, n := range r.Runs {
			if n.Contender == Nodelet && n.N == k.N && n.Round == k.Round && len(n.MetricFamilies) > 0 {
				c := coverage(k.MetricFamilies, n.MetricFamilies)
				return &c
			}
		}
	}
	return nil
}

// missingLine is the coverage as one line for the table's notes.
func (c MetricCoverage) missingLine() string {
	return fmt.Sprintf("kubelet metric families on nodelet's /metrics: %s; missing: %s", c, strings.Join(c.Missing, " "))
}
