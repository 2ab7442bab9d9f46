package admission

import (
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"

	"github.com/nodelet/nodelet/internal/podutil"
)

// resources is an amount of every resource the kubelet's fit check counts,
// in the units it compares: millicores, bytes, and plain values for the
// scalar resources (extended resources, hugepages, ...). It mirrors the
// scheduler framework's Resource, which the kubelet's predicate uses.
type resources struct {
	milliCPU         int64
	memory           int64
	ephemeralStorage int64
	scalar           map[corev1.ResourceName]int64
}

func newResources(rl corev1.ResourceList) resources {
	var r resources
	r.addList(rl)
	return r
}

func (r *resources) addList(rl corev1.ResourceList) {
	for name, q := range rl {
		switch name {
		case corev1.ResourceCPU:
			r.milliCPU += q.MilliValue()
		case corev1.ResourceMemory:
			r.memory += q.Value()
		case corev1.ResourceEphemeralStorage:
			r.ephemeralStorage += q.Value()
		case corev1.ResourcePods:
			// Counted as pods, not as a requested amount.
		default:
			if isScalarResource(name) {
				if r.scalar == nil {
					r.scalar = map[corev1.ResourceName]int64{}
				}
				r.scalar[name] += q.Value()
			}
		}
	}
}

func (r *resources) add(o resources) {
	r.milliCPU += o.milliCPU
	r.memory += o.memory
	r.ephemeralStorage += o.ephemeralStorage
	if len(o.scalar) == 0 {
		return
	}
	for name, v := range o.scalar {
		if r.scalar == nil {
			r.scalar = map[corev1.ResourceName]int64{}
		}
		r.scalar[name] += v
	}
}

func (r resources) isZero() bool {
	return r.milliCPU == 0 && r.memory == 0 && r.ephemeralStorage == 0 && len(r.scalar) == 0
}

// scalarNames lists the scalar resources in a fixed order, so that the
// first failure reported is the same on every run.
func (r resources) scalarNames() []corev1.ResourceName {
	names := make([]corev1.ResourceName, 0, len(r.scalar))
	for n := range r.scalar {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return names[i] < names[j] })
	return names
}

// The resource-name classes of k8s.io/kubernetes/pkg/apis/core/v1/helper,
// which is not a library: a native resource has no domain or the
// kubernetes.io domain; an extended one has another domain.
func isNativeResource(name corev1.ResourceName) bool {
	return !strings.Contains(string(name), "/") || strings.Contains(string(name), corev1.ResourceDefaultNamespacePrefix)
}

func isExtendedResource(name corev1.ResourceName) bool {
	return !isNativeResource(name) && !strings.HasPrefix(string(name), corev1.DefaultResourceRequestsPrefix)
}

func isHugePages(name corev1.ResourceName) bool {
	return strings.HasPrefix(string(name), corev1.ResourceHugePagesPrefix)
}

func isScalarResource(name corev1.ResourceName) bool {
	return isExtendedResource(name) || isHugePages(name) ||
		strings.Contains(string(name), corev1.ResourceDefaultNamespacePrefix) ||
		strings.HasPrefix(string(name), corev1.ResourceAttachableVolumesPrefix)
}

// PodInfo is a pod with what it holds on the node once admitted: its
// requests (init containers, sidecars, pod-level resources and overhead
// folded in by k8s.io/component-helpers/resource) and its host ports.
// Computed once per pod spec, so admitting a pod against 110 others does
// not recompute 110 aggregates.
type PodInfo struct {
	Pod *corev1.Pod
	// Static: a pod from a file or URL (critical, never preempted).
	Static    bool
	requests  resources
	hostPorts []corev1.ContainerPort
}

// NewPodInfo computes what pod holds once admitted. An admitted pod counts
// its allocated resources when the status has them (in-place resize), as
// the scheduler's NodeInfo does.
func NewPodInfo(pod *corev1.Pod) *PodInfo {
	return newPodInfo(pod, true)
}

func newPodInfo(pod *corev1.Pod, useStatus bool) *PodInfo {
	reqs := resourcehelper.PodRequests(withoutDRAExtended(pod), resourcehelper.PodResourcesOptions{
		// PodLevelResources is on by default since Kubernetes 1.34.
		SkipPodLevelResources: false,
		UseStatusResources:    useStatus,
	})
	return &PodInfo{Pod: pod, requests: newResources(reqs), hostPorts: hostPorts(pod)}
}

// withoutDRAExtended is pod without the extended resource requests the
// scheduler's DRA claim serves (status.extendedResourceClaimStatus): the
// node's allocatable does not count them, whatever their name, as in the
// kubelet's removeMissingExtendedResources. pod itself is left alone.
func withoutDRAExtended(pod *corev1.Pod) *corev1.Pod {
	if pod.Status.ExtendedResourceClaimStatus == nil {
		return pod
	}
	out := pod.DeepCopy()
	strip := func(cs []corev1.Container) {
		for i := range cs {
			for name := range cs[i].Resources.Requests {
				if podutil.IsDRAExtendedResourceName(name) && podutil.IsDRAExtendedResource(pod, cs[i].Name, string(name)) {
					delete(cs[i].Resources.Requests, name)
					delete(cs[i].Resources.Limits, name)
				}
			}
		}
	}
	strip(out.Spec.InitContainers)
	strip(out.Spec.Containers)
	return out
}

// hostPorts lists the host ports of pod's containers and of its sidecars
// (restartable init containers run for the pod's whole life; other init
// containers are gone before the app starts), as the scheduler's
// GetHostPorts does.
func hostPorts(pod *corev1.Pod) []corev1.ContainerPort {
	var ports []corev1.ContainerPort
	for _, c := range pod.Spec.InitContainers {
		if c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways {
			continue
		}
		for _, p := range c.Ports {
			if p.HostPort > 0 {
				ports = append(ports, p)
			}
		}
	}
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			if p.HostPort > 0 {
				ports = append(ports, p)
			}
		}
	}
	return ports
}

// bindAll is the host IP of a port bound on every address.
const bindAll = "0.0.0.0"

func sanitizePort(p corev1.ContainerPort) (string, corev1.Protocol) {
	ip, protocol := p.HostIP, p.Protocol
	if ip == "" {
		ip = bindAll
	}
	if protocol == "" {
		protocol = corev1.ProtocolTCP
	}
	return ip, protocol
}

// portsConflict tells whether wanting host port want clashes with held, as
// the scheduler framework's HostPortInfo does: same protocol and port, and
// either side on 0.0.0.0 or both on the same address.
func portsConflict(want, held corev1.ContainerPort) bool {
	if want.HostPort <= 0 || want.HostPort != held.HostPort {
		return false
	}
	wantIP, wantProto := sanitizePort(want)
	heldIP, heldProto := sanitizePort(held)
	return wantProto == heldProto && (wantIP == bindAll || heldIP == bindAll || wantIP == heldIP)
}
