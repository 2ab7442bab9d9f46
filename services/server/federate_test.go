package server

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// The same family from several daemons is one family of summed series.
func TestSummedGatherers(t *testing.T) {
	reg := func(f func(r *prometheus.Registry)) prometheus.Gatherer {
		r := prometheus.NewRegistry()
		f(r)
		return r
	}
	counter := func(v float64, code string) prometheus.Gatherer {
		return reg(func(r *prometheus.Registry) {
			c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rest_client_requests_total", Help: "h"}, []string{"code"})
			c.WithLabelValues(code).Add(v)
			r.MustRegister(c)
		})
	}
	hist := func(vs ...float64) prometheus.Gatherer {
		return reg(func(r *prometheus.Registry) {
			h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "kubelet_runtime_operations_duration_seconds", Help: "h", Buckets: []float64{1, 2}})
			for _, v := range vs {
				h.Observe(v)
			}
			r.MustRegister(h)
		})
	}
	for _, tc := range []struct {
		name    string
		sources summedGatherers
		family  string
		check   func(f *dto.MetricFamily) bool
		wantErr bool
	}{
		{name: "counters with the same labels add", sources: summedGatherers{counter(2, "200"), counter(3, "200")},
			family: "rest_client_requests_total",
			check:  func(f *dto.MetricFamily) bool { return len(f.Metric) == 1 && f.Metric[0].GetCounter().GetValue() == 5 }},
		{name: "other labels stay apart", sources: summedGatherers{counter(2, "200"), counter(3, "500")},
			family: "rest_client_requests_total",
			check:  func(f *dto.MetricFamily) bool { return len(f.Metric) == 2 }},
		{name: "histograms add bucket by bucket", sources: summedGatherers{hist(0.5, 1.5), hist(0.5, 3)},
			family: "kubelet_runtime_operations_duration_seconds",
			check: func(f *dto.MetricFamily) bool {
				h := f.Metric[0].GetHistogram()
				return h.GetSampleCount() == 4 && h.GetSampleSum() == 5.5 && h.Bucket[0].GetCumulativeCount() == 2 && h.Bucket[1].GetCumulativeCount() == 3
			}},
		{name: "a type clash keeps the first and says so", wantErr: true, family: "rest_client_requests_total",
			sources: summedGatherers{counter(1, "200"), reg(func(r *prometheus.Registry) {
				g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "rest_client_requests_total", Help: "h"}, []string{"code"})
				g.WithLabelValues("200").Set(7)
				r.MustRegister(g)
			})},
			check: func(f *dto.MetricFamily) bool { return f.Metric[0].GetCounter().GetValue() == 1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fams, err := tc.sources.Gather()
			if (err != nil) != tc.wantErr {
				t.Fatalf("error %v, want error %v", err, tc.wantErr)
			}
			var f *dto.MetricFamily
			for _, x := range fams {
				if x.GetName() == tc.family {
					f = x
				}
			}
			if f == nil || !tc.check(f) {
				t.Fatalf("%s = %v", tc.family, f)
			}
		})
	}
}

func TestMetricPath(t *testing.T) {
	for path, want := range map[string]string{
		"/pods": "pods", "/pods/": "pods", "/stats/summary": "stats", "/metrics": "metrics",
		"/metrics/cadvisor": "metrics/cadvisor", "/containerLogs/ns/pod/c": "containerLogs",
		"/exec/ns/pod/c": "exec", "/nope": "other", "/": "other", "/spec/": "other",
	} {
		if got := metricPath(path); got != want {
			t.Errorf("metricPath(%q) = %q, want %q", path, got, want)
		}
	}
}
