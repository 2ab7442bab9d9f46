package server

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodelet/nodelet/internal/kubeletmetrics"
)

// httpMetrics are the kubelet server's request families
// (pkg/kubelet/server/metrics: HTTPRequests, HTTPRequestsDuration,
// HTTPInflightRequests), labelled as the kubelet's ServeHTTP labels them.
type httpMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	inflight *prometheus.GaugeVec
}

var httpLabels = []string{"method", "path", "server_type", "long_running"}

func newHTTPMetrics() *httpMetrics {
	return &httpMetrics{
		requests: kubeletmetrics.CounterVec("kubelet_http_requests_total",
			"Number of the http requests received since the server started", httpLabels...),
		duration: kubeletmetrics.HistogramVec("kubelet_http_requests_duration_seconds",
			"Duration in seconds to serve http requests", prometheus.DefBuckets, httpLabels...),
		inflight: kubeletmetrics.GaugeVec("kubelet_http_inflight_requests",
			"Number of the inflight http requests", httpLabels...),
	}
}

func (m *httpMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.requests, m.duration, m.inflight}
}

// metricPaths are the kubelet's metricsBuckets: the root paths its
// server registers (addMetricsBucketMatcher); any other is "other".
var metricPaths = map[string]bool{
	"flagz": true, "statusz": true, "healthz": true, "pods": true, "stats": true, "metrics": true,
	"metrics/cadvisor": true, "metrics/probes": true, "metrics/resource": true, "run": true,
	"exec": true, "attach": true, "portForward": true, "containerLogs": true, "configz": true,
	"allocatedPods": true, "runningpods": true, "checkpoint": true, "pprof": true, "logs": true, "debug": true,
}

// metricMethods are the kubelet's metricsMethodBuckets.
var metricMethods = map[string]bool{"OPTIONS": true, "GET": true, "HEAD": true, "POST": true, "PUT": true,
	"DELETE": true, "TRACE": true, "CONNECT": true}

// longRunningPaths is the kubelet's longRunningRequestPathMap (whose
// "portforward" never matches the bucket "portForward": kept as it is, so
// the series are the kubelet's).
var longRunningPaths = map[string]bool{"exec": true, "attach": true, "portforward": true, "debug": true}

// metricPath is the kubelet's getMetricBucket over getURLRootPath.
func metricPath(path string) string {
	parts := strings.SplitN(strings.TrimPrefix(path, "/"), "/", 3)
	root := parts[0]
	if parts[0] == "metrics" && len(parts) > 1 {
		root = parts[0] + "/" + parts[1]
	}
	if metricPaths[root] {
		return root
	}
	return "other"
}

// instrument is the metrics part of the kubelet's Server.ServeHTTP: every
// request counted, timed and held in flight under its method, root path,
// server type (readonly for the read-only port, readwrite for the
// authenticated one) and whether it is long-running.
func (m *httpMetrics) instrument(serverType string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		method := r.Method
		if !metricMethods[method] {
			method = "other"
		}
		path := metricPath(r.URL.Path)
		lv := []string{method, path, serverType, strconv.FormatBool(longRunningPaths[path])}
		m.requests.WithLabelValues(lv...).Inc()
		inflight := m.inflight.WithLabelValues(lv...)
		inflight.Inc()
		defer inflight.Dec()
		// The series exists from the request's start, so the first scrape
		// of /metrics already has the family.
		duration := m.duration.WithLabelValues(lv...)
		defer func(start time.Time) { duration.Observe(time.Since(start).Seconds()) }(time.Now())
		next.ServeHTTP(w, r)
	})
}
