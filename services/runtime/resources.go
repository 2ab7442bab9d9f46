package runtime

import (
	"bufio"
	"os"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
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

// nodeCapacity is what resourceFieldRef limits default to when a
// container sets none: the node's CPUs and memory.
type nodeCapacity struct {
	CPU    resource.Quantity
	Memory resource.Quantity
	// EphemeralStorage is left zero: nodelet-gc measures the node's disk.
	EphemeralStorage resource.Quantity
}

// resourceList is the capacity as resources (what downward API limits and
// memory-backed volumes default to).
func (c nodeCapacity) resourceList() corev1.ResourceList {
	l := corev1.ResourceList{corev1.ResourceCPU: c.CPU, corev1.ResourceMemory: c.Memory}
	if !c.EphemeralStorage.IsZero() {
		l[corev1.ResourceEphemeralStorage] = c.EphemeralStorage
	}
	return l
}

func readNodeCapacity(cpus int) nodeCapacity {
	c := nodeCapacity{CPU: *resource.NewQuantity(int64(cpus), resource.DecimalSI)}
	if f, err := os.Open("/proc/meminfo"); err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) >= 2 && fields[0] == "MemTotal:" {
				if kb, err := strconv.ParseInt(fields[1], 10, 64); err == nil {
					c.Memory = *resource.NewQuantity(kb*1024, resource.BinarySI)
				}
			}
		}
	}
	return c
}
