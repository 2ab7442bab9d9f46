package cgroups

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"

	libcgroups "github.com/opencontainers/cgroups"
)

// ResourceConfig is what a cgroup is given (the kubelet's ResourceConfig);
// nil fields are left alone.
type ResourceConfig struct {
	Memory    *int64
	CPUShares *uint64
	CPUQuota  *int64
	CPUPeriod *uint64
	PidsLimit *int64
	// HugePageLimit maps a page size in bytes to a limit in bytes.
	HugePageLimit map[int64]int64
}

// The kubelet's CPU conversion constants (helpers_linux.go).
const (
	MinShares      = 2
	MaxShares      = 262144
	SharesPerCPU   = 1024
	MilliCPUToCPU  = 1000
	QuotaPeriod    = 100000 // µs
	MinQuotaPeriod = 1000   // µs
)

// MilliCPUToShares is the kubelet's MilliCPUToShares.
func MilliCPUToShares(milliCPU int64) uint64 {
	if milliCPU == 0 {
		return MinShares
	}
	s := milliCPU * SharesPerCPU / MilliCPUToCPU
	return uint64(max(MinShares, min(s, MaxShares)))
}

// MilliCPUToQuota is the kubelet's MilliCPUToQuota (0 for no limit).
func MilliCPUToQuota(milliCPU, period int64) int64 {
	if milliCPU == 0 {
		return 0
	}
	return max(milliCPU*period/MilliCPUToCPU, MinQuotaPeriod)
}

// HugePageLimits is the kubelet's HugePageLimits: page size to the summed
// limit of every hugepages-<size> in rl.
func HugePageLimits(rl corev1.ResourceList) map[int64]int64 {
	out := map[int64]int64{}
	for name, q := range rl {
		size, ok := strings.CutPrefix(string(name), corev1.ResourceHugePagesPrefix)
		if !ok {
			continue
		}
		ps, err := resource.ParseQuantity(size)
		if err != nil {
			continue
		}
		out[ps.Value()] += q.Value()
	}
	return out
}

// hugePageSizeName is the kubelet's HugePageUnitSizeFromByteSize: 2097152
// is "2MB", the form hugetlb's files use.
func hugePageSizeName(size int64) string {
	units := []string{"B", "KB", "MB", "GB", "TB", "PB"}
	i := 0
	for size >= 1024 && size%1024 == 0 && i < len(units)-1 {
		size /= 1024
		i++
	}
	return fmt.Sprintf("%d%s", size, units[i])
}

// HugePageSizes are the machine's huge page sizes as hugetlb names them
// ("2MB"), read once by libcontainer, as the kubelet reads them.
func HugePageSizes() []string { return libcgroups.HugePageSizes() }

// HugePageLimit is one huge page size's limit in bytes.
type HugePageLimit struct {
	PageSize string // hugetlb's name: "2MB"
	Limit    uint64
}

// ContainerHugePageLimits is the kubelet's GetHugepageLimitsFromResources
// (kuberuntime_container_linux.go, without DRA allocations, which nodelet
// does not have): every size in sizes limited to 0, so that a container
// uses no huge pages it was not given; then the pod-level limits when the
// pod sets pod-level resources; then the container's own, which win.
// Sizes the machine does not have are left out.
func ContainerHugePageLimits(pod *corev1.Pod, limits corev1.ResourceList, sizes []string) []HugePageLimit {
	want := map[string]uint64{}
	if resourcehelper.IsPodLevelResourcesSet(pod) {
		for size, limit := range HugePageLimits(pod.Spec.Resources.Limits) {
			want[hugePageSizeName(size)] = uint64(limit)
		}
	}
	for size, limit := range HugePageLimits(limits) {
		want[hugePageSizeName(size)] = uint64(limit)
	}
	out := make([]HugePageLimit, 0, len(sizes))
	for _, s := range sizes {
		out = append(out, HugePageLimit{PageSize: s, Limit: want[s]})
	}
	return out
}

// ResourceConfigForPod is the kubelet's ResourceConfigForPod: the pod
// cgroup's CPU shares from the summed requests, CFS quota from the summed
// limits (when every container declares one, or always for Guaranteed),
// memory likewise, huge pages from the requests; overhead included (the
// pod's requests and limits through component-helpers, as the kubelet's
// PodRequests/PodLimits). qos is the pod's QoS class; with
// enforceCPULimits false the quota is -1 (unlimited).
func ResourceConfigForPod(pod *corev1.Pod, qos corev1.PodQOSClass, enforceCPULimits bool, period uint64) *ResourceConfig {
	reqs := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	limits := resourcehelper.PodLimits(pod, resourcehelper.PodResourcesOptions{})
	cpuLimitsDeclared, memoryLimitsDeclared := true, true
	all := append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...)
	for _, c := range all {
		if c.Resources.Limits.Cpu().IsZero() {
			cpuLimitsDeclared = false
		}
		if c.Resources.Limits.Memory().IsZero() {
			memoryLimitsDeclared = false
		}
	}
	if pod.Spec.Resources != nil {
		if !pod.Spec.Resources.Limits.Cpu().IsZero() {
			cpuLimitsDeclared = true
		}
		if !pod.Spec.Resources.Limits.Memory().IsZero() {
			memoryLimitsDeclared = true
		}
	}
	var cpuRequests, cpuLimits, memoryLimits int64
	if q, ok := reqs[corev1.ResourceCPU]; ok {
		cpuRequests = q.MilliValue()
	}
	if q, ok := limits[corev1.ResourceCPU]; ok {
		cpuLimits = q.MilliValue()
	}
	if q, ok := limits[corev1.ResourceMemory]; ok {
		memoryLimits = q.Value()
	}
	shares := MilliCPUToShares(cpuRequests)
	quota := MilliCPUToQuota(cpuLimits, int64(period))
	if !enforceCPULimits {
		quota = -1
	}
	rc := &ResourceConfig{}
	switch qos {
	case corev1.PodQOSGuaranteed:
		rc.CPUShares, rc.CPUQuota, rc.CPUPeriod, rc.Memory = &shares, &quota, &period, &memoryLimits
	case corev1.PodQOSBurstable:
		rc.CPUShares = &shares
		if cpuLimitsDeclared {
			rc.CPUQuota, rc.CPUPeriod = &quota, &period
		}
		if memoryLimitsDeclared {
			rc.Memory = &memoryLimits
		}
	default:
		s := uint64(MinShares)
		rc.CPUShares = &s
	}
	rc.HugePageLimit = HugePageLimits(reqs)
	return rc
}

// NodeAllocatableConfig is the kubelet's getCgroupConfig for the node
// allocatable cgroup: memory, CPU shares, pids and huge pages of rl.
func NodeAllocatableConfig(rl corev1.ResourceList) *ResourceConfig {
	rc := &ResourceConfig{}
	if q, ok := rl[corev1.ResourceMemory]; ok {
		v := q.Value()
		rc.Memory = &v
	}
	if q, ok := rl[corev1.ResourceCPU]; ok {
		v := MilliCPUToShares(q.MilliValue())
		rc.CPUShares = &v
	}
	if q, ok := rl["pid"]; ok {
		v := q.Value()
		rc.PidsLimit = &v
	}
	if hp := HugePageLimits(rl); len(hp) > 0 {
		rc.HugePageLimit = hp
	}
	return rc
}
