package gc

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodelet/nodelet/internal/kubeletmetrics"
)

// Metrics of nodelet-gc, in their own registry so that the process serving
// the node's /metrics (nodelet-server) or a test can gather them. The names
// follow the kubelet's meanings under nodelet_ names:
//
//	nodelet_gc_removed_total{object}            objects removed: container, sandbox, image, pod_log_dir, log_file
//	nodelet_gc_reclaimed_bytes_total{object}    bytes freed: image (size CRI reports), container_log, pod_log_dir
//	nodelet_gc_pass_duration_seconds{pass}      duration of a pass: container, image, log_rotation, eviction
//	nodelet_gc_pass_failures_total{pass}        passes that ended with an error
//	nodelet_image_garbage_collected_total{reason}  kubelet_image_garbage_collected_total: reason space or age
//	nodelet_container_log_rotations_total       rotations of a container's current log
//	nodelet_evictions{eviction_signal}          kubelet_evictions: pods evicted, by signal (or local storage limit)
//	nodelet_node_pressure{condition}            1 while MemoryPressure/DiskPressure/PIDPressure is True
//	nodelet_eviction_signal_available{signal}   the last observation of each eviction signal (bytes, inodes or pids)
var (
	registry = prometheus.NewRegistry()

	removedTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nodelet_gc_removed_total",
		Help: "Objects removed by nodelet-gc, by kind of object.",
	}, []string{"object"})
	reclaimedBytes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nodelet_gc_reclaimed_bytes_total",
		Help: "Bytes freed by nodelet-gc, by kind of object removed.",
	}, []string{"object"})
	passDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "nodelet_gc_pass_duration_seconds",
		Help:    "Duration of nodelet-gc passes.",
		Buckets: prometheus.ExponentialBuckets(0.01, 2, 14),
	}, []string{"pass"})
	passFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nodelet_gc_pass_failures_total",
		Help: "nodelet-gc passes that ended with an error.",
	}, []string{"pass"})
	imagesCollected = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nodelet_image_garbage_collected_total",
		Help: "Images removed by image garbage collection, by reason (space or age).",
	}, []string{"reason"})
	logRotations = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "nodelet_container_log_rotations_total",
		Help: "Rotations of a container's current log file.",
	})
	evictionsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nodelet_evictions",
		Help: "Pods evicted, by the eviction signal that caused it.",
	}, []string{"eviction_signal"})
	nodePressure = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "nodelet_node_pressure",
		Help: "1 while the node condition is True.",
	}, []string{"condition"})
	signalAvailable = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "nodelet_eviction_signal_available",
		Help: "The last observed value of each eviction signal.",
	}, []string{"signal"})

	// The kubelet's names of the same facts (pkg/kubelet/metrics Evictions
	// and ImageGarbageCollectedTotal). kubelet_evictions has a series at 0
	// for every signal nodelet-gc evicts on from the start (the kubelet's
	// appears at the first eviction), so that alerts on its rate work on a
	// node that never evicted.
	kubeletEvictions = kubeletmetrics.CounterVec("kubelet_evictions",
		"Cumulative number of pod evictions by eviction signal", "eviction_signal")
	kubeletImagesCollected = kubeletmetrics.CounterVec("kubelet_image_garbage_collected_total",
		"Total number of images garbage collected by the kubelet, whether through disk usage or image age.", "reason")
)

// Reasons of nodelet_image_garbage_collected_total, as the kubelet's.
const (
	imageGCReasonSpace = "space"
	imageGCReasonAge   = "age"
)

// Objects of nodelet_gc_removed_total and nodelet_gc_reclaimed_bytes_total.
const (
	objContainer    = "container"
	objSandbox      = "sandbox"
	objImage        = "image"
	objPodLogDir    = "pod_log_dir"
	objLogFile      = "log_file"
	objContainerLog = "container_log"
)

func init() {
	registry.MustRegister(removedTotal, reclaimedBytes, passDuration, passFailures,
		imagesCollected, logRotations, evictionsTotal, nodePressure, signalAvailable,
		kubeletEvictions, kubeletImagesCollected)
	for _, s := range []string{SignalMemoryAvailable, SignalNodeFsAvailable, SignalNodeFsInodesFree,
		SignalImageFsAvailable, SignalImageFsInodesFree, SignalPIDAvailable} {
		kubeletEvictions.WithLabelValues(s)
	}
}

// Gatherer returns nodelet-gc's metrics.
func Gatherer() prometheus.Gatherer { return registry }
