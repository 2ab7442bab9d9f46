package admission

import (
	"fmt"
	"math"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/podutil"
)

// The kubelet's preemption wording (pkg/kubelet/preemption, pkg/kubelet/lifecycle);
// the victim's is in schemas (ReasonPreempting, MessagePreempted).
const (
	// ReasonUnexpectedAdmissionError rejects a critical pod for which no set
	// of pods could be preempted (lifecycle.UnexpectedAdmissionError).
	ReasonUnexpectedAdmissionError = "UnexpectedAdmissionError"
)

// requirement is an amount of one resource that must be freed, the
// kubelet's admissionRequirement.
type requirement struct {
	name     corev1.ResourceName
	quantity int64
}

type requirements []requirement

// preempt is the kubelet's CriticalPodAdmissionHandler.HandleAdmissionFailure
// for a critical pod that failed only for resources: it picks the pods to
// preempt among others (evictPodsToFreeRequests), or says why none will do.
func preempt(preemptor *Attributes, failures []failure, others []*PodInfo) ([]*PodInfo, error) {
	var reqs requirements
	for _, f := range failures {
		// InsufficientResourceError.GetInsufficientAmount.
		reqs = append(reqs, requirement{name: f.resource, quantity: f.requested - (f.capacity - f.used)})
	}
	victims, err := podsToPreempt(preemptor, others, reqs)
	if err != nil {
		return nil, fmt.Errorf("preemption: error finding a set of pods to preempt: %v", err)
	}
	return victims, nil
}

// podsToPreempt is the kubelet's getPodsToPreempt: the fewest, smallest
// pods, lowest QoS class first, whose requests cover reqs.
func podsToPreempt(preemptor *Attributes, pods []*PodInfo, reqs requirements) ([]*PodInfo, error) {
	bestEffort, burstable, guaranteed := sortByQOS(preemptor, pods)
	all := append(append(append([]*PodInfo{}, bestEffort...), burstable...), guaranteed...)
	if rest := reqs.subtract(all...); len(rest) > 0 {
		return nil, fmt.Errorf("no set of running pods found to reclaim resources: %v", rest)
	}
	// Guaranteed pods go only when the others cannot free enough, then
	// burstable, then best effort, each by distance.
	guaranteedVictims, err := byDistance(guaranteed, reqs.subtract(append(append([]*PodInfo{}, bestEffort...), burstable...)...))
	if err != nil {
		return nil, err
	}
	burstableVictims, err := byDistance(burstable, reqs.subtract(append(append([]*PodInfo{}, bestEffort...), guaranteedVictims...)...))
	if err != nil {
		return nil, err
	}
	bestEffortVictims, err := byDistance(bestEffort, reqs.subtract(append(append([]*PodInfo{}, burstableVictims...), guaranteedVictims...)...))
	if err != nil {
		return nil, err
	}
	return append(append(bestEffortVictims, burstableVictims...), guaranteedVictims...), nil
}

// byDistance is getPodsToPreemptByDistance: repeatedly the pod closest to
// what is still missing, the smaller one on a tie.
func byDistance(pods []*PodInfo, reqs requirements) ([]*PodInfo, error) {
	pods = append([]*PodInfo{}, pods...)
	var out []*PodInfo
	for len(reqs) > 0 {
		if len(pods) == 0 {
			return nil, fmt.Errorf("no set of running pods found to reclaim resources: %v", reqs)
		}
		best, bestDist := 0, float64(len(reqs)+1)
		for i, p := range pods {
			d := reqs.distance(p)
			if d < bestDist || (d == bestDist && smallerRequest(p, pods[best])) {
				best, bestDist = i, d
			}
		}
		reqs = reqs.subtract(pods[best])
		out = append(out, pods[best])
		pods[best] = pods[len(pods)-1]
		pods = pods[:len(pods)-1]
	}
	return out, nil
}

func (r requirements) distance(p *PodInfo) float64 {
	var d float64
	for _, req := range r {
		if left := float64(req.quantity - p.request(req.name)); left > 0 {
			d += math.Pow(left/float64(req.quantity), 2)
		}
	}
	return d
}

func (r requirements) subtract(pods ...*PodInfo) requirements {
	var out requirements
	for _, req := range r {
		q := req.quantity
		for _, p := range pods {
			if q -= p.request(req.name); q <= 0 {
				break
			}
		}
		if q > 0 {
			out = append(out, requirement{name: req.name, quantity: q})
		}
	}
	return out
}

// String is the kubelet's admissionRequirementList.toString.
func (r requirements) String() string {
	var b strings.Builder
	b.WriteString("[")
	for _, req := range r {
		fmt.Fprintf(&b, "(res: %v, q: %d), ", req.name, req.quantity)
	}
	return b.String() + "]"
}

// request is resource.GetResourceRequest: a pod counts as one pod.
func (p *PodInfo) request(name corev1.ResourceName) int64 {
	switch name {
	case corev1.ResourcePods:
		return 1
	case corev1.ResourceCPU:
		return p.requests.milliCPU
	case corev1.ResourceMemory:
		return p.requests.memory
	case corev1.ResourceEphemeralStorage:
		return p.requests.ephemeralStorage
	}
	return p.requests.scalar[name]
}

// smallerRequest is the kubelet's smallerResourceRequest: memory, then cpu.
func smallerRequest(a, b *PodInfo) bool {
	for _, name := range []corev1.ResourceName{corev1.ResourceMemory, corev1.ResourceCPU} {
		if x, y := a.request(name), b.request(name); x != y {
			return x < y
		}
	}
	return true
}

// sortByQOS keeps the pods the preemptor may preempt, by QoS class.
func sortByQOS(preemptor *Attributes, pods []*PodInfo) (bestEffort, burstable, guaranteed []*PodInfo) {
	for _, p := range pods {
		if !preemptable(preemptor, p) {
			continue
		}
		switch podutil.QOSClass(p.Pod) {
		case corev1.PodQOSBestEffort:
			bestEffort = append(bestEffort, p)
		case corev1.PodQOSBurstable:
			burstable = append(burstable, p)
		case corev1.PodQOSGuaranteed:
			guaranteed = append(guaranteed, p)
		}
	}
	return
}

// preemptable is the kubelet's kubetypes.Preemptable: a critical pod may
// preempt any non-critical one; otherwise only a higher priority may.
func preemptable(preemptor *Attributes, p *PodInfo) bool {
	victim := &Attributes{Pod: p.Pod, Static: p.Static}
	if preemptor.Critical() && !victim.Critical() {
		return true
	}
	a, b := preemptor.Pod.Spec.Priority, p.Pod.Spec.Priority
	return a != nil && b != nil && *a > *b
}
