package cri

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/kubeletmetrics"
)

// OperationMetrics are the kubelet's CRI operation families
// (pkg/kubelet/metrics RuntimeOperations, RuntimeOperationsDuration,
// RuntimeOperationsErrors), by operation_type as the kubelet's
// instrumentedRuntimeService names each call (version, run_podsandbox,
// list_containers, pull_image, ...).
type OperationMetrics struct {
	total    *prometheus.CounterVec
	duration *prometheus.HistogramVec
	errors   *prometheus.CounterVec
}

// NewOperationMetrics makes the three families; Collectors gives them to
// a registry.
func NewOperationMetrics() *OperationMetrics {
	return &OperationMetrics{
		total: kubeletmetrics.CounterVec("kubelet_runtime_operations_total",
			"Cumulative number of runtime operations by operation type.", "operation_type"),
		duration: kubeletmetrics.HistogramVec("kubelet_runtime_operations_duration_seconds",
			"Duration in seconds of runtime operations. Broken down by operation type.", kubeletmetrics.RuntimeOpBuckets, "operation_type"),
		errors: kubeletmetrics.CounterVec("kubelet_runtime_operations_errors_total",
			"Cumulative number of runtime operation errors by operation type.", "operation_type"),
	}
}

// Collectors are the families, for a registry.
func (m *OperationMetrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.total, m.duration, m.errors}
}

// processOps counts the CRI calls of this process: every client Dial and
// Connect return is instrumented with it, and it is served with
// kubeletmetrics.Process (the kubelet's are process-wide too).
var processOps = NewOperationMetrics()

func init() { kubeletmetrics.MustRegister(processOps.Collectors()...) }

// observe is the kubelet's recordOperation and recordError: one count and
// one duration per call, one error count per failed call. The error
// series of an operation exists (at 0) from its first call, so that a
// rate over it is defined before the first error.
func (m *OperationMetrics) observe(op string, start time.Time, err error) error {
	m.total.WithLabelValues(op).Inc()
	m.duration.WithLabelValues(op).Observe(time.Since(start).Seconds())
	e := m.errors.WithLabelValues(op)
	if err != nil {
		e.Inc()
	}
	return err
}

func do[T any](m *OperationMetrics, op string, f func() (T, error)) (T, error) {
	start := time.Now()
	out, err := f()
	_ = m.observe(op, start, err)
	return out, err
}

// Instrument wraps a runtime and an image service so that every call is
// counted in m: the kubelet's newInstrumentedRuntimeService and
// newInstrumentedImageManagerService (pkg/kubelet/kuberuntime/
// instrumented_services.go). Calls the wrappers do not name (Close) pass
// through.
func Instrument(rs internalapi.RuntimeService, is internalapi.ImageManagerService, m *OperationMetrics) (internalapi.RuntimeService, internalapi.ImageManagerService) {
	return instrumentedRuntime{RuntimeService: rs, m: m}, instrumentedImages{ImageManagerService: is, m: m}
}

type instrumentedRuntime struct {
	internalapi.RuntimeService
	m *OperationMetrics
}

type instrumentedImages struct {
	internalapi.ImageManagerService
	m *OperationMetrics
}

var (
	_ internalapi.RuntimeService      = instrumentedRuntime{}
	_ internalapi.ImageManagerService = instrumentedImages{}
)

func (in instrumentedRuntime) Version(ctx context.Context, apiVersion string) (*runtimeapi.VersionResponse, error) {
	return do(in.m, "version", func() (*runtimeapi.VersionResponse, error) { return in.RuntimeService.Version(ctx, apiVersion) })
}

func (in instrumentedRuntime) CreateContainer(ctx context.Context, podSandboxID string, config *runtimeapi.ContainerConfig, sandboxConfig *runtimeapi.PodSandboxConfig) (string, error) {
	return do(in.m, "create_container", func() (string, error) {
		return in.RuntimeService.CreateContainer(ctx, podSandboxID, config, sandboxConfig)
	})
}

func (in instrumentedRuntime) StartContainer(ctx context.Context, containerID string) error {
	return in.m.observe("start_container", time.Now(), in.RuntimeService.StartContainer(ctx, containerID))
}

func (in instrumentedRuntime) StopContainer(ctx context.Context, containerID string, timeout int64) error {
	return in.m.observe("stop_container", time.Now(), in.RuntimeService.StopContainer(ctx, containerID, timeout))
}

func (in instrumentedRuntime) RemoveContainer(ctx context.Context, containerID string) error {
	return in.m.observe("remove_container", time.Now(), in.RuntimeService.RemoveContainer(ctx, containerID))
}

func (in instrumentedRuntime) ListContainers(ctx context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	return do(in.m, "list_containers", func() ([]*runtimeapi.Container, error) { return in.RuntimeService.ListContainers(ctx, filter) })
}

func (in instrumentedRuntime) ContainerStatus(ctx context.Context, containerID string, verbose bool) (*runtimeapi.ContainerStatusResponse, error) {
	return do(in.m, "container_status", func() (*runtimeapi.ContainerStatusResponse, error) {
		return in.RuntimeService.ContainerStatus(ctx, containerID, verbose)
	})
}

func (in instrumentedRuntime) UpdateContainerResources(ctx context.Context, containerID string, resources *runtimeapi.ContainerResources) error {
	return in.m.observe("update_container", time.Now(), in.RuntimeService.UpdateContainerResources(ctx, containerID, resources))
}

func (in instrumentedRuntime) ExecSync(ctx context.Context, containerID string, cmd []string, timeout time.Duration) ([]byte, []byte, error) {
	start := time.Now()
	stdout, stderr, err := in.RuntimeService.ExecSync(ctx, containerID, cmd, timeout)
	_ = in.m.observe("exec_sync", start, err)
	return stdout, stderr, err
}

func (in instrumentedRuntime) Exec(ctx context.Context, request *runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error) {
	return do(in.m, "exec", func() (*runtimeapi.ExecResponse, error) { return in.RuntimeService.Exec(ctx, request) })
}

func (in instrumentedRuntime) Attach(ctx context.Context, req *runtimeapi.AttachRequest) (*runtimeapi.AttachResponse, error) {
	return do(in.m, "attach", func() (*runtimeapi.AttachResponse, error) { return in.RuntimeService.Attach(ctx, req) })
}

func (in instrumentedRuntime) ReopenContainerLog(ctx context.Context, containerID string) error {
	return in.m.observe("reopen_container_log", time.Now(), in.RuntimeService.ReopenContainerLog(ctx, containerID))
}

func (in instrumentedRuntime) CheckpointContainer(ctx context.Context, options *runtimeapi.CheckpointContainerRequest) error {
	return in.m.observe("checkpoint_container", time.Now(), in.RuntimeService.CheckpointContainer(ctx, options))
}

func (in instrumentedRuntime) GetContainerEvents(ctx context.Context, containerEventsCh chan *runtimeapi.ContainerEventResponse, connectionEstablishedCallback func(runtimeapi.RuntimeService_GetContainerEventsClient)) error {
	return in.m.observe("get_container_events", time.Now(), in.RuntimeService.GetContainerEvents(ctx, containerEventsCh, connectionEstablishedCallback))
}

func (in instrumentedRuntime) RunPodSandbox(ctx context.Context, config *runtimeapi.PodSandboxConfig, runtimeHandler string) (string, error) {
	return do(in.m, "run_podsandbox", func() (string, error) { return in.RuntimeService.RunPodSandbox(ctx, config, runtimeHandler) })
}

func (in instrumentedRuntime) StopPodSandbox(ctx context.Context, podSandboxID string) error {
	return in.m.observe("stop_podsandbox", time.Now(), in.RuntimeService.StopPodSandbox(ctx, podSandboxID))
}

func (in instrumentedRuntime) RemovePodSandbox(ctx context.Context, podSandboxID string) error {
	return in.m.observe("remove_podsandbox", time.Now(), in.RuntimeService.RemovePodSandbox(ctx, podSandboxID))
}

func (in instrumentedRuntime) PodSandboxStatus(ctx context.Context, podSandboxID string, verbose bool) (*runtimeapi.PodSandboxStatusResponse, error) {
	return do(in.m, "podsandbox_status", func() (*runtimeapi.PodSandboxStatusResponse, error) {
		return in.RuntimeService.PodSandboxStatus(ctx, podSandboxID, verbose)
	})
}

func (in instrumentedRuntime) ListPodSandbox(ctx context.Context, filter *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error) {
	return do(in.m, "list_podsandbox", func() ([]*runtimeapi.PodSandbox, error) { return in.RuntimeService.ListPodSandbox(ctx, filter) })
}

func (in instrumentedRuntime) PortForward(ctx context.Context, request *runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error) {
	return do(in.m, "port_forward", func() (*runtimeapi.PortForwardResponse, error) { return in.RuntimeService.PortForward(ctx, request) })
}

func (in instrumentedRuntime) UpdatePodSandboxResources(ctx context.Context, request *runtimeapi.UpdatePodSandboxResourcesRequest) (*runtimeapi.UpdatePodSandboxResourcesResponse, error) {
	return do(in.m, "update_podsandbox_resources", func() (*runtimeapi.UpdatePodSandboxResourcesResponse, error) {
		return in.RuntimeService.UpdatePodSandboxResources(ctx, request)
	})
}

func (in instrumentedRuntime) CheckpointPod(ctx context.Context, options *runtimeapi.CheckpointPodRequest) error {
	return in.m.observe("checkpoint_pod", time.Now(), in.RuntimeService.CheckpointPod(ctx, options))
}

func (in instrumentedRuntime) RestorePod(ctx context.Context, options *runtimeapi.RestorePodRequest) (*runtimeapi.RestorePodResponse, error) {
	return do(in.m, "restore_pod", func() (*runtimeapi.RestorePodResponse, error) { return in.RuntimeService.RestorePod(ctx, options) })
}

func (in instrumentedRuntime) ContainerStats(ctx context.Context, containerID string) (*runtimeapi.ContainerStats, error) {
	return do(in.m, "container_stats", func() (*runtimeapi.ContainerStats, error) { return in.RuntimeService.ContainerStats(ctx, containerID) })
}

func (in instrumentedRuntime) ListContainerStats(ctx context.Context, filter *runtimeapi.ContainerStatsFilter) ([]*runtimeapi.ContainerStats, error) {
	return do(in.m, "list_container_stats", func() ([]*runtimeapi.ContainerStats, error) { return in.RuntimeService.ListContainerStats(ctx, filter) })
}

func (in instrumentedRuntime) PodSandboxStats(ctx context.Context, podSandboxID string) (*runtimeapi.PodSandboxStats, error) {
	return do(in.m, "podsandbox_stats", func() (*runtimeapi.PodSandboxStats, error) {
		return in.RuntimeService.PodSandboxStats(ctx, podSandboxID)
	})
}

func (in instrumentedRuntime) ListPodSandboxStats(ctx context.Context, filter *runtimeapi.PodSandboxStatsFilter) ([]*runtimeapi.PodSandboxStats, error) {
	return do(in.m, "list_podsandbox_stats", func() ([]*runtimeapi.PodSandboxStats, error) {
		return in.RuntimeService.ListPodSandboxStats(ctx, filter)
	})
}

func (in instrumentedRuntime) ListMetricDescriptors(ctx context.Context) ([]*runtimeapi.MetricDescriptor, error) {
	return do(in.m, "list_metric_descriptors", func() ([]*runtimeapi.MetricDescriptor, error) { return in.RuntimeService.ListMetricDescriptors(ctx) })
}

func (in instrumentedRuntime) ListPodSandboxMetrics(ctx context.Context) ([]*runtimeapi.PodSandboxMetrics, error) {
	return do(in.m, "list_podsandbox_metrics", func() ([]*runtimeapi.PodSandboxMetrics, error) { return in.RuntimeService.ListPodSandboxMetrics(ctx) })
}

func (in instrumentedRuntime) UpdateRuntimeConfig(ctx context.Context, runtimeConfig *runtimeapi.RuntimeConfig) error {
	return in.m.observe("update_runtime_config", time.Now(), in.RuntimeService.UpdateRuntimeConfig(ctx, runtimeConfig))
}

func (in instrumentedRuntime) Status(ctx context.Context, verbose bool) (*runtimeapi.StatusResponse, error) {
	return do(in.m, "status", func() (*runtimeapi.StatusResponse, error) { return in.RuntimeService.Status(ctx, verbose) })
}

func (in instrumentedRuntime) RuntimeConfig(ctx context.Context) (*runtimeapi.RuntimeConfigResponse, error) {
	return do(in.m, "runtime_config", func() (*runtimeapi.RuntimeConfigResponse, error) { return in.RuntimeService.RuntimeConfig(ctx) })
}

func (in instrumentedImages) ListImages(ctx context.Context, filter *runtimeapi.ImageFilter) ([]*runtimeapi.Image, error) {
	return do(in.m, "list_images", func() ([]*runtimeapi.Image, error) { return in.ImageManagerService.ListImages(ctx, filter) })
}

func (in instrumentedImages) ImageStatus(ctx context.Context, image *runtimeapi.ImageSpec, verbose bool) (*runtimeapi.ImageStatusResponse, error) {
	return do(in.m, "image_status", func() (*runtimeapi.ImageStatusResponse, error) {
		return in.ImageManagerService.ImageStatus(ctx, image, verbose)
	})
}

func (in instrumentedImages) PullImage(ctx context.Context, image *runtimeapi.ImageSpec, auth *runtimeapi.AuthConfig, podSandboxConfig *runtimeapi.PodSandboxConfig) (string, error) {
	return do(in.m, "pull_image", func() (string, error) { return in.ImageManagerService.PullImage(ctx, image, auth, podSandboxConfig) })
}

func (in instrumentedImages) RemoveImage(ctx context.Context, image *runtimeapi.ImageSpec) error {
	return in.m.observe("remove_image", time.Now(), in.ImageManagerService.RemoveImage(ctx, image))
}

func (in instrumentedImages) ImageFsInfo(ctx context.Context) (*runtimeapi.ImageFsInfoResponse, error) {
	return do(in.m, "image_fs_info", func() (*runtimeapi.ImageFsInfoResponse, error) { return in.ImageManagerService.ImageFsInfo(ctx) })
}
