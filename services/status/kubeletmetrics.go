package status

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/kubeletmetrics"
)

// kubeletMetrics are the kubelet's families whose facts are
// nodelet-status's (pkg/kubelet/metrics/metrics.go), beside its nodelet_*
// ones (metrics.go):
//
//   - kubelet_pod_start_duration_seconds: a source first delivering the
//     pod → the status first showing all its regular containers running,
//     as nodelet_pod_start_duration_seconds (the kubelet's
//     PodStartDuration, observed when its status manager first sees the
//     pod started);
//   - kubelet_pod_start_total_duration_seconds and
//     kubelet_pod_start_sli_duration_seconds: the pod's
//     creationTimestamp → the same moment, the SLI without the time its
//     init containers ran (the kubelet's podStartupLatencyTracker; its
//     image pull time is not subtracted: nodelet-status does not see
//     pulls, and a pull before the first container start is rare on a
//     node whose images are present);
//   - kubelet_pod_status_sync_duration_seconds: one pod status patch to
//     the API server;
//   - kubelet_node_name{node}: always 1.
//
// The client certificate's families are internal/kubeclient's, registered
// in this process when rotation is on.
type kubeletMetrics struct {
	podStart      prometheus.Histogram
	podStartTotal prometheus.Histogram
	podStartSLI   prometheus.Histogram
	statusSync    prometheus.Histogram
}

func newKubeletMetrics(reg prometheus.Registerer, nodeName string) *kubeletMetrics {
	k := &kubeletMetrics{
		podStart: kubeletmetrics.Histogram("kubelet_pod_start_duration_seconds",
			"Duration in seconds from kubelet seeing a pod for the first time to the pod starting to run", kubeletmetrics.PodStartupBuckets),
		podStartTotal: kubeletmetrics.Histogram("kubelet_pod_start_total_duration_seconds",
			"Duration in seconds to start a pod since creation, including time to pull images and run init containers, measured from pod creation timestamp to when all its containers are reported as started and observed via watch",
			kubeletmetrics.PodStartupBuckets),
		podStartSLI: kubeletmetrics.Histogram("kubelet_pod_start_sli_duration_seconds",
			"Duration in seconds to start a pod, excluding time to pull images and run init containers, measured from pod creation timestamp to when all its containers are reported as started and observed via watch",
			kubeletmetrics.PodStartupBuckets),
		statusSync: kubeletmetrics.Histogram("kubelet_pod_status_sync_duration_seconds",
			"Duration in seconds to sync a pod status update. Measures time from detection of a change to pod status until the API is successfully updated for that pod, even if multiple intevening changes to pod status occur.",
			kubeletmetrics.StatusSyncBuckets),
	}
	nodeNameVec := kubeletmetrics.GaugeVec("kubelet_node_name", "The node's name. The count is always 1.", "node")
	nodeNameVec.WithLabelValues(nodeName).Set(1)
	reg.MustRegister(k.podStart, k.podStartTotal, k.podStartSLI, k.statusSync, nodeNameVec)
	return k
}

// started records a pod whose regular containers all run for the first
// time at now, first delivered at firstSeen (zero: unknown).
func (k *kubeletMetrics) started(pod *corev1.Pod, st *corev1.PodStatus, firstSeen, now time.Time) {
	if !firstSeen.IsZero() {
		k.podStart.Observe(now.Sub(firstSeen).Seconds())
	}
	if pod.CreationTimestamp.IsZero() {
		return
	}
	total := now.Sub(pod.CreationTimestamp.Time)
	k.podStartTotal.Observe(total.Seconds())
	k.podStartSLI.Observe((total - initContainersRuntime(st)).Seconds())
}

// initContainersRuntime is how long the pod's finished init containers
// ran (the kubelet's totalInitContainerRuntime).
func initContainersRuntime(st *corev1.PodStatus) time.Duration {
	var d time.Duration
	for _, c := range st.InitContainerStatuses {
		if t := c.State.Terminated; t != nil && !t.StartedAt.IsZero() && t.FinishedAt.After(t.StartedAt.Time) {
			d += t.FinishedAt.Sub(t.StartedAt.Time)
		}
	}
	return d
}
