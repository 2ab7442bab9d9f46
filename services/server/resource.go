package server

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// summaryFunc returns the node's CPU and memory stats summary.
type summaryFunc func(ctx context.Context) (*statsapi.Summary, error)

// The kubelet's resource metrics (pkg/kubelet/metrics/collectors
// resource_metrics.go): names, help and labels as metrics-server reads them.
var (
	nodeCPUUsageDesc = prometheus.NewDesc("node_cpu_usage_seconds_total",
		"Cumulative cpu time consumed by the node in core-seconds", nil, nil)
	nodeMemoryUsageDesc = prometheus.NewDesc("node_memory_working_set_bytes",
		"Current working set of the node in bytes", nil, nil)
	containerCPUUsageDesc = prometheus.NewDesc("container_cpu_usage_seconds_total",
		"Cumulative cpu time consumed by the container in core-seconds", []string{"container", "pod", "namespace"}, nil)
	containerMemoryUsageDesc = prometheus.NewDesc("container_memory_working_set_bytes",
		"Current working set of the container in bytes", []string{"container", "pod", "namespace"}, nil)
	podCPUUsageDesc = prometheus.NewDesc("pod_cpu_usage_seconds_total",
		"Cumulative cpu time consumed by the pod in core-seconds", []string{"pod", "namespace"}, nil)
	podMemoryUsageDesc = prometheus.NewDesc("pod_memory_working_set_bytes",
		"Current working set of the pod in bytes", []string{"pod", "namespace"}, nil)
	resourceScrapeResultDesc = prometheus.NewDesc("scrape_error",
		"1 if there was an error while getting container metrics, 0 otherwise", nil, nil)
	resourceScrapeErrorResultDesc = prometheus.NewDesc("resource_scrape_error",
		"1 if there was an error while getting container metrics, 0 otherwise", nil, nil)
	containerStartTimeDesc = prometheus.NewDesc("container_start_time_seconds",
		"Start time of the container since unix epoch in seconds", []string{"container", "pod", "namespace"}, nil)
)

// resourceCollector is the kubelet's resourceMetricsCollector over the
// summary nodelet-status computes.
type resourceCollector struct {
	summary summaryFunc
	log     *slog.Logger
}

func (rc *resourceCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{nodeCPUUsageDesc, nodeMemoryUsageDesc, containerCPUUsageDesc,
		containerMemoryUsageDesc, podCPUUsageDesc, podMemoryUsageDesc, resourceScrapeResultDesc,
		resourceScrapeErrorResultDesc, containerStartTimeDesc} {
		ch <- d
	}
}

// Collect mirrors CollectWithStability.
func (rc *resourceCollector) Collect(ch chan<- prometheus.Metric) {
	var errorCount float64
	defer func() {
		ch <- prometheus.MustNewConstMetric(resourceScrapeResultDesc, prometheus.GaugeValue, errorCount)
		ch <- prometheus.MustNewConstMetric(resourceScrapeErrorResultDesc, prometheus.GaugeValue, errorCount)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := rc.summary(ctx)
	if err != nil {
		errorCount = 1
		rc.log.Error("Error getting summary for resourceMetric prometheus endpoint", "err", err)
		return
	}
	at := func(t time.Time, m prometheus.Metric) { ch <- prometheus.NewMetricWithTimestamp(t, m) }
	cpu := func(desc *prometheus.Desc, c *statsapi.CPUStats, labels ...string) {
		if c != nil && c.UsageCoreNanoSeconds != nil {
			at(c.Time.Time, prometheus.MustNewConstMetric(desc, prometheus.CounterValue, float64(*c.UsageCoreNanoSeconds)/float64(time.Second), labels...))
		}
	}
	mem := func(desc *prometheus.Desc, m *statsapi.MemoryStats, labels ...string) {
		if m != nil && m.WorkingSetBytes != nil {
			at(m.Time.Time, prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, float64(*m.WorkingSetBytes), labels...))
		}
	}
	cpu(nodeCPUUsageDesc, s.Node.CPU)
	mem(nodeMemoryUsageDesc, s.Node.Memory)
	for _, pod := range s.Pods {
		name, ns := pod.PodRef.Name, pod.PodRef.Namespace
		for _, c := range pod.Containers {
			if c.StartTime.Unix() > 0 {
				ch <- prometheus.MustNewConstMetric(containerStartTimeDesc, prometheus.GaugeValue,
					float64(c.StartTime.UnixNano())/float64(time.Second), c.Name, name, ns)
			}
			cpu(containerCPUUsageDesc, c.CPU, c.Name, name, ns)
			mem(containerMemoryUsageDesc, c.Memory, c.Name, name, ns)
		}
		cpu(podCPUUsageDesc, pod.CPU, name, ns)
		mem(podMemoryUsageDesc, pod.Memory, name, ns)
	}
}

// resourceMetricsHandler serves /metrics/resource.
func resourceMetricsHandler(summary summaryFunc, log *slog.Logger) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(&resourceCollector{summary: summary, log: log})
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}
