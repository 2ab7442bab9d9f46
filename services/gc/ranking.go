package gc

import (
	"context"
	"fmt"
	"slices"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
)

// The kubelet's eviction messages (pkg/kubelet/eviction/helpers.go).
const (
	nodeLowMessageFmt                   = "The node was low on resource: %v. "
	thresholdMetMessageFmt              = "Threshold quantity: %v, available: %v. "
	containerMessageFmt                 = "Container %s was using %s, request is %s, has larger consumption of %v. "
	containerEphemeralStorageMessageFmt = "Container %s exceeded its local ephemeral storage limit %q. "
	podEphemeralStorageMessageFmt       = "Pod ephemeral local storage usage exceeds the total limit of containers %s. "
	emptyDirMessageFmt                  = "Usage of EmptyDir volume %q exceeds the limit %q. "
)

// Signals of local storage evictions in nodelet_evictions, as the kubelet's.
const (
	signalEmptyDirFsLimit           = "emptydirfs.limit"
	signalEphemeralPodFsLimit       = "ephemeralpodfs.limit"
	signalEphemeralContainerFsLimit = "ephemeralcontainerfs.limit"
)

// fsStats says which parts of a pod's disk use a disk signal counts.
type fsStats int

const (
	fsRoot fsStats = 1 << iota
	fsLogs
	fsLocalVolumes
)

// cmpFunc compares two pods for eviction: negative when p1 goes first.
type cmpFunc func(p1, p2 *corev1.Pod) int

// rankPods orders pods for eviction under signal, as the kubelet's rank
// functions: memory by (usage above requests, priority, usage − request);
// disk by the same over the filesystems the signal measures; pids by
// (priority, process count). Pods without figures go first.
func rankPods(signal string, withImageFs bool, pods []*corev1.Pod, usage map[string]*PodUsage) {
	stats := func(p *corev1.Pod) (*PodUsage, bool) {
		u, ok := usage[string(p.UID)]
		return u, ok
	}
	var cmps []cmpFunc
	switch signal {
	case SignalMemoryAvailable:
		cmps = []cmpFunc{exceedRequests(stats, corev1.ResourceMemory, memoryUsage), priority, byUsage(stats, corev1.ResourceMemory, memoryUsage)}
	case SignalPIDAvailable:
		cmps = []cmpFunc{priority, byUsage(stats, resourcePIDs, func(_ *corev1.Pod, u *PodUsage) *resource.Quantity {
			return resource.NewQuantity(u.Processes, resource.DecimalSI)
		})}
	default:
		measure := fsRoot | fsLogs | fsLocalVolumes
		if withImageFs {
			if signal == SignalNodeFsAvailable || signal == SignalNodeFsInodesFree {
				measure = fsLogs | fsLocalVolumes
			} else {
				measure = fsRoot
			}
		}
		res := signalToResource[signal]
		get := func(p *corev1.Pod, u *PodUsage) *resource.Quantity { return podDiskUsage(p, u, measure, res) }
		cmps = []cmpFunc{exceedRequests(stats, res, get), priority, byUsage(stats, res, get)}
	}
	sort.SliceStable(pods, func(i, j int) bool {
		for _, c := range cmps {
			if r := c(pods[i], pods[j]); r != 0 {
				return r < 0
			}
		}
		return false
	})
}

type statsFunc func(*corev1.Pod) (*PodUsage, bool)
type usageFunc func(*corev1.Pod, *PodUsage) *resource.Quantity

func podRequest(p *corev1.Pod, res corev1.ResourceName) resource.Quantity {
	if q, ok := resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{})[res]; ok {
		return q
	}
	return resource.Quantity{}
}

// exceedRequests puts pods whose usage exceeds their requests first.
func exceedRequests(stats statsFunc, res corev1.ResourceName, usage usageFunc) cmpFunc {
	return func(p1, p2 *corev1.Pod) int {
		s1, ok1 := stats(p1)
		s2, ok2 := stats(p2)
		if !ok1 || !ok2 {
			return cmpBool(!ok1, !ok2)
		}
		e1 := usage(p1, s1).Cmp(podRequest(p1, res)) > 0
		e2 := usage(p2, s2).Cmp(podRequest(p2, res)) > 0
		return cmpBool(e1, e2)
	}
}

// byUsage puts the larger consumer above its request first.
func byUsage(stats statsFunc, res corev1.ResourceName, usage usageFunc) cmpFunc {
	return func(p1, p2 *corev1.Pod) int {
		s1, ok1 := stats(p1)
		s2, ok2 := stats(p2)
		if !ok1 || !ok2 {
			return cmpBool(!ok1, !ok2)
		}
		u1, u2 := usage(p1, s1), usage(p2, s2)
		if res != resourcePIDs {
			u1.Sub(podRequest(p1, res))
			u2.Sub(podRequest(p2, res))
		}
		return u2.Cmp(*u1)
	}
}

// priority puts lower priority first.
func priority(p1, p2 *corev1.Pod) int {
	a, b := corev1helpers.PodPriority(p1), corev1helpers.PodPriority(p2)
	switch {
	case a == b:
		return 0
	case a > b:
		return 1
	}
	return -1
}

// cmpBool places true before false.
func cmpBool(a, b bool) int {
	if a == b {
		return 0
	}
	if !b {
		return -1
	}
	return 1
}

func memoryUsage(_ *corev1.Pod, u *PodUsage) *resource.Quantity {
	var sum int64
	for _, c := range u.Containers {
		if c.MemoryWorkingSet != nil {
			sum += *c.MemoryWorkingSet
		}
	}
	return resource.NewQuantity(sum, resource.BinarySI)
}

// podDiskUsage sums the pod's disk use (bytes, or inodes) over the parts a
// signal measures; memory-backed emptyDirs are not on disk.
func podDiskUsage(p *corev1.Pod, u *PodUsage, measure fsStats, res corev1.ResourceName) *resource.Quantity {
	var sum int64
	inodes := res == resourceInodes
	for _, c := range u.Containers {
		if measure&fsRoot != 0 {
			sum += pick(inodes, c.RootfsInodes, c.RootfsBytes)
		}
		if measure&fsLogs != 0 {
			sum += pick(inodes, c.LogsInodes, c.LogsBytes)
		}
	}
	if measure&fsLocalVolumes != 0 {
		for _, v := range p.Spec.Volumes {
			if v.EmptyDir == nil || v.EmptyDir.Medium == corev1.StorageMediumMemory {
				continue
			}
			vu := u.Volumes[v.Name]
			sum += pick(inodes, vu.Inodes, vu.Bytes)
		}
	}
	if inodes {
		return resource.NewQuantity(sum, resource.DecimalSI)
	}
	return resource.NewQuantity(sum, resource.BinarySI)
}

func pick(first bool, a, b int64) int64 {
	if first {
		return a
	}
	return b
}

// evictionMessage is the kubelet's: the starved resource, the threshold and
// what was available, and every container using more than it requested.
func evictionMessage(res corev1.ResourceName, pod *corev1.Pod, u *PodUsage, met []threshold, obs observations) string {
	msg := fmt.Sprintf(nodeLowMessageFmt, res)
	for _, t := range met {
		if signalToResource[t.Signal] != res {
			continue
		}
		if o, ok := obs[t.Signal]; ok {
			msg += fmt.Sprintf(thresholdMetMessageFmt, t.quantity(o.capacity), o.available)
			break
		}
	}
	if u == nil {
		return msg
	}
	containers := append(append([]corev1.Container{}, pod.Spec.Containers...), pod.Spec.InitContainers...)
	names := make([]string, 0, len(u.Containers))
	for n := range u.Containers {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		cu := u.Containers[n]
		for _, c := range containers {
			if c.Name != n {
				continue
			}
			req := c.Resources.Requests[res]
			var use *resource.Quantity
			switch res {
			case corev1.ResourceEphemeralStorage:
				use = resource.NewQuantity(cu.RootfsBytes+cu.LogsBytes, resource.BinarySI)
			case corev1.ResourceMemory:
				if cu.MemoryWorkingSet != nil {
					use = resource.NewQuantity(*cu.MemoryWorkingSet, resource.BinarySI)
				}
			}
			if use != nil && use.Cmp(req) > 0 {
				msg += fmt.Sprintf(containerMessageFmt, c.Name, use.String(), req.String(), res)
			}
			break
		}
	}
	return msg
}

// storageLimited returns the pods with a local storage limit: an emptyDir
// sizeLimit or an ephemeral-storage limit (a container's, or the pod's).
// Only those can be evicted by localStorageEviction.
func storageLimited(pods []*corev1.Pod) []*corev1.Pod {
	var out []*corev1.Pod
	for _, pod := range pods {
		if _, ok := resourcehelper.PodLimits(pod, resourcehelper.PodResourcesOptions{})[corev1.ResourceEphemeralStorage]; ok {
			out = append(out, pod)
			continue
		}
		if slices.ContainsFunc(pod.Spec.Volumes, sizeLimited) {
			out = append(out, pod)
		}
	}
	return out
}

// localStorageEviction is the kubelet's: a pod whose emptyDir exceeds its
// sizeLimit, whose ephemeral storage exceeds the sum of its containers'
// limits, or with a container over its own ephemeral-storage limit, is
// evicted whatever the node's pressure.
func (m *evictionManager) localStorageEviction(ctx context.Context, pods []*corev1.Pod, usage map[string]*PodUsage) []*corev1.Pod {
	var evicted []*corev1.Pod
	var zero int64
	for _, pod := range pods {
		u, ok := usage[string(pod.UID)]
		if !ok {
			continue
		}
		if msg, ok := emptyDirLimitExceeded(pod, u); ok {
			if m.evictPod(ctx, pod, &zero, msg, signalEmptyDirFsLimit) {
				evicted = append(evicted, pod)
			}
			continue
		}
		if msg, ok := podEphemeralLimitExceeded(pod, u); ok {
			if m.evictPod(ctx, pod, &zero, msg, signalEphemeralPodFsLimit) {
				evicted = append(evicted, pod)
			}
			continue
		}
		if msg, ok := containerEphemeralLimitExceeded(pod, u); ok {
			if m.evictPod(ctx, pod, &zero, msg, signalEphemeralContainerFsLimit) {
				evicted = append(evicted, pod)
			}
		}
	}
	return evicted
}

// sizeLimited: v is an emptyDir with a positive sizeLimit.
func sizeLimited(v corev1.Volume) bool {
	return v.EmptyDir != nil && v.EmptyDir.SizeLimit != nil && v.EmptyDir.SizeLimit.Sign() == 1
}

func emptyDirLimitExceeded(pod *corev1.Pod, u *PodUsage) (string, bool) {
	for _, v := range pod.Spec.Volumes {
		if !sizeLimited(v) {
			continue
		}
		used, ok := u.Volumes[v.Name]
		if ok && resource.NewQuantity(used.Bytes, resource.BinarySI).Cmp(*v.EmptyDir.SizeLimit) > 0 {
			return fmt.Sprintf(emptyDirMessageFmt, v.Name, v.EmptyDir.SizeLimit.String()), true
		}
	}
	return "", false
}

func podEphemeralLimitExceeded(pod *corev1.Pod, u *PodUsage) (string, bool) {
	limit, ok := resourcehelper.PodLimits(pod, resourcehelper.PodResourcesOptions{})[corev1.ResourceEphemeralStorage]
	if !ok {
		return "", false
	}
	used := podDiskUsage(pod, u, fsRoot|fsLogs|fsLocalVolumes, corev1.ResourceEphemeralStorage)
	if used.Cmp(limit) > 0 {
		return fmt.Sprintf(podEphemeralStorageMessageFmt, limit.String()), true
	}
	return "", false
}

func containerEphemeralLimitExceeded(pod *corev1.Pod, u *PodUsage) (string, bool) {
	for _, c := range append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
		limit, ok := c.Resources.Limits[corev1.ResourceEphemeralStorage]
		cu := u.Containers[c.Name]
		if !ok || cu == nil {
			continue
		}
		if resource.NewQuantity(cu.RootfsBytes+cu.LogsBytes, resource.BinarySI).Cmp(limit) > 0 {
			return fmt.Sprintf(containerEphemeralStorageMessageFmt, c.Name, limit.String()), true
		}
	}
	return "", false
}
