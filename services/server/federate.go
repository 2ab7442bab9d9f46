package server

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
)

// summedGatherers federates several processes' metrics into the node's
// one /metrics: a family that several daemons serve (rest_client_*,
// kubelet_runtime_operations_*, each counting the requests and CRI calls
// its own process made) is one family whose series are the sums of theirs
// with the same labels — counters, gauges and untyped values added,
// histograms added bucket by bucket — so that each series means the whole
// node, as the kubelet's (one process) does. prometheus.Gatherers would
// refuse such duplicates instead. A family whose type or help differs
// between sources keeps the first source's and the error says so.
type summedGatherers []prometheus.Gatherer

func (gs summedGatherers) Gather() ([]*dto.MetricFamily, error) {
	byName := map[string]*dto.MetricFamily{}
	series := map[string]map[string]*dto.Metric{} // family → label signature → series
	var errs prometheus.MultiError
	for _, g := range gs {
		fams, err := g.Gather()
		if err != nil {
			errs = append(errs, err)
		}
		for _, f := range fams {
			name := f.GetName()
			have, ok := byName[name]
			if !ok {
				have = &dto.MetricFamily{Name: f.Name, Help: f.Help, Type: f.Type, Unit: f.Unit}
				byName[name], series[name] = have, map[string]*dto.Metric{}
			} else if have.GetType() != f.GetType() {
				errs = append(errs, fmt.Errorf("family %s is %s in one daemon and %s in another", name, have.GetType(), f.GetType()))
				continue
			}
			for _, m := range f.Metric {
				sig := labelSignature(m.Label)
				if old, ok := series[name][sig]; ok {
					if err := addInto(old, m, f.GetType()); err != nil {
						errs = append(errs, fmt.Errorf("family %s%s: %w", name, sig, err))
					}
					continue
				}
				c := proto.Clone(m).(*dto.Metric)
				series[name][sig] = c
				have.Metric = append(have.Metric, c)
			}
		}
	}
	out := make([]*dto.MetricFamily, 0, len(byName))
	for _, f := range byName {
		if len(f.Metric) == 0 {
			continue
		}
		sort.Slice(f.Metric, func(i, j int) bool { return labelSignature(f.Metric[i].Label) < labelSignature(f.Metric[j].Label) })
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetName() < out[j].GetName() })
	return out, errs.MaybeUnwrap()
}

// labelSignature is the series' labels, sorted by name, as {a="x",b="y"}.
func labelSignature(ls []*dto.LabelPair) string {
	pairs := make([]string, 0, len(ls))
	for _, l := range ls {
		pairs = append(pairs, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
	}
	slices.Sort(pairs)
	return "{" + strings.Join(pairs, ",") + "}"
}

// addInto adds m's value into into's.
func addInto(into, m *dto.Metric, t dto.MetricType) error {
	switch t {
	case dto.MetricType_COUNTER:
		into.Counter.Value = proto.Float64(into.Counter.GetValue() + m.Counter.GetValue())
	case dto.MetricType_GAUGE:
		into.Gauge.Value = proto.Float64(into.Gauge.GetValue() + m.Gauge.GetValue())
	case dto.MetricType_UNTYPED:
		into.Untyped.Value = proto.Float64(into.Untyped.GetValue() + m.Untyped.GetValue())
	case dto.MetricType_HISTOGRAM:
		h, o := into.Histogram, m.Histogram
		if len(h.Bucket) != len(o.Bucket) {
			return fmt.Errorf("histograms with %d and %d buckets", len(h.Bucket), len(o.Bucket))
		}
		for i, b := range h.Bucket {
			if b.GetUpperBound() != o.Bucket[i].GetUpperBound() {
				return fmt.Errorf("histograms with different buckets (%g, %g)", b.GetUpperBound(), o.Bucket[i].GetUpperBound())
			}
		}
		for i, b := range h.Bucket {
			b.CumulativeCount = proto.Uint64(b.GetCumulativeCount() + o.Bucket[i].GetCumulativeCount())
		}
		h.SampleCount = proto.Uint64(h.GetSampleCount() + o.GetSampleCount())
		h.SampleSum = proto.Float64(h.GetSampleSum() + o.GetSampleSum())
	default:
		return fmt.Errorf("cannot add %s series", t)
	}
	return nil
}
