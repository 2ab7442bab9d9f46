package prober

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metric label values, as the kubelet's prober_probe_total uses them.
const (
	metricResultSuccessful = "successful"
	metricResultFailed     = "failed"
	metricResultUnknown    = "unknown"
)

// The kubelet's prober metrics (prober_probe_total and
// prober_probe_duration_seconds) under nodelet_ names, with the same labels
// and the same meaning: one count per probe executed, by result; the
// duration of probes that succeeded or ended unknown (as the kubelet, not
// of failed ones, whose duration is mostly the timeout).
var (
	probeTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nodelet_prober_probe_total",
		Help: "Cumulative number of a liveness, readiness or startup probe for a container by result.",
	}, []string{"probe_type", "result", "container", "pod", "namespace", "pod_uid"})

	probeDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "nodelet_prober_probe_duration_seconds",
		Help:    "Duration in seconds for a probe response.",
		Buckets: prometheus.DefBuckets,
	}, []string{"probe_type", "container", "pod", "namespace"})

	// registry holds nodelet-prober's metrics only, so that a caller can
	// expose them beside its own without name clashes.
	registry = prometheus.NewRegistry()
)

func init() {
	registry.MustRegister(probeTotal, probeDuration)
}

// Gatherer returns nodelet-prober's metrics: nodelet_prober_probe_total
// {probe_type,result,container,pod,namespace,pod_uid} and
// nodelet_prober_probe_duration_seconds{probe_type,container,pod,namespace}.
// Series of a probe vanish when its worker stops. The registry is
// per process; whoever serves /metrics for the process gathers it.
func Gatherer() prometheus.Gatherer { return registry }

// probeMetrics are one worker's series.
type probeMetrics struct {
	success, failed, unknown prometheus.Counter
	duration                 prometheus.Observer
	labels                   prometheus.Labels // of the duration
	total                    []prometheus.Labels
}

func newProbeMetrics(kind, container, pod, namespace, uid string) *probeMetrics {
	pm := &probeMetrics{labels: prometheus.Labels{
		"probe_type": kubeletProbeType(kind), "container": container, "pod": pod, "namespace": namespace,
	}}
	with := func(result string) prometheus.Counter {
		cl := prometheus.Labels{"result": result, "pod_uid": uid}
		for k, v := range pm.labels {
			cl[k] = v
		}
		pm.total = append(pm.total, cl)
		return probeTotal.With(cl)
	}
	pm.success = with(metricResultSuccessful)
	pm.failed = with(metricResultFailed)
	pm.unknown = with(metricResultUnknown)
	pm.duration = probeDuration.With(pm.labels)
	return pm
}

// delete removes the worker's series (the kubelet does the same when a
// probe worker stops, so a dead pod leaves no series behind).
func (pm *probeMetrics) delete() {
	for _, l := range pm.total {
		probeTotal.Delete(l)
	}
	probeDuration.Delete(pm.labels)
}
