package runtime

import (
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/kubeletmetrics"
	"github.com/nodelet/nodelet/schemas"
)

// gatherFamilies is every family g has, by name.
func gatherFamilies(t *testing.T, g prometheus.Gatherer) map[string]*dto.MetricFamily {
	t.Helper()
	fams, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		out[f.GetName()] = f
	}
	return out
}

// A pod with an emptyDir volume runs on real containerd: nodelet-runtime's
// registry has the kubelet's families with the kubelet's types, label
// names and buckets, and they counted this pod.
func TestKubeletMetricFamilies(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	pod := newPod("metrics", busybox("app", "trap 'exit 0' TERM; while true; do sleep 1; done"))
	pod.Spec.Volumes = []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	h.run(pod)
	h.waitObserved(pod, 2*time.Minute, "running", func(o *schemas.PodObserved) bool { return running(o, "app") })
	g := prometheus.Gatherers{h.m.Gatherer(), kubeletmetrics.Process()}
	// The next relist after the start is what fills the PLEG's interval.
	waitFor(t, 30*time.Second, "a PLEG relist interval observed", func() (bool, string) {
		f := gatherFamilies(t, g)["kubelet_pleg_relist_interval_seconds"]
		return f != nil && f.Metric[0].GetHistogram().GetSampleCount() > 0, "none yet"
	})
	fams := gatherFamilies(t, g)
	for _, tc := range []struct {
		name    string
		typ     dto.MetricType
		labels  []string
		buckets []float64 // nil: not a histogram or not checked
		// series with these label values must exist and be > 0
		positive map[string]string
	}{
		{name: "kubelet_running_pods", typ: dto.MetricType_GAUGE, positive: map[string]string{}},
		{name: "kubelet_running_containers", typ: dto.MetricType_GAUGE, labels: []string{"container_state"}, positive: map[string]string{"container_state": "running"}},
		{name: "kubelet_pleg_relist_duration_seconds", typ: dto.MetricType_HISTOGRAM, buckets: prometheus.DefBuckets, positive: map[string]string{}},
		{name: "kubelet_pleg_relist_interval_seconds", typ: dto.MetricType_HISTOGRAM, buckets: prometheus.DefBuckets, positive: map[string]string{}},
		{name: "kubelet_pleg_last_seen_seconds", typ: dto.MetricType_GAUGE, positive: map[string]string{}},
		{name: "kubelet_evented_pleg_connection_success_count", typ: dto.MetricType_COUNTER},
		{name: "kubelet_evented_pleg_connection_error_count", typ: dto.MetricType_COUNTER},
		{name: "kubelet_evented_pleg_connection_latency_seconds", typ: dto.MetricType_HISTOGRAM, buckets: prometheus.DefBuckets},
		{name: "kubelet_pod_worker_duration_seconds", typ: dto.MetricType_HISTOGRAM, labels: []string{"operation_type"}, buckets: prometheus.DefBuckets, positive: map[string]string{"operation_type": "create"}},
		{name: "kubelet_started_pods_total", typ: dto.MetricType_COUNTER, positive: map[string]string{}},
		{name: "kubelet_started_pods_errors_total", typ: dto.MetricType_COUNTER},
		{name: "kubelet_run_podsandbox_duration_seconds", typ: dto.MetricType_HISTOGRAM, labels: []string{"runtime_handler"}, buckets: prometheus.DefBuckets, positive: map[string]string{"runtime_handler": ""}},
		{name: "kubelet_started_containers_total", typ: dto.MetricType_COUNTER, labels: []string{"container_type"}, positive: map[string]string{"container_type": "container"}},
		{name: "storage_operation_duration_seconds", typ: dto.MetricType_HISTOGRAM, labels: []string{"volume_plugin", "operation_name", "status", "migrated"},
			buckets: kubeletmetrics.StorageOpBuckets, positive: map[string]string{"volume_plugin": "kubernetes.io/empty-dir", "operation_name": "volume_mount", "status": "success", "migrated": "false"}},
		{name: "kubelet_runtime_operations_total", typ: dto.MetricType_COUNTER, labels: []string{"operation_type"}, positive: map[string]string{"operation_type": "run_podsandbox"}},
		{name: "kubelet_runtime_operations_duration_seconds", typ: dto.MetricType_HISTOGRAM, labels: []string{"operation_type"}, buckets: kubeletmetrics.RuntimeOpBuckets, positive: map[string]string{"operation_type": "create_container"}},
		{name: "kubelet_runtime_operations_errors_total", typ: dto.MetricType_COUNTER, labels: []string{"operation_type"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := fams[tc.name]
			if f == nil {
				t.Fatalf("no family %s", tc.name)
			}
			if f.GetType() != tc.typ || len(f.GetHelp()) < len("[ALPHA] x") || f.GetHelp()[:8] != "[ALPHA] " {
				t.Errorf("%s is %s with help %q, want %s with the kubelet's [ALPHA] help", tc.name, f.GetType(), f.GetHelp(), tc.typ)
			}
			found := tc.positive == nil
			for _, m := range f.Metric {
				var names []string
				match := true
				for _, l := range m.Label {
					names = append(names, l.GetName())
					if want, ok := tc.positive[l.GetName()]; ok && want != l.GetValue() {
						match = false
					}
				}
				slices.Sort(names)
				want := slices.Sorted(slices.Values(tc.labels))
				if !slices.Equal(names, want) {
					t.Errorf("series labels %v, want %v", names, want)
				}
				if h := m.GetHistogram(); h != nil && tc.buckets != nil {
					var got []float64
					for _, b := range h.Bucket {
						got = append(got, b.GetUpperBound())
					}
					if !slices.Equal(got, tc.buckets) {
						t.Errorf("buckets %v, want %v", got, tc.buckets)
					}
				}
				v := m.GetCounter().GetValue() + m.GetGauge().GetValue() + float64(m.GetHistogram().GetSampleCount())
				if match && v > 0 {
					found = true
				}
			}
			if !found {
				t.Errorf("no series %v above 0 in %v", tc.positive, f.Metric)
			}
		})
	}
}
