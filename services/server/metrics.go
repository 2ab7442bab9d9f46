package server

import (
	"context"
	"net/http"
	"time"

	"github.com/google/cadvisor/lib/container"
	cadvisormetrics "github.com/google/cadvisor/lib/metrics"
	cadvisorapi "github.com/google/cadvisor/lib/model"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	kubeletlabels "k8s.io/kubelet/pkg/types"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/daemon"
	"github.com/nodelet/nodelet/internal/hostinfo"
	"github.com/nodelet/nodelet/internal/kubeletmetrics"
	"github.com/nodelet/nodelet/internal/version"
	"github.com/nodelet/nodelet/schemas"
)

// metricsAPI serves the node's metrics paths (the kubelet's
// InstallAuthNotRequiredHandlers: /metrics, /metrics/cadvisor,
// /metrics/probes; /metrics/resource is resource.go's).
type metricsAPI struct {
	stateDir string // where the daemons' metrics sockets are
	volumes  func() *schemas.PodVolumeStats
	// pod is the desired pod of a UID (nil: none).
	pod      func(uid string) *corev1.Pod
	cadvisor *criInfoProvider
	http     *httpMetrics
}

// metricsHandler is the node's /metrics: nodelet-server's own families
// (its process, its HTTP requests, the volumes' stats from what
// nodelet-runtime measured: kubelet_volume_stats_* and
// nodelet_volume_stats_* of the claims, nodelet_pod_volume_stats_* of
// every volume) and every other daemon's families, read from their
// metrics sockets (a daemon that is down contributes nothing), the same
// series of several daemons summed (summedGatherers).
func (s *metricsAPI) metricsHandler() http.Handler {
	own := prometheus.NewRegistry()
	// The Go runtime's families as the kubelet's (component-base's legacy
	// registry): every runtime/metrics one.
	own.MustRegister(collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(collectors.MetricsAll)),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		volumeStatsCollector{stats: s.volumes, pod: s.pod})
	own.MustRegister(s.http.collectors()...)
	gatherers := summedGatherers{own, kubeletmetrics.Process()}
	for _, c := range bus.Daemons {
		if c != bus.KubeletServer {
			gatherers = append(gatherers, daemon.NewRemoteGatherer(s.stateDir, c))
		}
	}
	return promhttp.HandlerFor(gatherers, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// proberMetrics is /metrics/probes: nodelet-prober's probe counters and
// durations under the kubelet's names (pkg/kubelet/prober's ProberResults
// and ProberDuration: prober_probe_total{probe_type,result,container,pod,
// namespace,pod_uid}, prober_probe_duration_seconds), read from the
// prober's metrics socket, where they are nodelet_prober_*.
type proberMetrics struct {
	remote prometheus.Gatherer
}

// kubeletProberNames maps nodelet-prober's names to the kubelet's.
var kubeletProberNames = map[string]string{
	"nodelet_prober_probe_total":            "prober_probe_total",
	"nodelet_prober_probe_duration_seconds": "prober_probe_duration_seconds",
}

func (p proberMetrics) Gather() ([]*dto.MetricFamily, error) {
	fams, err := p.remote.Gather()
	var out []*dto.MetricFamily
	for _, f := range fams {
		if name, ok := kubeletProberNames[f.GetName()]; ok {
			f.Name = &name
			out = append(out, f)
		}
	}
	return out, err
}

func (s *metricsAPI) probeMetricsHandler() http.Handler {
	g := proberMetrics{remote: daemon.NewRemoteGatherer(s.stateDir, bus.Prober)}
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// cadvisorMetricsHandler is /metrics/cadvisor as the kubelet's
// InstallAuthNotRequiredHandlers builds it: cAdvisor's own Prometheus
// collector (github.com/google/cadvisor/lib/metrics) with the kubelet's
// metric set and its containerPrometheusLabelsFunc (container, pod,
// namespace, image, name, id). cAdvisor's container manager is not run:
// the collector's info provider is the same CRI and procfs view
// /stats/summary is built from (criInfoProvider).
func (s *metricsAPI) cadvisorMetricsHandler() http.Handler {
	included := container.MetricSet{
		container.CpuUsageMetrics:     struct{}{},
		container.MemoryUsageMetrics:  struct{}{},
		container.DiskUsageMetrics:    struct{}{},
		container.NetworkUsageMetrics: struct{}{},
		container.ProcessMetrics:      struct{}{},
	}
	p := s.cadvisor
	r := prometheus.NewRegistry()
	r.MustRegister(cadvisormetrics.NewPrometheusMachineCollector(p, included))
	r.MustRegister(cadvisormetrics.NewPrometheusCollector(p, containerPrometheusLabels, included, clock.RealClock{},
		cadvisorapi.RequestOptions{IdType: cadvisorapi.TypeName, Count: 1, Recursive: true}))
	return promhttp.HandlerFor(r, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// containerPrometheusLabels is the kubelet's containerPrometheusLabelsFunc
// (pkg/kubelet/server/server.go): blank strings for missing labels, so every
// series of a family has the same label names.
func containerPrometheusLabels(c *cadvisorapi.ContainerInfo) map[string]string {
	name := ""
	if len(c.Aliases) > 0 {
		name = c.Aliases[0]
	}
	return map[string]string{
		cadvisormetrics.LabelID:    c.Name,
		cadvisormetrics.LabelName:  name,
		cadvisormetrics.LabelImage: c.Spec.Image,
		"pod":                      c.Spec.Labels[kubeletlabels.KubernetesPodNameLabel],
		"namespace":                c.Spec.Labels[kubeletlabels.KubernetesPodNamespaceLabel],
		"container":                c.Spec.Labels[kubeletlabels.KubernetesContainerNameLabel],
	}
}

// criInfoProvider answers cAdvisor's collector from CRI and procfs: the
// node as the root container "/", each pod (its sandbox, labelled with pod
// and namespace and no container, as the kubelet's GetPodByCgroupfs
// labels a pod cgroup) and each running container, with the CPU, memory,
// filesystem and network figures of /stats/summary. A container's id is
// its CRI ID (cAdvisor's is the cgroup path), its name the same ID.
type criInfoProvider struct {
	machine func() (*cadvisorapi.MachineInfo, error)
	stats   summarizer
	rt      runningContainers
}

// runningContainers is the part of CRI the cAdvisor collector uses.
type runningContainers interface {
	ListContainers(ctx context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error)
}

var _ runningContainers = (internalapi.RuntimeService)(nil)

func (p *criInfoProvider) GetVersionInfo() (*cadvisorapi.VersionInfo, error) {
	return &cadvisorapi.VersionInfo{KernelVersion: hostinfo.KernelVersion(), ContainerOsVersion: hostinfo.OSImage(),
		CadvisorVersion: "nodelet-" + version.Version}, nil
}

func (p *criInfoProvider) GetMachineInfo() (*cadvisorapi.MachineInfo, error) {
	return p.machine()
}

func (p *criInfoProvider) GetRequestedContainersInfo(string, cadvisorapi.RequestOptions) (map[string]*cadvisorapi.ContainerInfo, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sum, err := p.stats.Summary(ctx, false)
	if err != nil {
		return nil, err
	}
	containers, err := criCall(ctx, func(ctx context.Context) ([]*runtimeapi.Container, error) {
		return p.rt.ListContainers(ctx, &runtimeapi.ContainerFilter{State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING}})
	})
	if err != nil {
		return nil, err
	}
	// The running container of each pod UID and container name.
	byName := map[string]*runtimeapi.Container{}
	for _, c := range containers {
		byName[c.GetLabels()[kubeletlabels.KubernetesPodUIDLabel]+"/"+c.GetMetadata().GetName()] = c
	}
	out := map[string]*cadvisorapi.ContainerInfo{}
	root := &cadvisorapi.ContainerInfo{ContainerReference: cadvisorapi.ContainerReference{Name: "/"},
		Spec: cadvisorapi.ContainerSpec{CreationTime: sum.Node.StartTime.Time, HasCpu: true, HasMemory: true, HasNetwork: true, HasFilesystem: true}}
	root.Stats = []*cadvisorapi.ContainerStats{cadvisorStats(sum.Node.CPU, sum.Node.Memory, sum.Node.Fs, sum.Node.Network)}
	out[root.Name] = root
	for _, ps := range sum.Pods {
		ref := ps.PodRef
		pod := &cadvisorapi.ContainerInfo{
			ContainerReference: cadvisorapi.ContainerReference{Name: "/pod" + ref.UID, Aliases: []string{"pod" + ref.UID}},
			Spec: cadvisorapi.ContainerSpec{CreationTime: ps.StartTime.Time, HasCpu: true, HasMemory: true, HasNetwork: true,
				Labels: map[string]string{kubeletlabels.KubernetesPodNameLabel: ref.Name, kubeletlabels.KubernetesPodNamespaceLabel: ref.Namespace,
					kubeletlabels.KubernetesPodUIDLabel: ref.UID}},
			Stats: []*cadvisorapi.ContainerStats{cadvisorStats(ps.CPU, ps.Memory, nil, ps.Network)},
		}
		out[pod.Name] = pod
		for _, cs := range ps.Containers {
			c := byName[ref.UID+"/"+cs.Name]
			if c == nil {
				continue
			}
			ci := &cadvisorapi.ContainerInfo{
				ContainerReference: cadvisorapi.ContainerReference{Name: pod.Name + "/" + c.GetId(), Aliases: []string{c.GetId()}},
				Spec: cadvisorapi.ContainerSpec{CreationTime: cs.StartTime.Time, Labels: c.GetLabels(), Image: c.GetImage().GetImage(),
					HasCpu: true, HasMemory: true, HasFilesystem: cs.Rootfs != nil},
				Stats: []*cadvisorapi.ContainerStats{cadvisorStats(cs.CPU, cs.Memory, cs.Rootfs, nil)},
			}
			out[ci.Name] = ci
		}
	}
	return out, nil
}

// cadvisorStats converts the Summary API's figures back into cAdvisor's.
func cadvisorStats(cpu *statsapi.CPUStats, mem *statsapi.MemoryStats, fs *statsapi.FsStats, net *statsapi.NetworkStats) *cadvisorapi.ContainerStats {
	v := func(p *uint64) uint64 {
		if p == nil {
			return 0
		}
		return *p
	}
	st := &cadvisorapi.ContainerStats{Timestamp: time.Now()}
	if cpu != nil && cpu.UsageCoreNanoSeconds != nil {
		st.Timestamp = cpu.Time.Time
		st.Cpu = &cadvisorapi.CpuStats{Usage: cadvisorapi.CpuUsage{Total: *cpu.UsageCoreNanoSeconds}}
	}
	if mem != nil {
		st.Memory = &cadvisorapi.MemoryStats{Usage: v(mem.UsageBytes), WorkingSet: v(mem.WorkingSetBytes), RSS: v(mem.RSSBytes)}
		st.Memory.ContainerData.Pgfault, st.Memory.ContainerData.Pgmajfault = v(mem.PageFaults), v(mem.MajorPageFaults)
	}
	if fs != nil {
		f := cadvisorapi.FsStats{Device: "/", Limit: v(fs.CapacityBytes), Usage: v(fs.UsedBytes), Available: v(fs.AvailableBytes),
			Inodes: v(fs.Inodes), InodesFree: v(fs.InodesFree)}
		st.Filesystem = []cadvisorapi.FsStats{f}
	}
	if net != nil {
		n := &cadvisorapi.NetworkStats{}
		for _, i := range net.Interfaces {
			n.Interfaces = append(n.Interfaces, cadvisorapi.InterfaceStats{Name: i.Name, RxBytes: v(i.RxBytes),
				RxErrors: v(i.RxErrors), TxBytes: v(i.TxBytes), TxErrors: v(i.TxErrors)})
		}
		if len(n.Interfaces) == 0 && net.Name != "" {
			i := net.InterfaceStats
			n.Interfaces = []cadvisorapi.InterfaceStats{{Name: i.Name, RxBytes: v(i.RxBytes), RxErrors: v(i.RxErrors), TxBytes: v(i.TxBytes), TxErrors: v(i.TxErrors)}}
		}
		st.Network = n
	}
	return st
}
