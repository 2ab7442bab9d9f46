package admission

import (
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/config"
)

// A critical pod that does not fit preempts the pods the kubelet's
// getPodsToPreempt picks: lowest QoS class first, fewest and closest to what
// is missing; never critical pods, and only lower priorities for a
// non-critical preemptor.
func TestPreemption(t *testing.T) {
	h := NewPredicateHandler(testNode(t, func(c *config.Config) { c.Node.MaxPods = 4 }))
	critical := withPriority(2000001000)
	bestEffort := func(name string) *PodInfo { return NewPodInfo(makePod(name, 0)) }
	burstable := func(name, cpu string) *PodInfo { return NewPodInfo(makePod(name, 0, withCPU(cpu))) }
	guaranteed := func(name, cpu string) *PodInfo {
		return NewPodInfo(makePod(name, 0, withRequests("cpu", cpu, "memory", "64Mi"), withLimits("cpu", cpu, "memory", "64Mi")))
	}
	static := func(p *PodInfo) *PodInfo { p.Static = true; return p }
	for _, tc := range []struct {
		name    string
		pod     *corev1.Pod
		static  bool
		others  []*PodInfo
		victims []string // "" = refused
		reason  string
	}{
		{name: "one pod that frees enough beats a smaller one that does not", pod: makePod("p", 0, withCPU("1"), critical),
			others: []*PodInfo{burstable("a", "1500m"), burstable("b", "500m")}, victims: []string{"a"}},
		{name: "the closest pod, not the first", pod: makePod("p", 0, withCPU("1200m"), critical),
			others: []*PodInfo{burstable("a", "300m"), burstable("b", "1200m"), burstable("c", "500m")}, victims: []string{"b"}},
		{name: "burstable before guaranteed", pod: makePod("p", 0, withCPU("1"), critical),
			others: []*PodInfo{guaranteed("g", "1"), burstable("b", "1")}, victims: []string{"b"}},
		{name: "guaranteed when nothing else frees enough", pod: makePod("p", 0, withCPU("2"), critical),
			others: []*PodInfo{guaranteed("g", "1500m"), burstable("b", "500m")}, victims: []string{"b", "g"}},
		{name: "a pod slot is freed by a best-effort pod", pod: makePod("p", 0, critical),
			others: []*PodInfo{bestEffort("e1"), bestEffort("e2"), burstable("b", "1"), burstable("c", "1")}, victims: []string{"e2"}}, // a tie goes to the later one, as in the kubelet
		{name: "static pods are never preempted", pod: makePod("p", 0, withCPU("1"), critical),
			others: []*PodInfo{static(burstable("s", "2"))}, reason: ReasonUnexpectedAdmissionError},
		{name: "critical pods are never preempted", pod: makePod("p", 0, withCPU("1"), critical),
			others: []*PodInfo{NewPodInfo(makePod("c", 0, withCPU("2"), critical))}, reason: ReasonUnexpectedAdmissionError},
		{name: "a static pod preempts", pod: makePod("p", 0, withCPU("1")), static: true,
			others: []*PodInfo{burstable("b", "2")}, victims: []string{"b"}},
		{name: "a non-critical pod does not preempt", pod: makePod("p", 0, withCPU("1"), withPriority(1000)),
			others: []*PodInfo{NewPodInfo(makePod("low", 0, withCPU("2"), withPriority(1)))}, reason: ReasonOutOfCPU},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := h.Admit(&Attributes{Pod: tc.pod, Static: tc.static, OtherPods: tc.others})
			if tc.reason != "" {
				if got.Admit || got.Reason != tc.reason || len(got.Preempt) > 0 {
					t.Fatalf("want refused with %s, got %+v", tc.reason, got)
				}
				return
			}
			if !got.Admit {
				t.Fatalf("want admitted, got %+v", got)
			}
			var names []string
			for _, v := range got.Preempt {
				names = append(names, v.Pod.Name)
			}
			sort.Strings(names)
			if strings.Join(names, ",") != strings.Join(tc.victims, ",") {
				t.Errorf("victims = %v, want %v", names, tc.victims)
			}
		})
	}
}
