package server

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/ptr"
)

// TestResourceMetrics parses /metrics/resource with the Prometheus text
// parser: the kubelet's names, values in seconds and bytes, and the
// container/pod/namespace labels metrics-server reads.
func TestResourceMetrics(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC))
	start := metav1.NewTime(now.Add(-time.Hour))
	sum := &statsapi.Summary{
		Node: statsapi.NodeStats{NodeName: "n",
			CPU:    &statsapi.CPUStats{Time: now, UsageCoreNanoSeconds: ptr.To[uint64](3e9)},
			Memory: &statsapi.MemoryStats{Time: now, WorkingSetBytes: ptr.To[uint64](1 << 30)}},
		Pods: []statsapi.PodStats{{
			PodRef: statsapi.PodReference{Name: "web", Namespace: "default", UID: "u1"},
			CPU:    &statsapi.CPUStats{Time: now, UsageCoreNanoSeconds: ptr.To[uint64](2e9)},
			Memory: &statsapi.MemoryStats{Time: now, WorkingSetBytes: ptr.To[uint64](2048)},
			Containers: []statsapi.ContainerStats{{Name: "app", StartTime: start,
				CPU:    &statsapi.CPUStats{Time: now, UsageCoreNanoSeconds: ptr.To[uint64](1e9)},
				Memory: &statsapi.MemoryStats{Time: now, WorkingSetBytes: ptr.To[uint64](1024)}}},
		}},
	}
	h := resourceMetricsHandler(func(context.Context) (*statsapi.Summary, error) { return sum, nil }, slog.New(slog.NewTextHandler(io.Discard, nil)))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/metrics/resource", nil))
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(w.Body)
	if err != nil {
		t.Fatalf("%v\n%s", err, w.Body.String())
	}
	value := func(name string, labels map[string]string) float64 {
		t.Helper()
		f, ok := fams[name]
		if !ok {
			t.Fatalf("no %s", name)
		}
		for _, m := range f.Metric {
			got := map[string]string{}
			for _, l := range m.Label {
				got[l.GetName()] = l.GetValue()
			}
			match := len(got) == len(labels)
			for k, v := range labels {
				match = match && got[k] == v
			}
			if !match {
				continue
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue()
			case m.Gauge != nil:
				return m.Gauge.GetValue()
			}
		}
		t.Fatalf("%s%v not found", name, labels)
		return 0
	}
	c := map[string]string{"container": "app", "pod": "web", "namespace": "default"}
	p := map[string]string{"pod": "web", "namespace": "default"}
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"node_cpu_usage_seconds_total", nil, 3},
		{"node_memory_working_set_bytes", nil, 1 << 30},
		{"container_cpu_usage_seconds_total", c, 1},
		{"container_memory_working_set_bytes", c, 1024},
		{"container_start_time_seconds", c, float64(start.Unix())},
		{"pod_cpu_usage_seconds_total", p, 2},
		{"pod_memory_working_set_bytes", p, 2048},
		{"scrape_error", nil, 0},
		{"resource_scrape_error", nil, 0},
	} {
		if got := value(tc.name, tc.labels); got != tc.want {
			t.Errorf("%s = %v, want %v", tc.name, got, tc.want)
		}
	}
}
