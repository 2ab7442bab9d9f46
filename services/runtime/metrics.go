package runtime

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodelet/nodelet/internal/kubeletmetrics"
	"github.com/nodelet/nodelet/schemas"
	"github.com/nodelet/nodelet/services/runtime/volumes"
)

// metrics are the kubelet's families whose facts are nodelet-runtime's
// (pkg/kubelet/metrics/metrics.go), in the daemon's own registry, served on
// its metrics socket (its CRI calls, kubelet_runtime_operations_*, are the
// process's: internal/cri):
//
//   - the PLEG: kubelet_pleg_relist_duration_seconds,
//     kubelet_pleg_relist_interval_seconds, kubelet_pleg_last_seen_seconds;
//     its CRI event stream (the kubelet's evented PLEG, pkg/kubelet/pleg/evented.go):
//     kubelet_evented_pleg_connection_success_count and _error_count,
//     kubelet_evented_pleg_connection_latency_seconds (an event's age on
//     arrival);
//   - pod workers: kubelet_pod_worker_duration_seconds{operation_type}
//     (create for a pod's first sync in this process, sync after, kill
//     while the pod is being killed);
//   - starts: kubelet_started_pods_total and _errors_total (sandboxes),
//     kubelet_run_podsandbox_duration_seconds and _errors_total
//     {runtime_handler}, kubelet_started_containers_total{container_type}
//     and kubelet_started_containers_errors_total{container_type,code};
//   - kubelet_image_pull_duration_seconds{image_size_in_bytes};
//   - what runs: kubelet_running_pods, kubelet_running_containers
//     {container_state}, from the observed state nodelet-runtime publishes;
//   - storage_operation_duration_seconds (volumes.StorageOperationDuration).
type metrics struct {
	registry *prometheus.Registry

	plegRelistDuration prometheus.Histogram
	plegRelistInterval prometheus.Histogram
	plegLastSeen       prometheus.Gauge
	eventedConn        prometheus.Counter
	eventedConnErr     prometheus.Counter
	eventedConnLatency prometheus.Histogram
	podWorkerDuration  *prometheus.HistogramVec
	startedPods        prometheus.Counter
	startedPodsErrors  prometheus.Counter
	sandboxDuration    *prometheus.HistogramVec
	sandboxErrors      *prometheus.CounterVec
	startedContainers  *prometheus.CounterVec
	containersErrors   *prometheus.CounterVec
	imagePullDuration  *prometheus.HistogramVec

	// seen are the pods synced once in this process.
	mu   sync.Mutex
	seen map[string]bool
}

// synced says whether uid was synced before, and remembers it was.
func (m *metrics) synced(uid string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.seen[uid] {
		return true
	}
	m.seen[uid] = true
	return false
}

// forget drops a pod removed from the node.
func (m *metrics) forget(uid string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.seen, uid)
}

func newMetrics(observed *observedWriter) *metrics {
	m := &metrics{
		registry: prometheus.NewRegistry(), seen: map[string]bool{},
		plegRelistDuration: kubeletmetrics.Histogram("kubelet_pleg_relist_duration_seconds",
			"Duration in seconds for relisting pods in PLEG.", prometheus.DefBuckets),
		plegRelistInterval: kubeletmetrics.Histogram("kubelet_pleg_relist_interval_seconds",
			"Interval in seconds between relisting in PLEG.", prometheus.DefBuckets),
		plegLastSeen: kubeletmetrics.Gauge("kubelet_pleg_last_seen_seconds",
			"Timestamp in seconds when PLEG was last seen active."),
		eventedConn: kubeletmetrics.Counter("kubelet_evented_pleg_connection_success_count",
			"The number of times a streaming client was obtained to receive CRI Events."),
		eventedConnErr: kubeletmetrics.Counter("kubelet_evented_pleg_connection_error_count",
			"The number of errors encountered during the establishment of streaming connection with the CRI runtime."),
		eventedConnLatency: kubeletmetrics.Histogram("kubelet_evented_pleg_connection_latency_seconds",
			"The latency of streaming connection with the CRI runtime, measured in seconds.", prometheus.DefBuckets),
		podWorkerDuration: kubeletmetrics.HistogramVec("kubelet_pod_worker_duration_seconds",
			"Duration in seconds to sync a single pod. Broken down by operation type: create, update, or sync",
			prometheus.DefBuckets, "operation_type"),
		startedPods:       kubeletmetrics.Counter("kubelet_started_pods_total", "Cumulative number of pods started"),
		startedPodsErrors: kubeletmetrics.Counter("kubelet_started_pods_errors_total", "Cumulative number of errors when starting pods"),
		sandboxDuration: kubeletmetrics.HistogramVec("kubelet_run_podsandbox_duration_seconds",
			"Duration in seconds of the run_podsandbox operations. Broken down by RuntimeClass.Handler.",
			prometheus.DefBuckets, "runtime_handler"),
		sandboxErrors: kubeletmetrics.CounterVec("kubelet_run_podsandbox_errors_total",
			"Cumulative number of the run_podsandbox operation errors by RuntimeClass.Handler.", "runtime_handler"),
		startedContainers: kubeletmetrics.CounterVec("kubelet_started_containers_total",
			"Cumulative number of containers started", "container_type"),
		containersErrors: kubeletmetrics.CounterVec("kubelet_started_containers_errors_total",
			"Cumulative number of errors when starting containers", "container_type", "code"),
		imagePullDuration: kubeletmetrics.HistogramVec("kubelet_image_pull_duration_seconds",
			"Duration in seconds to pull an image.", kubeletmetrics.ImagePullBuckets, "image_size_in_bytes"),
	}
	m.registry.MustRegister(m.plegRelistDuration, m.plegRelistInterval, m.plegLastSeen,
		m.eventedConn, m.eventedConnErr, m.eventedConnLatency, m.podWorkerDuration,
		m.startedPods, m.startedPodsErrors, m.sandboxDuration, m.sandboxErrors, m.startedContainers,
		m.containersErrors, m.imagePullDuration, volumes.StorageOperationDuration,
		kubeletmetrics.GaugeFunc("kubelet_running_pods", "Number of pods that have a running pod sandbox", observed.runningPods),
		&runningContainers{observed: observed, vec: kubeletmetrics.GaugeVec("kubelet_running_containers",
			"Number of containers currently running", "container_state")})
	return m
}

// Gatherer is nodelet-runtime's metrics registry, served on its metrics
// socket for nodelet-server's /metrics.
func (m *Daemon) Gatherer() prometheus.Gatherer { return m.metrics.registry }

// relisted records one relist of the PLEG that began at start, the
// previous one at prev (zero: none): the kubelet's GenericPLEG.Relist.
func (m *metrics) relisted(start, prev, now time.Time) {
	m.plegLastSeen.Set(float64(now.Unix()))
	if !prev.IsZero() {
		m.plegRelistInterval.Observe(start.Sub(prev).Seconds())
	}
	m.plegRelistDuration.Observe(now.Sub(start).Seconds())
}

// containerEvent records a CRI container event's age on arrival, made at
// createdAt (Unix ns): the kubelet's EventedPLEG.updateLatencyMetric.
func (m *metrics) containerEvent(createdAt int64, now time.Time) {
	m.eventedConnLatency.Observe(time.Duration(now.UnixNano() - createdAt).Seconds())
}

// containerType is the kubelet's container_type label value of a kind.
func containerType(kind string) string {
	switch kind {
	case schemas.ContainerKindInit, schemas.ContainerKindSidecar:
		return "init_container"
	case schemas.ContainerKindEphemeral:
		return "ephemeral_container"
	}
	return "container"
}

// imageSizeBucket is the kubelet's GetImageSizeBucket.
func imageSizeBucket(size uint64) string {
	if size == 0 {
		return "N/A"
	}
	const mb, gb = 1024 * 1024, 1024 * 1024 * 1024
	buckets := []struct {
		lower uint64
		label string
	}{{0, "0-10MB"}, {10 * mb, "10MB-100MB"}, {100 * mb, "100MB-500MB"}, {500 * mb, "500MB-1GB"}, {1 * gb, "1GB-5GB"},
		{5 * gb, "5GB-10GB"}, {10 * gb, "10GB-20GB"}, {20 * gb, "20GB-30GB"}, {30 * gb, "30GB-40GB"},
		{40 * gb, "40GB-60GB"}, {60 * gb, "60GB-100GB"}, {100 * gb, "GT100GB"}}
	for i := len(buckets) - 1; i >= 0; i-- {
		if size > buckets[i].lower {
			return buckets[i].label
		}
	}
	return ""
}

// runningContainers counts the observed containers by state at scrape
// time, as the kubelet's RunningContainerCount (running, exited, created,
// unknown).
type runningContainers struct {
	observed *observedWriter
	vec      *prometheus.GaugeVec
}

func (c *runningContainers) Describe(ch chan<- *prometheus.Desc) { c.vec.Describe(ch) }

func (c *runningContainers) Collect(ch chan<- prometheus.Metric) {
	for state, n := range c.observed.containersByState() {
		c.vec.WithLabelValues(state).Set(float64(n))
	}
	c.vec.Collect(ch)
}

// runningPods counts the pods with a ready sandbox.
func (o *observedWriter) runningPods() float64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, p := range o.last {
		if p.Sandbox != nil && p.Sandbox.Ready {
			n++
		}
	}
	return float64(n)
}

// containersByState counts the containers CRI has of the observed pods.
func (o *observedWriter) containersByState() map[string]int {
	counts := map[string]int{"running": 0, "exited": 0, "created": 0, "unknown": 0}
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, p := range o.last {
		for _, list := range [][]schemas.ContainerObserved{p.InitContainers, p.Containers, p.EphemeralContainers} {
			for _, ct := range list {
				if st := ct.RuntimeState(); st != "" {
					counts[st]++
				}
			}
		}
	}
	return counts
}

// imagePulled is the kubelet's image manager's observation of a pull
// (pkg/kubelet/images/image_manager.go EnsureImageExists): the time from
// asking, the wait in the puller's queue included, by the image's size.
func (m *metrics) imagePulled(size uint64, took time.Duration) {
	m.imagePullDuration.WithLabelValues(imageSizeBucket(size)).Observe(took.Seconds())
}

// timedSync is sync (syncPod) timed in kubelet_pod_worker_duration_seconds,
// as the kubelet's podWorkers time each SyncPod: create for the pod's
// first sync in this process, kill while it is being killed, sync
// otherwise (nodelet does not tell a spec update from a resync).
func (mt *metrics) timedSync(st *store, sync func(context.Context, string) syncResult) func(context.Context, string) syncResult {
	return func(ctx context.Context, uid string) syncResult {
		op := "sync"
		if !mt.synced(uid) {
			op = "create"
		} else if rec := st.get(uid); rec == nil || rec.Gone || rec.Eviction != nil || (rec.Pod != nil && rec.Pod.DeletionTimestamp != nil) {
			op = "kill"
		}
		start := time.Now()
		res := sync(ctx, uid)
		mt.podWorkerDuration.WithLabelValues(op).Observe(time.Since(start).Seconds())
		return res
	}
}
