package runtime

import (
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/internal/hostinfo"
	"github.com/nodelet/nodelet/internal/nodestatus"
)

// CPU constants of the kubelet's cgroup conversion.
const (
	minShares      = 2
	maxShares      = 262144
	sharesPerCPU   = 1024
	milliCPUToCPU  = 1000
	quotaPeriod    = 100000 // µs
	minQuotaPeriod = 1000
)

// OOM score adjustments by QoS class, the kubelet's.
const (
	guaranteedOOMScoreAdj = -997
	besteffortOOMScoreAdj = 1000
)

// podQOS is the pod's QoS class (the API's status.qosClass when set, else
// computed from requests and limits as the kubelet's GetPodQOS).
func podQOS(pod *corev1.Pod) corev1.PodQOSClass {
	if pod.Status.QOSClass != "" {
		return pod.Status.QOSClass
	}
	requests := corev1.ResourceList{}
	limits := corev1.ResourceList{}
	guaranteed := true
	all := append(append([]corev1.Container(nil), pod.Spec.InitContainers...), pod.Spec.Containers...)
	for _, c := range all {
		found := 0
		for _, n := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			req, hasReq := c.Resources.Requests[n]
			lim, hasLim := c.Resources.Limits[n]
			if !hasReq && hasLim {
				req, hasReq = lim, true // API defaulting: request = limit
			}
			if hasReq && !req.IsZero() {
				q := requests[n]
				q.Add(req)
				requests[n] = q
			}
			if hasLim && !lim.IsZero() {
				found++
				q := limits[n]
				q.Add(lim)
				limits[n] = q
			}
		}
		if found < 2 {
			guaranteed = false
		}
	}
	if len(requests) == 0 && len(limits) == 0 {
		return corev1.PodQOSBestEffort
	}
	if guaranteed {
		for n, req := range requests {
			if lim, ok := limits[n]; !ok || lim.Cmp(req) != 0 {
				guaranteed = false
			}
		}
	}
	if guaranteed && len(requests) == len(limits) {
		return corev1.PodQOSGuaranteed
	}
	return corev1.PodQOSBurstable
}

// milliCPUToShares converts a CPU request to cgroup cpu.shares.
func milliCPUToShares(milli int64) int64 {
	if milli == 0 {
		return minShares
	}
	s := milli * sharesPerCPU / milliCPUToCPU
	return max(minShares, min(s, maxShares))
}

// milliCPUToQuota converts a CPU limit to a CFS quota for period.
func milliCPUToQuota(milli, period int64) int64 {
	if milli == 0 {
		return 0
	}
	return max(milli*period/milliCPUToCPU, minQuotaPeriod)
}

// oomScoreAdj is the kubelet's GetContainerOOMScoreAdjust.
func oomScoreAdj(pod *corev1.Pod, c *corev1.Container, memoryCapacity int64) int64 {
	switch podQOS(pod) {
	case corev1.PodQOSGuaranteed:
		return guaranteedOOMScoreAdj
	case corev1.PodQOSBestEffort:
		return besteffortOOMScoreAdj
	}
	if memoryCapacity <= 0 {
		return 999
	}
	req := c.Resources.Requests.Memory().Value()
	adj := 1000 - (1000*req)/memoryCapacity
	// Burstable containers stay above Guaranteed ones and below BestEffort.
	if adj < 1000+guaranteedOOMScoreAdj {
		adj = 1000 + guaranteedOOMScoreAdj
	}
	if adj == besteffortOOMScoreAdj {
		adj = besteffortOOMScoreAdj - 1
	}
	return adj
}

// containerResources is the kubelet's generateLinuxContainerResources.
func containerResources(pod *corev1.Pod, c *corev1.Container, memoryCapacity int64) *runtimeapi.LinuxContainerResources {
	r := &runtimeapi.LinuxContainerResources{}
	cpuReq := c.Resources.Requests.Cpu()
	cpuLim := c.Resources.Limits.Cpu()
	if cpuReq.IsZero() && !cpuLim.IsZero() {
		cpuReq = cpuLim
	}
	r.CpuShares = milliCPUToShares(cpuReq.MilliValue())
	if !cpuLim.IsZero() {
		r.CpuPeriod = quotaPeriod
		r.CpuQuota = milliCPUToQuota(cpuLim.MilliValue(), quotaPeriod)
	}
	if lim := c.Resources.Limits.Memory(); !lim.IsZero() {
		r.MemoryLimitInBytes = lim.Value()
	}
	r.OomScoreAdj = oomScoreAdj(pod, c, memoryCapacity)
	return r
}

// nodeCapacity is the node's resources as the runtime needs them, read
// through nodestatus so they are the ones nodelet-status reports.
type nodeCapacity struct {
	// CPU is the machine's cores (node allocatable cgroups, resize).
	CPU resource.Quantity
	// Memory is the machine's memory capacity, the OOM score adjustment's
	// scale (the kubelet's machineInfo.MemoryCapacity).
	Memory resource.Quantity
	// Allocatable is what resourceFieldRef limits and memory-backed
	// volumes default to when a container sets none: the node's
	// allocatable, as the kubelet's defaultPodLimitsForDownwardAPI.
	Allocatable corev1.ResourceList
}

// resourceList is what downward API limits and memory-backed volumes
// default to.
func (c nodeCapacity) resourceList() corev1.ResourceList { return c.Allocatable }

// readNodeCapacity reads the machine (cAdvisor's MachineInfo and the state
// dir's filesystem) and computes allocatable as nodelet-status does. A
// state dir whose filesystem cannot be measured leaves ephemeral-storage
// out.
func readNodeCapacity(cfg *config.Config) (nodeCapacity, error) {
	machine, err := nodestatus.ReadCapacity(&hostinfo.Machine{}, cfg.Node.StateDir)
	var fsErr *nodestatus.FsError
	if err != nil && !errors.As(err, &fsErr) {
		return nodeCapacity{}, fmt.Errorf("node capacity: %w", err)
	}
	capacity, allocatable, err := nodestatus.Resources(cfg, machine)
	if err != nil {
		return nodeCapacity{}, err
	}
	return nodeCapacity{CPU: capacity[corev1.ResourceCPU], Memory: capacity[corev1.ResourceMemory], Allocatable: allocatable}, nil
}
