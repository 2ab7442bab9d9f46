package admission

import (
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/component-helpers/nodedeclaredfeatures"
	schedcorev1 "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/internal/podutil"
	"github.com/nodelet/nodelet/schemas"
)

// Reasons, worded as the kubelet words them (pkg/kubelet/lifecycle,
// pkg/kubelet/eviction and the scheduler plugins the kubelet's predicate
// runs), so that a rejected pod reads the same as on a kubelet node.
const (
	ReasonOutOfCPU              = "OutOfcpu"
	ReasonOutOfMemory           = "OutOfmemory"
	ReasonOutOfEphemeralStorage = "OutOfephemeral-storage"
	ReasonOutOfPods             = "OutOfpods"
	// ReasonOutOfPrefix + resource name for any other resource.
	ReasonOutOfPrefix = "OutOf"

	ReasonNodeAffinity    = "NodeAffinity"
	ReasonNodeName        = "NodeName"
	ReasonNodePorts       = "NodePorts"
	ReasonTaintToleration = "TaintToleration"

	ReasonPodOSSelectorNodeLabelDoesNotMatch   = "PodOSSelectorNodeLabelDoesNotMatch"
	ReasonPodOSNotSupported                    = "PodOSNotSupported"
	ReasonSupplementalGroupsPolicyNotSupported = "SupplementalGroupsPolicyNotSupported"
	ReasonPodFeatureUnsupported                = "PodFeatureUnsupported"

	// ReasonEvicted is the eviction manager's reason for refusing pods
	// under node pressure.
	ReasonEvicted = "Evicted"

	// ReasonNodeShutdown and MessageNodeShutdown: the node shutdown
	// manager's refusal while the node shuts down (nodeshutdown's
	// NodeShutdownNotAdmittedReason).
	ReasonNodeShutdown  = "NodeShutdown"
	MessageNodeShutdown = "Pod was rejected as the node is shutting down."
)

// The scheduler plugins' failure descriptions, shown after "Predicate <name>
// failed: ".
const (
	errNodeAffinity    = "node(s) didn't match Pod's node affinity/selector"
	errNodeName        = "node(s) didn't match the requested node name"
	errNodePorts       = "node(s) didn't have free ports for the requested pod ports"
	errTaintToleration = "node(s) had taints that the pod didn't tolerate"
)

// kubeletVersion is the Kubernetes version whose rules nodelet follows; the
// node-declared-features framework asks which version a pod targets.
var kubeletVersion = version.MustParseGeneric("1.37.2")

// Result is one handler's answer, as the kubelet's PodAdmitResult. Reason
// and Message are empty when Admit is true.
type Result struct {
	Admit   bool
	Reason  string
	Message string
	// Preempt lists the pods to preempt so that a critical pod fits (the
	// kubelet's CriticalPodAdmissionHandler); only with Admit.
	Preempt []*PodInfo
}

// Attributes is what a handler decides on: the pod, whether it is a static
// pod, and the pods already admitted that still hold resources.
type Attributes struct {
	Pod *corev1.Pod
	// Static: the pod comes from a file or URL source. The kubelet treats
	// static pods as critical and does not check their taints.
	Static    bool
	OtherPods []*PodInfo
	// Devices is the pod's allocation by nodelet-devices, nil when it asks
	// for no device; DevicesAllocated counts the devices every pod holds.
	Devices          *schemas.PodDevices
	DevicesAllocated map[corev1.ResourceName]int64
}

// Critical tells whether the kubelet would treat the pod as critical:
// static, mirror, or of priority system-cluster-critical and above.
func (a *Attributes) Critical() bool {
	return a.Static || podutil.IsCriticalPod(a.Pod)
}

// Handler is one admission check, as the kubelet's PodAdmitHandler.
type Handler interface {
	Admit(attrs *Attributes) Result
}

// Admitter runs the handlers in the kubelet's order (eviction manager,
// sysctl allowlist, predicates, AppArmor, declared node features), then
// the field ledger's refusals (FieldsHandler); the first refusal decides.
type Admitter struct {
	Pressure *PressureHandler
	Fields   *FieldsHandler
	handlers []Handler
}

// NewAdmitter returns the admitter for node; sysctls nil allows the safe
// sysctls only.
func NewAdmitter(node *corev1.Node, sysctls *SysctlHandler) *Admitter {
	if sysctls == nil {
		sysctls, _ = NewSysctlHandler(nil, "") // the safe set always parses
	}
	p, f := &PressureHandler{}, &FieldsHandler{}
	return &Admitter{Pressure: p, Fields: f, handlers: []Handler{p, sysctls, DevicesHandler{}, NewPredicateHandler(node), NewAppArmorHandler(), NewFeaturesHandler(node), f}}
}

// SetDevices makes the predicates count the device plugin resources'
// allocatable (from nodelet-devices); called from the goroutine that admits.
func (a *Admitter) SetDevices(alloc map[corev1.ResourceName]int64) {
	for _, h := range a.handlers {
		if p, ok := h.(*PredicateHandler); ok {
			p.devices = alloc
		}
	}
}

// SetNode makes the predicates check the next pods against node (the
// kubelet's predicate handler reads its node from the node lister at each
// admission).
func (a *Admitter) SetNode(node *corev1.Node) {
	for _, h := range a.handlers {
		if p, ok := h.(*PredicateHandler); ok {
			p.SetNode(node)
		}
	}
}

// Admit decides on attrs.Pod. Pods to preempt are named only when the pod
// is admitted by every handler (the kubelet kills them as soon as its
// predicate handler picks them, even if a later handler refuses the pod).
func (a *Admitter) Admit(attrs *Attributes) Result {
	var preempt []*PodInfo
	for _, h := range a.handlers {
		r := h.Admit(attrs)
		if !r.Admit {
			return r
		}
		preempt = append(preempt, r.Preempt...)
	}
	return Result{Admit: true, Preempt: preempt}
}

// PressureHandler is the eviction manager's admission check: under memory
// pressure only BestEffort pods are refused (unless they tolerate the
// memory-pressure taint); under any other pressure every pod is; critical
// pods are always admitted. Then the node shutdown manager's: while the
// node shuts down every pod is refused, critical ones too.
type PressureHandler struct {
	// Conditions are the node conditions under pressure (status True), in
	// the order the gc daemon published them.
	Conditions []corev1.NodeConditionType
	// ShuttingDown: the gc daemon's shutdown manager handles a node
	// shutdown.
	ShuttingDown bool
}

// Admit implements Handler.
func (h *PressureHandler) Admit(attrs *Attributes) Result {
	r := h.admitPressure(attrs)
	if r.Admit && h.ShuttingDown {
		return Result{Reason: ReasonNodeShutdown, Message: MessageNodeShutdown}
	}
	return r
}

func (h *PressureHandler) admitPressure(attrs *Attributes) Result {
	if len(h.Conditions) == 0 || attrs.Critical() {
		return Result{Admit: true}
	}
	if len(h.Conditions) == 1 && h.Conditions[0] == corev1.NodeMemoryPressure {
		if !isBestEffort(attrs.Pod) {
			return Result{Admit: true}
		}
		taint := &corev1.Taint{Key: corev1.TaintNodeMemoryPressure, Effect: corev1.TaintEffectNoSchedule}
		if schedcorev1.TolerationsTolerateTaint(klog.Background(), attrs.Pod.Spec.Tolerations, taint, false) {
			return Result{Admit: true}
		}
	}
	// The kubelet's message, trailing space included.
	return Result{Reason: ReasonEvicted, Message: fmt.Sprintf("The node had condition: %v. ", h.Conditions)}
}

// isBestEffort is the eviction manager's v1qos.GetPodQOS(pod) ==
// BestEffort, through the node's one QoS rule.
func isBestEffort(pod *corev1.Pod) bool {
	return podutil.QOSClass(pod) == corev1.PodQOSBestEffort
}

// PredicateHandler is the kubelet's predicate admit handler: the pod's OS,
// supplemental groups policy, then resources, node affinity, node name and
// host ports against the node and the admitted pods, then NoExecute taints.
type PredicateHandler struct {
	// node is what the predicates check against: the node as configured,
	// with the API Node's labels and taints once they are known
	// (SetNode); it changes under Admit, hence the pointer swap.
	node        atomic.Pointer[corev1.Node]
	allocatable resources
	maxPods     int64
	// devices is the device plugin resources' allocatable (SetDevices).
	devices map[corev1.ResourceName]int64
}

// scalarAllocatable is the node's allocatable of a scalar resource: the
// machine's, a device plugin resource's from nodelet-devices, and for a
// pod with devices at least what is allocated (the kubelet's
// UpdatePluginResources → sanitizeNodeAllocatable).
func (h *PredicateHandler) scalarAllocatable(name corev1.ResourceName, attrs *Attributes) (int64, bool) {
	v, ok := h.allocatable.scalar[name]
	if d, dok := h.devices[name]; dok {
		v, ok = d, true
	}
	if attrs != nil && attrs.Devices != nil && attrs.DevicesAllocated[name] > v {
		v, ok = attrs.DevicesAllocated[name], true
	}
	return v, ok
}

// NewPredicateHandler returns the handler for node.
func NewPredicateHandler(node *corev1.Node) *PredicateHandler {
	pods := node.Status.Allocatable[corev1.ResourcePods]
	h := &PredicateHandler{allocatable: newResources(node.Status.Allocatable), maxPods: pods.Value()}
	h.node.Store(node)
	return h
}

// SetNode makes the next decisions use node.
func (h *PredicateHandler) SetNode(node *corev1.Node) { h.node.Store(node) }

// failure is one failed predicate: either a resource short (resource set)
// or a named predicate.
type failure struct {
	resource                  corev1.ResourceName
	requested, used, capacity int64

	predicate, desc string
}

func (f failure) result() Result {
	if f.resource == "" {
		return Result{Reason: f.predicate, Message: fmt.Sprintf("Predicate %s failed: %s", f.predicate, f.desc)}
	}
	reason := ReasonOutOfPrefix + string(f.resource)
	return Result{Reason: reason, Message: fmt.Sprintf("Node didn't have enough resource: %s, requested: %d, used: %d, capacity: %d",
		f.resource, f.requested, f.used, f.capacity)}
}

// Admit implements Handler.
func (h *PredicateHandler) Admit(attrs *Attributes) Result {
	pod := attrs.Pod
	// Checks that no eviction could help come first, as in the kubelet.
	if os, ok := pod.Labels[corev1.LabelOSStable]; ok && os != runtime.GOOS {
		return Result{Reason: ReasonPodOSSelectorNodeLabelDoesNotMatch,
			Message: "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label"}
	}
	if pod.Spec.OS != nil && string(pod.Spec.OS.Name) != runtime.GOOS {
		return Result{Reason: ReasonPodOSNotSupported, Message: "Failed to admit pod as the OS field doesn't match node OS"}
	}
	if sc := pod.Spec.SecurityContext; sc != nil && sc.SupplementalGroupsPolicy != nil &&
		*sc.SupplementalGroupsPolicy == corev1.SupplementalGroupsPolicyStrict && !h.supplementalGroupsPolicy() {
		return Result{Reason: ReasonSupplementalGroupsPolicyNotSupported,
			Message: fmt.Sprintf("SupplementalGroupsPolicy=%s is not supported in this node", corev1.SupplementalGroupsPolicyStrict)}
	}

	failures := h.filter(attrs)
	if len(failures) == 0 {
		return Result{Admit: true}
	}
	if attrs.Critical() {
		// HandleAdmissionFailure: other failures still refuse a critical
		// pod; failures for resources alone preempt pods to make room, or
		// refuse it when no set of pods would free enough.
		var rest []failure
		for _, f := range failures {
			if f.resource == "" {
				rest = append(rest, f)
			}
		}
		if len(rest) == 0 {
			victims, err := preempt(attrs, failures, attrs.OtherPods)
			if err != nil {
				return Result{Reason: ReasonUnexpectedAdmissionError,
					Message: fmt.Sprintf("Unexpected error while attempting to recover from admission failure: %v", err)}
			}
			return Result{Admit: true, Preempt: victims}
		}
		failures = rest
	}
	return failures[0].result()
}

func (h *PredicateHandler) supplementalGroupsPolicy() bool {
	f := h.node.Load().Status.Features
	return f != nil && f.SupplementalGroupsPolicy != nil && *f.SupplementalGroupsPolicy
}

// filter is the kubelet's generalFilter: every failure, resources first.
func (h *PredicateHandler) filter(attrs *Attributes) []failure {
	pod := attrs.Pod
	var used resources
	for _, o := range attrs.OtherPods {
		used.add(o.requests)
	}
	in := newPodInfo(pod, false)
	failures := h.fits(h.withoutMissingExtended(in.requests, attrs), used, int64(len(attrs.OtherPods)), attrs)

	node := h.node.Load()
	if ok, _ := nodeaffinity.GetRequiredNodeAffinity(pod).Match(node); !ok {
		failures = append(failures, failure{predicate: ReasonNodeAffinity, desc: errNodeAffinity})
	}
	if pod.Spec.NodeName != "" && pod.Spec.NodeName != node.Name {
		failures = append(failures, failure{predicate: ReasonNodeName, desc: errNodeName})
	}
	if hostPortTaken(in.hostPorts, attrs.OtherPods) {
		failures = append(failures, failure{predicate: ReasonNodePorts, desc: errNodePorts})
	}
	if !attrs.Static {
		// The kubelet only cares about NoExecute taints: NoSchedule is the
		// scheduler's business, and a pod bound to the node by name has
		// bypassed it on purpose.
		_, untolerated := schedcorev1.FindMatchingUntoleratedTaint(klog.Background(), node.Spec.Taints, pod.Spec.Tolerations,
			func(t *corev1.Taint) bool { return t.Effect == corev1.TaintEffectNoExecute }, false)
		if untolerated {
			failures = append(failures, failure{predicate: ReasonTaintToleration, desc: errTaintToleration})
		}
	}
	return failures
}

// hostPortTaken tells whether one of want is held by an admitted pod.
func hostPortTaken(want []corev1.ContainerPort, others []*PodInfo) bool {
	for _, w := range want {
		for _, o := range others {
			for _, held := range o.hostPorts {
				if portsConflict(w, held) {
					return true
				}
			}
		}
	}
	return false
}

// withoutMissingExtended drops requests of extended resources the node does
// not have: they are cluster-level or DRA-backed resources the kubelet does
// not account for.
func (h *PredicateHandler) withoutMissingExtended(r resources, attrs *Attributes) resources {
	for _, name := range r.scalarNames() {
		// A device plugin resource stays, even at 0: the node has it.
		v, _ := h.scalarAllocatable(name, attrs)
		if _, device := h.devices[name]; isExtendedResource(name) && !device && v <= 0 {
			delete(r.scalar, name)
		}
	}
	return r
}

// fits is the scheduler's fitsRequest against the node's allocatable: pod
// count, then cpu, memory, ephemeral storage and the scalar resources.
func (h *PredicateHandler) fits(req, used resources, pods int64, attrs *Attributes) []failure {
	var out []failure
	if pods+1 > h.maxPods {
		out = append(out, failure{resource: corev1.ResourcePods, requested: 1, used: pods, capacity: h.maxPods})
	}
	if req.isZero() {
		return out
	}
	alloc := h.allocatable
	check := func(name corev1.ResourceName, want, inUse, capacity int64) {
		if want > 0 && want > capacity-inUse {
			out = append(out, failure{resource: name, requested: want, used: inUse, capacity: capacity})
		}
	}
	check(corev1.ResourceCPU, req.milliCPU, used.milliCPU, alloc.milliCPU)
	check(corev1.ResourceMemory, req.memory, used.memory, alloc.memory)
	check(corev1.ResourceEphemeralStorage, req.ephemeralStorage, used.ephemeralStorage, alloc.ephemeralStorage)
	for _, name := range req.scalarNames() {
		capacity, _ := h.scalarAllocatable(name, attrs)
		check(name, req.scalar[name], used.scalar[name], capacity)
	}
	return out
}

// FeaturesHandler refuses pods that need a node feature this node does not
// declare (the kubelet's NodeDeclaredFeatures admission), using the
// node-declared-features framework of k8s.io/component-helpers.
type FeaturesHandler struct {
	framework *nodedeclaredfeatures.Framework
	declared  nodedeclaredfeatures.FeatureSet
}

// NewFeaturesHandler returns the handler for the features node declares in
// its status. nodelet declares none yet: its runtime implements none of
// them (RestartAllContainers rules, user namespaces with host network, bind
// mount options need runtime support containerd 1.6 lacks).
func NewFeaturesHandler(node *corev1.Node) *FeaturesHandler {
	f := nodedeclaredfeatures.DefaultFramework
	return &FeaturesHandler{framework: f, declared: f.TryMap(node.Status.DeclaredFeatures)}
}

// Admit implements Handler.
func (h *FeaturesHandler) Admit(attrs *Attributes) Result {
	pod := attrs.Pod
	reqs, err := h.framework.InferForPodScheduling(&nodedeclaredfeatures.PodInfo{Spec: &pod.Spec, Status: &pod.Status}, kubeletVersion)
	if err != nil {
		return Result{Reason: ReasonPodFeatureUnsupported, Message: fmt.Sprintf("Failed to infer pod's feature requirements: %v", err)}
	}
	if reqs.IsEmpty() {
		return Result{Admit: true}
	}
	match, err := h.framework.MatchNodeFeatureSet(reqs, h.declared)
	if err != nil {
		return Result{Reason: ReasonPodFeatureUnsupported, Message: fmt.Sprintf("Failed to match pod's feature requirements against the node: %v", err)}
	}
	if !match.IsMatch {
		return Result{Reason: ReasonPodFeatureUnsupported,
			Message: fmt.Sprintf("Pod requires node features that are not available: %s", strings.Join(match.UnsatisfiedRequirements, ", "))}
	}
	return Result{Admit: true}
}

// Interface guards.
var (
	_ Handler = (*PressureHandler)(nil)
	_ Handler = (*PredicateHandler)(nil)
	_ Handler = (*FeaturesHandler)(nil)
)
