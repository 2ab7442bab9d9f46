package status

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/nodelet/nodelet/schemas"
)

// metrics are the kubelet's metrics under nodelet_ names, with the
// kubelet's meanings where nodelet can observe the same thing:
//
//   - nodelet_pod_start_duration_seconds: from a source first delivering
//     the pod (PodDesired.FirstSeen) to the status first showing all its
//     regular containers running.
//   - nodelet_running_pods / nodelet_running_containers{container_state}:
//     pods with a ready sandbox and containers by state, from the observed
//     bucket.
//   - nodelet_runtime_operations_duration_seconds{operation_type} (and
//     _total, _errors_total): the CRI calls nodelet-status itself makes
//     (Version, Status, ListImages, ImageFsInfo, stats). The runtime's own
//     calls are nodelet-runtime's to measure.
//   - nodelet_pod_worker_duration_seconds{operation_type}: nodelet-status
//     cannot see nodelet-runtime's pod workers; it measures its own per-pod
//     work: computing one pod's status and writing it to the bucket.
//     operation_type is create (first status), update (status changed) or
//     sync (unchanged).
//   - nodelet_pod_status_sync_duration_seconds: one pod status patch to the
//     API server (the kubelet's pod_status_sync_duration_seconds).
//   - nodelet_events_posted_total and nodelet_events_dropped_total{reason}:
//     what became of each event on the bus (the kubelet has no such
//     metric: its recorder drops events with a log line). Every event is
//     counted once in one of them, so that "produced = received + dropped"
//     can be checked; reason is spam_filter (client-go's per-object
//     filter), rejected (the API refused it: its namespace gone, invalid,
//     forbidden), retry_limit, undecodable or expired.
type metrics struct {
	podStartDuration   prometheus.Histogram
	podWorkerDuration  *prometheus.HistogramVec
	runtimeOps         *prometheus.HistogramVec
	runtimeOpsTotal    *prometheus.CounterVec
	runtimeOpsErrors   *prometheus.CounterVec
	statusSyncDuration prometheus.Histogram
	runningPods        prometheus.GaugeFunc
	runningContainers  *prometheus.GaugeVec
	eventsPosted       prometheus.Counter
	eventsDropped      *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, st *store) *metrics {
	m := &metrics{
		podStartDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "nodelet_pod_start_duration_seconds",
			Help: "Duration in seconds from a source first delivering the pod to all its containers running",
			Buckets: []float64{0.5, 1, 2, 3, 4, 5, 6, 8, 10, 20, 30, 45, 60, 120, 180, 240, 300, 360, 480, 600,
				900, 1200, 1800, 2700, 3600},
		}),
		podWorkerDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "nodelet_pod_worker_duration_seconds",
			Help:    "Duration in seconds to compute and store the status of a single pod. Broken down by operation type: create, update, or sync",
			Buckets: prometheus.DefBuckets,
		}, []string{"operation_type"}),
		runtimeOps: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "nodelet_runtime_operations_duration_seconds",
			Help:    "Duration in seconds of runtime operations made by nodelet-status. Broken down by operation type",
			Buckets: prometheus.ExponentialBuckets(.005, 2.5, 14),
		}, []string{"operation_type"}),
		runtimeOpsTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodelet_runtime_operations_total",
			Help: "Cumulative number of runtime operations made by nodelet-status by operation type",
		}, []string{"operation_type"}),
		runtimeOpsErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodelet_runtime_operations_errors_total",
			Help: "Cumulative number of runtime operation errors by operation type",
		}, []string{"operation_type"}),
		statusSyncDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "nodelet_pod_status_sync_duration_seconds",
			Help:    "Duration in seconds to sync a pod status update to the API server",
			Buckets: []float64{0.010, 0.050, 0.100, 0.500, 1, 5, 10, 20, 30, 45, 60},
		}),
		runningContainers: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "nodelet_running_containers",
			Help: "Number of containers currently on the node, by state",
		}, []string{"container_state"}),
		eventsPosted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nodelet_events_posted_total",
			Help: "Events from the bus created or updated in the API server",
		}),
		eventsDropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodelet_events_dropped_total",
			Help: "Events from the bus not posted to the API server, by reason",
		}, []string{"reason"}),
	}
	for _, reason := range []string{"spam_filter", "rejected", "retry_limit", "undecodable", "expired"} {
		m.eventsDropped.WithLabelValues(reason)
	}
	m.runningPods = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "nodelet_running_pods",
		Help: "Number of pods that have a running pod sandbox",
	}, func() float64 {
		st.mu.Lock()
		defer st.mu.Unlock()
		n := 0
		for _, o := range st.observed {
			if o.Sandbox != nil && o.Sandbox.Ready {
				n++
			}
		}
		return float64(n)
	})
	reg.MustRegister(m.podStartDuration, m.podWorkerDuration, m.runtimeOps, m.runtimeOpsTotal,
		m.runtimeOpsErrors, m.statusSyncDuration, m.runningPods, m.eventsPosted, m.eventsDropped, &containersCollector{st: st, vec: m.runningContainers},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// containersCollector counts containers by state at scrape time.
type containersCollector struct {
	st  *store
	vec *prometheus.GaugeVec
}

func (c *containersCollector) Describe(ch chan<- *prometheus.Desc) { c.vec.Describe(ch) }

func (c *containersCollector) Collect(ch chan<- prometheus.Metric) {
	counts := map[string]int{"running": 0, "exited": 0, "created": 0, "unknown": 0}
	c.st.mu.Lock()
	for _, o := range c.st.observed {
		for _, ct := range append(append([]schemas.ContainerObserved{}, o.InitContainers...), o.Containers...) {
			if st := ct.RuntimeState(); st != "" {
				counts[st]++
			}
		}
	}
	c.st.mu.Unlock()
	for state, n := range counts {
		c.vec.WithLabelValues(state).Set(float64(n))
	}
	c.vec.Collect(ch)
}

// timeOp runs one CRI call and records its duration and outcome.
func (m *metrics) timeOp(op string, f func() error) error {
	start := time.Now()
	err := f()
	m.runtimeOps.WithLabelValues(op).Observe(time.Since(start).Seconds())
	m.runtimeOpsTotal.WithLabelValues(op).Inc()
	if err != nil {
		m.runtimeOpsErrors.WithLabelValues(op).Inc()
	}
	return err
}

// criCall is timeOp with a per-call timeout.
func criCall[T any](ctx context.Context, m *metrics, op string, f func(context.Context) (T, error)) (T, error) {
	var out T
	err := m.timeOp(op, func() error {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		var err error
		out, err = f(cctx)
		return err
	})
	return out, err
}
