// Package kubeletmetrics holds the kubelet's metric families as nodelet
// publishes them beside its own nodelet_* ones: the kubelet's exact names,
// types, label names, help texts and histogram buckets (copied from
// k8s.io/kubernetes pkg/kubelet/metrics/metrics.go, pkg/kubelet/server/
// metrics, pkg/kubelet/certificate, pkg/volume/util/metrics.go and
// component-base's rest client metrics), so that dashboards and alerts
// keyed on kubelet_* work on a nodelet node.
//
// Each family is made by the one daemon that owns its fact (docs/metrics.md
// has the table): a daemon builds the families it needs with the
// constructors here and registers them in its own registry. What every
// process has — the client-go request metrics (rest_client_*) and the CRI
// operations it makes (kubelet_runtime_operations_*) — is process-wide, as
// in the kubelet, and served by every daemon through Process();
// nodelet-server sums the same series of several daemons into the node's
// /metrics, so each is the whole node's count, as the kubelet's is.
package kubeletmetrics

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/component-base/metrics/legacyregistry"

	// The kubelet's rest_client_* adapters for client-go, registered into
	// component-base's legacy registry when the first client is built.
	_ "k8s.io/component-base/metrics/prometheus/restclient"
)

// alpha is how component-base prints the help of an ALPHA metric, which
// every kubelet family here is.
func alpha(help string) string { return "[ALPHA] " + help }

// registry holds the process-wide families of this package.
var registry = prometheus.NewRegistry()

// Process is what every daemon serves besides its own registry: this
// package's process-wide families (kubelet_runtime_operations_*, the
// certificate managers') and component-base's legacy registry without its
// go_* and process_* (each daemon has its own): rest_client_* and the like.
func Process() prometheus.Gatherer {
	return prometheus.Gatherers{registry, withoutProcessFamilies{legacyregistry.DefaultGatherer}}
}

// MustRegister adds process-wide collectors (made once per process).
func MustRegister(cs ...prometheus.Collector) { registry.MustRegister(cs...) }

// withoutProcessFamilies drops the go_* and process_* families.
type withoutProcessFamilies struct{ g prometheus.Gatherer }

func (w withoutProcessFamilies) Gather() ([]*dto.MetricFamily, error) {
	fams, err := w.g.Gather()
	out := fams[:0]
	for _, f := range fams {
		if !ProcessLocal(f.GetName()) {
			out = append(out, f)
		}
	}
	return out, err
}

// ProcessLocal says whether a family describes one process (the Go
// runtime's and the process's own, the HTTP handler's), so that federating
// several daemons keeps only the federator's own.
func ProcessLocal(name string) bool {
	for _, p := range []string{"go_", "process_", "promhttp_"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// Buckets of the kubelet's histograms.
var (
	// podStartupDurationBuckets (pkg/kubelet/metrics).
	PodStartupBuckets = []float64{0.5, 1, 2, 3, 4, 5, 6, 8, 10, 20, 30, 45, 60, 120, 180, 240, 300, 360, 480, 600, 900, 1200, 1800, 2700, 3600}
	// imagePullDurationBuckets (pkg/kubelet/metrics).
	ImagePullBuckets = []float64{1, 5, 10, 20, 30, 60, 120, 180, 240, 300, 360, 480, 600, 900, 1200, 1800, 2700, 3600}
	// RuntimeOperationsDuration's.
	RuntimeOpBuckets = prometheus.ExponentialBuckets(.005, 2.5, 14)
	// storageOperationMetric's (pkg/volume/util/metrics.go).
	StorageOpBuckets = []float64{.1, .25, .5, 1, 2.5, 5, 10, 15, 25, 50, 120, 300, 600}
	// PodStatusSyncDuration's.
	StatusSyncBuckets = []float64{0.010, 0.050, 0.100, 0.500, 1, 5, 10, 20, 30, 45, 60}
	// certificateRotationAge's (pkg/kubelet/certificate/kubelet.go).
	CertRotationBuckets = []float64{60, 3600, 14400, 86400, 604800, 2592000, 7776000, 15552000, 31104000, 124416000}
)

// Counter is a kubelet counter family without labels.
func Counter(name, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: alpha(help)})
}

// CounterVec is a kubelet counter family.
func CounterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: alpha(help)}, labels)
}

// Gauge is a kubelet gauge family without labels.
func Gauge(name, help string) prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: alpha(help)})
}

// GaugeVec is a kubelet gauge family.
func GaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: alpha(help)}, labels)
}

// GaugeFunc is a kubelet gauge family read at scrape time.
func GaugeFunc(name, help string, f func() float64) prometheus.GaugeFunc {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: alpha(help)}, f)
}

// Histogram is a kubelet histogram family without labels.
func Histogram(name, help string, buckets []float64) prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: alpha(help), Buckets: buckets})
}

// HistogramVec is a kubelet histogram family.
func HistogramVec(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: alpha(help), Buckets: buckets}, labels)
}
