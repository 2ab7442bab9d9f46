package soak

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/kubernetes"
)

// stepFamilies are the kubelet's histograms that both agents serve on
// /metrics and that time the steps of a pod's start and end: the CRI calls
// (kubelet_runtime_operations_duration_seconds by operation_type), the
// sandbox as the agent saw it, the pod workers' passes, the pod start SLI,
// and the API clients' waits for their rate limiter (by verb). Their
// churn-only distributions say where a pod's start goes on either node,
// side by side.
var stepFamilies = []string{
	"kubelet_pod_start_sli_duration_seconds",
	"kubelet_pod_worker_duration_seconds",
	"kubelet_run_podsandbox_duration_seconds",
	"kubelet_runtime_operations_duration_seconds",
	"rest_client_rate_limiter_duration_seconds",
}

// Step is one histogram series over the churn: its observations between
// the churn's start and its end, with percentiles interpolated within
// buckets as PromQL's histogram_quantile does.
type Step struct {
	// Name is the family and the series' labels, e.g.
	// kubelet_runtime_operations_duration_seconds{operation_type="run_podsandbox"}.
	Name string  `json:"name"`
	N    uint64  `json:"n"`
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
}

// scrapeSteps reads the agent's /metrics through the API server's node
// proxy (both agents serve it there to an admin) and keeps the series of
// stepFamilies.
func scrapeSteps(ctx context.Context, kube kubernetes.Interface, node string) (map[string]*dto.Histogram, error) {
	raw, err := kube.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", node, "proxy", "metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s's /metrics: %w", node, err)
	}
	return parseSteps(raw)
}

// parseSteps keeps the histograms of stepFamilies in a text exposition,
// by series name.
func parseSteps(raw []byte) (map[string]*dto.Histogram, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("parsing /metrics: %w", err)
	}
	out := map[string]*dto.Histogram{}
	for _, name := range stepFamilies {
		f := fams[name]
		if f == nil || f.GetType() != dto.MetricType_HISTOGRAM {
			continue
		}
		for _, m := range f.Metric {
			var labels []string
			for _, l := range m.Label {
				if l.GetName() == "host" {
					continue // the API server's address, the same for both
				}
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			if m.Histogram == nil {
				continue
			}
			sort.Strings(labels)
			series := name
			if len(labels) > 0 {
				series += "{" + strings.Join(labels, ",") + "}"
			}
			out[series] = m.Histogram
		}
	}
	return out, nil
}

// stepsBetween is each series' observations after before (the churn's
// start) up to after (its end); a series with none is left out.
func stepsBetween(before, after map[string]*dto.Histogram) []Step {
	var steps []Step
	for name, a := range after {
		b := before[name]
		n := a.GetSampleCount() - b.GetSampleCount()
		if b.GetSampleCount() > a.GetSampleCount() || n == 0 {
			// None, or a process restarted between (its counts began again).
			continue
		}
		bounds, counts := histogramDelta(b, a)
		s := Step{Name: name, N: n, Mean: (a.GetSampleSum() - b.GetSampleSum()) / float64(n)}
		s.P50, s.P90, s.P99 = bucketQuantile(0.5, bounds, counts, n), bucketQuantile(0.9, bounds, counts, n), bucketQuantile(0.99, bounds, counts, n)
		steps = append(steps, s)
	}
	sort.Slice(steps, func(i, j int) bool { return steps[i].Name < steps[j].Name })
	return steps
}

// histogramDelta is after's cumulative bucket counts less before's, by
// upper bound (before may lack a bucket: it counts 0 there).
func histogramDelta(before, after *dto.Histogram) ([]float64, []uint64) {
	had := map[float64]uint64{}
	for _, b := range before.GetBucket() {
		had[b.GetUpperBound()] = b.GetCumulativeCount()
	}
	var bounds []float64
	var counts []uint64
	for _, b := range after.GetBucket() {
		bounds = append(bounds, b.GetUpperBound())
		counts = append(counts, b.GetCumulativeCount()-min(had[b.GetUpperBound()], b.GetCumulativeCount()))
	}
	return bounds, counts
}

// bucketQuantile is PromQL's histogram_quantile over cumulative counts
// of n observations: linear within the bucket the rank falls in (from 0
// for the first), the highest finite bound for a rank past it.
func bucketQuantile(q float64, bounds []float64, counts []uint64, n uint64) float64 {
	if n == 0 || len(bounds) == 0 {
		return math.NaN()
	}
	rank := q * float64(n)
	for i, c := range counts {
		if float64(c) < rank {
			continue
		}
		if math.IsInf(bounds[i], 1) {
			break
		}
		lower, below := 0.0, uint64(0)
		if i > 0 {
			lower, below = bounds[i-1], counts[i-1]
		}
		if c == below {
			return bounds[i]
		}
		return lower + (bounds[i]-lower)*(rank-float64(below))/float64(c-below)
	}
	for i := len(bounds) - 1; i >= 0; i-- {
		if !math.IsInf(bounds[i], 1) {
			return bounds[i]
		}
	}
	return math.NaN()
}

func (s Step) quantiles() string {
	return fmt.Sprintf("%.3f/%.3f/%.3f", s.P50, s.P90, s.P99)
}

// stepLabel is a series' name in short: "cri run_podsandbox",
// "pod_worker sync", "rest_client_rate_limiter GET".
func stepLabel(name string) string {
	if op, ok := strings.CutPrefix(name, `kubelet_runtime_operations_duration_seconds{operation_type="`); ok {
		return "cri " + strings.TrimSuffix(op, `"}`)
	}
	name = strings.TrimPrefix(name, "kubelet_")
	if i := strings.Index(name, "_duration_seconds"); i >= 0 {
		name = name[:i] + name[i+len("_duration_seconds"):]
	}
	if family, labels, ok := strings.Cut(name, "{"); ok {
		name = family
		for _, kv := range strings.Split(strings.TrimSuffix(labels, "}"), ",") {
			if _, v, ok := strings.Cut(kv, "="); ok {
				name += " " + strings.Trim(v, `"`)
			}
		}
	}
	return name
}

// stepNames are the series any of results has, in order.
func stepNames(results []*Result) []string {
	var names []string
	for _, r := range results {
		for _, st := range r.Steps {
			if !slices.Contains(names, st.Name) {
				names = append(names, st.Name)
			}
		}
	}
	sort.Strings(names)
	return names
}
