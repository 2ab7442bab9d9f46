package runtime

import (
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	resourcehelper "k8s.io/component-helpers/resource"

	"github.com/nodelet/nodelet/internal/cgroups"
	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/internal/hostinfo"
	"github.com/nodelet/nodelet/internal/nodestatus"
	"github.com/nodelet/nodelet/internal/podutil"
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

// oomScoreAdj is the kubelet's GetContainerOOMScoreAdjust
// (pkg/kubelet/qos/policy.go, PodLevelResources on, without DRA): node
// critical pods and Guaranteed ones last, BestEffort first; a Burstable
// container by its memory request's share of the machine, plus its share
// of a pod-level memory request its containers do not request, a sidecar
// no higher than the pod's smallest regular container.
func oomScoreAdj(pod *corev1.Pod, c *corev1.Container, memoryCapacity int64) int64 {
	if podutil.IsCriticalPod(pod) && pod.Spec.PriorityClassName == systemNodeCritical {
		return guaranteedOOMScoreAdj
	}
	switch podutil.QOSClass(pod) {
	case corev1.PodQOSGuaranteed:
		return guaranteedOOMScoreAdj
	case corev1.PodQOSBestEffort:
		return besteffortOOMScoreAdj
	}
	if memoryCapacity <= 0 {
		return 999
	}
	var extra int64
	if resourcehelper.IsPodLevelRequestsSet(pod) {
		extra = remainingPodMemoryPerContainer(pod)
	}
	adj := 1000 - (1000*(c.Resources.Requests.Memory().Value()+extra))/memoryCapacity
	if isSidecarOf(pod, c) && len(pod.Spec.Containers) > 0 {
		least := pod.Spec.Containers[0].Resources.Requests.Memory().Value()
		for _, rc := range pod.Spec.Containers[1:] {
			least = min(least, rc.Resources.Requests.Memory().Value())
		}
		adj = min(adj, 1000-(1000*(least+extra))/memoryCapacity)
	}
	// Burstable containers stay above Guaranteed ones and below BestEffort.
	if adj < 1000+guaranteedOOMScoreAdj {
		adj = 1000 + guaranteedOOMScoreAdj
	}
	if adj == besteffortOOMScoreAdj {
		adj = besteffortOOMScoreAdj - 1
	}
	return adj
}

// systemNodeCritical is scheduling.SystemNodeCritical, the priority class
// of the pods the kubelet's IsNodeCriticalPod protects most.
const systemNodeCritical = "system-node-critical"

// isSidecarOf is the kubelet's qos isSidecarContainer: an init container
// of pod with restartPolicy Always.
func isSidecarOf(pod *corev1.Pod, c *corev1.Container) bool {
	if !podutil.IsRestartableInit(c) {
		return false
	}
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == c.Name {
			return true
		}
	}
	return false
}

// remainingPodMemoryPerContainer is the kubelet's
// remainingPodMemReqPerContainer: the pod-level memory request its
// containers' requests leave over, shared equally by every container.
func remainingPodMemoryPerContainer(pod *corev1.Pod) int64 {
	podReq := pod.Spec.Resources.Requests.Memory().Value()
	if podReq == 0 {
		return 0
	}
	n := int64(len(pod.Spec.Containers) + len(pod.Spec.InitContainers))
	containers := resourcehelper.AggregateContainerRequests(pod, resourcehelper.PodResourcesOptions{})
	return max(podReq-containers.Memory().Value(), 0) / n
}

// containerLimit is the kubelet's getCPULimit/getMemoryLimit (without
// DRA): the container's limit of name, or, when it sets none and the pod
// sets pod-level resources, the pod's.
func containerLimit(pod *corev1.Pod, c *corev1.Container, name corev1.ResourceName) resource.Quantity {
	lim := c.Resources.Limits[name]
	if lim.IsZero() && resourcehelper.IsPodLevelResourcesSet(pod) {
		return pod.Spec.Resources.Limits[name]
	}
	return lim
}

// containerResources is the kubelet's generateLinuxContainerResources
// (calculateLinuxResources, GetHugepageLimitsFromResources): CPU shares
// from the request (the limit without one), CFS quota and memory limit
// from the container's limits or the pod-level ones it inherits, the OOM
// score adjustment, and a limit for every huge page size of the machine
// (containerd 1.x drops those while its disable_hugetlb_controller is
// true, its default, as it does the kubelet's). Unlike the kubelet it
// leaves the CFS period and quota unset for a container without a CPU
// limit (the kubelet sends the period with quota 0, which runc reads as
// no limit: the same cgroup).
func containerResources(pod *corev1.Pod, c *corev1.Container, memoryCapacity int64) *runtimeapi.LinuxContainerResources {
	return containerResourcesWith(pod, c, memoryCapacity, cgroups.HugePageSizes())
}

// containerResourcesWith is containerResources for the given huge page
// sizes of the machine.
func containerResourcesWith(pod *corev1.Pod, c *corev1.Container, memoryCapacity int64, pageSizes []string) *runtimeapi.LinuxContainerResources {
	r := &runtimeapi.LinuxContainerResources{}
	cpuLim := containerLimit(pod, c, corev1.ResourceCPU)
	cpuReq, hasReq := c.Resources.Requests[corev1.ResourceCPU]
	if !hasReq {
		cpuReq = cpuLim
	}
	r.CpuShares = milliCPUToShares(cpuReq.MilliValue())
	if !cpuLim.IsZero() {
		r.CpuPeriod = quotaPeriod
		r.CpuQuota = milliCPUToQuota(cpuLim.MilliValue(), quotaPeriod)
	}
	if lim := containerLimit(pod, c, corev1.ResourceMemory); !lim.IsZero() {
		r.MemoryLimitInBytes = lim.Value()
	}
	r.OomScoreAdj = oomScoreAdj(pod, c, memoryCapacity)
	for _, hp := range cgroups.ContainerHugePageLimits(pod, c.Resources.Limits, pageSizes) {
		r.HugepageLimits = append(r.HugepageLimits, &runtimeapi.HugepageLimit{PageSize: hp.PageSize, Limit: hp.Limit})
	}
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
