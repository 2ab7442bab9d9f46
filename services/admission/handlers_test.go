package admission

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/config"
)

type handlerCase struct {
	name    string
	pod     *corev1.Pod
	static  bool
	others  []*PodInfo
	reason  string // "" = admitted
	message string // checked when not empty
}

func runCases(t *testing.T, h Handler, cases []handlerCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := h.Admit(&Attributes{Pod: tc.pod, Static: tc.static, OtherPods: tc.others})
			if tc.reason == "" {
				if !got.Admit || got.Reason != "" || got.Message != "" {
					t.Fatalf("want admitted, got %+v", got)
				}
				return
			}
			if got.Admit || got.Reason != tc.reason {
				t.Fatalf("want reason %q, got %+v", tc.reason, got)
			}
			if tc.message != "" && got.Message != tc.message {
				t.Fatalf("message:\n got %q\nwant %q", got.Message, tc.message)
			}
		})
	}
}

func TestResourceFit(t *testing.T) {
	h := NewPredicateHandler(testNode(t, func(c *config.Config) { c.Node.MaxPods = 3 }))
	runCases(t, h, []handlerCase{
		{name: "fits", pod: makePod("p", 0, withCPU("500m")), others: cpuPods(1, "1500m")},
		{name: "exactly fills the node", pod: makePod("p", 0, withCPU("1")), others: cpuPods(2, "500m")},
		{name: "no requests on a full node", pod: makePod("p", 0), others: cpuPods(2, "1")},
		{name: "cpu", pod: makePod("p", 0, withCPU("4")), others: cpuPods(1, "1500m"),
			reason: "OutOfcpu", message: "Node didn't have enough resource: cpu, requested: 4000, used: 1500, capacity: 2000"},
		{name: "cpu, one millicore over", pod: makePod("p", 0, withCPU("501m")), others: cpuPods(1, "1500m"),
			reason: "OutOfcpu", message: "Node didn't have enough resource: cpu, requested: 501, used: 1500, capacity: 2000"},
		{name: "memory", pod: makePod("p", 0, withRequests("memory", "3Gi")),
			others: infos(makePod("o", 0, withRequests("memory", "2Gi"))),
			reason: "OutOfmemory", message: "Node didn't have enough resource: memory, requested: 3221225472, used: 2147483648, capacity: 4294967296"},
		{name: "ephemeral storage", pod: makePod("p", 0, withRequests("ephemeral-storage", "21Gi")),
			reason: "OutOfephemeral-storage", message: "Node didn't have enough resource: ephemeral-storage, requested: 22548578304, used: 0, capacity: 21474836480"},
		{name: "pods", pod: makePod("p", 0), others: cpuPods(3, "0"),
			reason: "OutOfpods", message: "Node didn't have enough resource: pods, requested: 1, used: 3, capacity: 3"},
		{name: "extended resource", pod: makePod("p", 0, withRequests("example.com/gpu", "2")),
			others: infos(makePod("o", 0, withRequests("example.com/gpu", "1"))),
			reason: "OutOfexample.com/gpu", message: "Node didn't have enough resource: example.com/gpu, requested: 2, used: 1, capacity: 2"},
		{name: "extended resource the scheduler's DRA claim serves is not accounted, even by a device plugin's name",
			pod: makePod("p", 0, withRequests("example.com/gpu", "3"), func(p *corev1.Pod) {
				p.Status.ExtendedResourceClaimStatus = &corev1.PodExtendedResourceClaimStatus{ResourceClaimName: "p-ext",
					RequestMappings: []corev1.ContainerExtendedResourceRequest{{ContainerName: p.Spec.Containers[0].Name, ResourceName: "example.com/gpu", RequestName: "r0"}}}
			}), others: infos(makePod("o", 0, withRequests("example.com/gpu", "1")))},
		{name: "extended resource the node does not have is not accounted", pod: makePod("p", 0, withRequests("other.io/fpga", "1"))},
		{name: "hugepages the node does not have", pod: makePod("p", 0, withRequests("hugepages-2Mi", "4Mi", "memory", "4Mi")),
			reason: "OutOfhugepages-2Mi", message: "Node didn't have enough resource: hugepages-2Mi, requested: 4194304, used: 0, capacity: 0"},
		{name: "init containers: the largest counts", pod: makePod("p", 0, withCPU("1"), withInit("i", false, "cpu", "3")),
			reason: "OutOfcpu", message: "Node didn't have enough resource: cpu, requested: 3000, used: 0, capacity: 2000"},
		{name: "a small init container does not add", pod: makePod("p", 0, withCPU("2"), withInit("i", false, "cpu", "1"))},
		{name: "sidecars add to the app containers", pod: makePod("p", 0, withCPU("1500m"), withInit("s", true, "cpu", "1")),
			reason: "OutOfcpu", message: "Node didn't have enough resource: cpu, requested: 2500, used: 0, capacity: 2000"},
		{name: "app containers add up", pod: makePod("p", 0, withCPU("1500m"), withContainer("d", "cpu", "600m")),
			reason: "OutOfcpu", message: "Node didn't have enough resource: cpu, requested: 2100, used: 0, capacity: 2000"},
		{name: "overhead adds", pod: makePod("p", 0, withCPU("1500m"), withOverhead("cpu", "1")),
			reason: "OutOfcpu", message: "Node didn't have enough resource: cpu, requested: 2500, used: 0, capacity: 2000"},
		{name: "pod-level resources win", pod: makePod("p", 0, withCPU("100m"), withPodResources("cpu", "3")),
			reason: "OutOfcpu", message: "Node didn't have enough resource: cpu, requested: 3000, used: 0, capacity: 2000"},
		{name: "pods count first, then cpu", pod: makePod("p", 0, withCPU("3")), others: cpuPods(3, "0"), reason: "OutOfpods"},
		{name: "cpu before memory", pod: makePod("p", 0, withRequests("cpu", "3", "memory", "5Gi")), reason: "OutOfcpu"},
		// Critical pods preempt others for resources; when no set of pods
		// frees enough, they are refused (HandleAdmissionFailure).
		{name: "critical pod beyond what preemption frees", pod: makePod("p", 0, withCPU("4"), withPriority(2000001000)), others: cpuPods(3, "1"),
			reason: "UnexpectedAdmissionError", message: "Unexpected error while attempting to recover from admission failure: " +
				"preemption: error finding a set of pods to preempt: no set of running pods found to reclaim resources: [(res: cpu, q: 2000), ]"},
		{name: "system-cluster-critical counts as critical", pod: makePod("p", 0, withCPU("4"), withPriority(2000000000)),
			reason: "UnexpectedAdmissionError"},
		{name: "high but not critical priority", pod: makePod("p", 0, withCPU("4"), withPriority(1000000000)), reason: "OutOfcpu"},
		{name: "static pod beyond the node", pod: makePod("p", 0, withCPU("1000")), static: true,
			reason: "UnexpectedAdmissionError", message: "Unexpected error while attempting to recover from admission failure: " +
				"preemption: error finding a set of pods to preempt: no set of running pods found to reclaim resources: [(res: cpu, q: 998000), ]"},
		{name: "mirror pod beyond the node", pod: makePod("p", 0, withCPU("4"), withAnnotation(corev1.MirrorPodAnnotationKey, "x")),
			reason: "UnexpectedAdmissionError"},
		{name: "critical pod still refused for affinity", pod: makePod("p", 0, withCPU("4"), withPriority(2000001000), withNodeSelector("disk", "ssd")),
			reason: "NodeAffinity"},
	})
}

func TestNodeAffinityAndName(t *testing.T) {
	h := NewPredicateHandler(testNode(t, func(c *config.Config) { c.Node.Labels = map[string]string{"disk": "ssd", "zone": "a"} }))
	runCases(t, h, []handlerCase{
		{name: "selector matches", pod: makePod("p", 0, withNodeSelector("disk", "ssd"))},
		{name: "selector on the node's own labels", pod: makePod("p", 0, withNodeSelector("kubernetes.io/hostname", "node-a", "kubernetes.io/os", "linux"))},
		{name: "selector does not match", pod: makePod("p", 0, withNodeSelector("disk", "hdd")),
			reason: "NodeAffinity", message: "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector"},
		{name: "selector on a missing label", pod: makePod("p", 0, withNodeSelector("gpu", "true")), reason: "NodeAffinity"},
		{name: "required affinity matches", pod: makePod("p", 0, withRequiredAffinity(
			corev1.NodeSelectorRequirement{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a", "b"}}))},
		{name: "required affinity does not match", pod: makePod("p", 0, withRequiredAffinity(
			corev1.NodeSelectorRequirement{Key: "zone", Operator: corev1.NodeSelectorOpNotIn, Values: []string{"a"}})), reason: "NodeAffinity"},
		{name: "affinity on the node name field", pod: makePod("p", 0, withFieldAffinity("node-a"))},
		{name: "affinity on another node's name", pod: makePod("p", 0, withFieldAffinity("node-b")), reason: "NodeAffinity"},
		{name: "invalid affinity does not match", pod: makePod("p", 0, withRequiredAffinity(
			corev1.NodeSelectorRequirement{Key: "zone", Operator: "Bogus"})), reason: "NodeAffinity"},
		{name: "no node name", pod: makePod("p", 0, func(p *corev1.Pod) { p.Spec.NodeName = "" })},
		{name: "another node's name", pod: makePod("p", 0, func(p *corev1.Pod) { p.Spec.NodeName = "node-b" }),
			reason: "NodeName", message: "Predicate NodeName failed: node(s) didn't match the requested node name"},
		{name: "affinity reported before node name", pod: makePod("p", 0, withNodeSelector("disk", "hdd"), func(p *corev1.Pod) { p.Spec.NodeName = "node-b" }),
			reason: "NodeAffinity"},
	})
}

func TestHostPorts(t *testing.T) {
	h := NewPredicateHandler(testNode(t))
	on := func(opts ...func(*corev1.Pod)) []*PodInfo { return infos(makePod("o", 0, opts...)) }
	runCases(t, h, []handlerCase{
		{name: "free port", pod: makePod("p", 0, withHostPort(8080, "", "")), others: on(withHostPort(8081, "", ""))},
		{name: "same port", pod: makePod("p", 0, withHostPort(8080, "", "")), others: on(withHostPort(8080, "", "")),
			reason: "NodePorts", message: "Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports"},
		{name: "TCP is the default protocol", pod: makePod("p", 0, withHostPort(8080, "", corev1.ProtocolTCP)), others: on(withHostPort(8080, "", "")), reason: "NodePorts"},
		{name: "other protocol", pod: makePod("p", 0, withHostPort(53, "", corev1.ProtocolUDP)), others: on(withHostPort(53, "", corev1.ProtocolTCP))},
		{name: "all addresses against one", pod: makePod("p", 0, withHostPort(8080, "0.0.0.0", "")), others: on(withHostPort(8080, "127.0.0.1", "")), reason: "NodePorts"},
		{name: "one address against all", pod: makePod("p", 0, withHostPort(8080, "127.0.0.1", "")), others: on(withHostPort(8080, "", "")), reason: "NodePorts"},
		{name: "two different addresses", pod: makePod("p", 0, withHostPort(8080, "127.0.0.2", "")), others: on(withHostPort(8080, "127.0.0.1", ""))},
		{name: "a sidecar's port is held", pod: makePod("p", 0, withHostPort(9000, "", "")), others: on(withSidecarPort(9000)), reason: "NodePorts"},
		{name: "an init container's port is not held", pod: makePod("p", 0, withHostPort(9000, "", "")), others: on(withInitPort(9000))},
		{name: "the pod's own sidecar conflicts with others", pod: makePod("p", 0, withSidecarPort(9000)), others: on(withHostPort(9000, "", "")), reason: "NodePorts"},
		{name: "container ports without host ports", pod: makePod("p", 0, func(p *corev1.Pod) {
			p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 80}}
		}), others: on(func(p *corev1.Pod) { p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 80}} })},
	})
}

func TestTaints(t *testing.T) {
	h := NewPredicateHandler(testNode(t, func(c *config.Config) {
		c.Node.Taints = []config.Taint{{Key: "dedicated", Value: "gpu", Effect: "NoExecute"}, {Key: "soft", Effect: "NoSchedule"}}
	}))
	runCases(t, h, []handlerCase{
		{name: "untolerated NoExecute", pod: makePod("p", 0), reason: "TaintToleration",
			message: "Predicate TaintToleration failed: node(s) had taints that the pod didn't tolerate"},
		{name: "tolerated by value", pod: makePod("p", 0, withToleration("dedicated", "gpu", corev1.TaintEffectNoExecute))},
		{name: "tolerated by key with any effect", pod: makePod("p", 0, withToleration("dedicated", "", ""))},
		{name: "wrong value", pod: makePod("p", 0, withToleration("dedicated", "cpu", corev1.TaintEffectNoExecute)), reason: "TaintToleration"},
		{name: "tolerating only the NoSchedule taint", pod: makePod("p", 0, withToleration("soft", "", corev1.TaintEffectNoSchedule)), reason: "TaintToleration"},
		{name: "static pods are not checked", pod: makePod("p", 0), static: true},
		{name: "resources reported before taints", pod: makePod("p", 0, withCPU("3")), reason: "OutOfcpu"},
	})
	// NoSchedule alone is the scheduler's business, not the kubelet's.
	h = NewPredicateHandler(testNode(t, func(c *config.Config) { c.Node.Taints = []config.Taint{{Key: "soft", Effect: "NoSchedule"}} }))
	runCases(t, h, []handlerCase{{name: "NoSchedule only", pod: makePod("p", 0)}})
}

func TestOSAndFeatures(t *testing.T) {
	strict, merge := corev1.SupplementalGroupsPolicyStrict, corev1.SupplementalGroupsPolicyMerge
	withPolicy := func(p *corev1.SupplementalGroupsPolicy) func(*corev1.Pod) {
		return func(pod *corev1.Pod) {
			pod.Spec.SecurityContext = &corev1.PodSecurityContext{SupplementalGroupsPolicy: p}
		}
	}
	withOS := func(name corev1.OSName) func(*corev1.Pod) {
		return func(p *corev1.Pod) { p.Spec.OS = &corev1.PodOS{Name: name} }
	}
	h := NewPredicateHandler(testNode(t))
	runCases(t, h, []handlerCase{
		{name: "linux label", pod: makePod("p", 0, withLabel("kubernetes.io/os", "linux"))},
		{name: "windows label", pod: makePod("p", 0, withLabel("kubernetes.io/os", "windows")), reason: "PodOSSelectorNodeLabelDoesNotMatch",
			message: "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label"},
		{name: "linux OS field", pod: makePod("p", 0, withOS(corev1.Linux))},
		{name: "windows OS field", pod: makePod("p", 0, withOS(corev1.Windows)), reason: "PodOSNotSupported",
			message: "Failed to admit pod as the OS field doesn't match node OS"},
		{name: "OS before resources", pod: makePod("p", 0, withOS(corev1.Windows), withCPU("9")), reason: "PodOSNotSupported"},
		{name: "supplemental groups Merge", pod: makePod("p", 0, withPolicy(&merge))},
		{name: "supplemental groups Strict", pod: makePod("p", 0, withPolicy(&strict)), reason: "SupplementalGroupsPolicyNotSupported",
			message: "SupplementalGroupsPolicy=Strict is not supported in this node"},
	})

	f := NewFeaturesHandler(testNode(t))
	no := false
	runCases(t, f, []handlerCase{
		{name: "plain pod", pod: makePod("p", 0)},
		{name: "restart all containers", pod: makePod("p", 0, func(p *corev1.Pod) {
			p.Spec.Containers[0].RestartPolicyRules = []corev1.ContainerRestartRule{{Action: corev1.ContainerRestartRuleActionRestartAllContainers}}
		}), reason: "PodFeatureUnsupported", message: "Pod requires node features that are not available: RestartAllContainersOnContainerExits"},
		{name: "user namespaces with host network", pod: makePod("p", 0, func(p *corev1.Pod) {
			p.Spec.HostNetwork, p.Spec.HostUsers = true, &no
		}), reason: "PodFeatureUnsupported"},
	})
}

func TestPressureHandler(t *testing.T) {
	burstable := withCPU("100m")
	for _, tc := range []struct {
		conds []corev1.NodeConditionType
		cases []handlerCase
	}{
		{nil, []handlerCase{{name: "no pressure, best effort", pod: makePod("p", 0)}}},
		{[]corev1.NodeConditionType{corev1.NodeMemoryPressure}, []handlerCase{
			{name: "best effort", pod: makePod("p", 0), reason: "Evicted", message: "The node had condition: [MemoryPressure]. "},
			{name: "burstable", pod: makePod("p", 0, burstable)},
			{name: "limits only make it guaranteed", pod: makePod("p", 0, withLimits("cpu", "1", "memory", "1Gi"))},
			{name: "ephemeral storage alone is still best effort", pod: makePod("p", 0, withRequests("ephemeral-storage", "1Gi")), reason: "Evicted"},
			{name: "requests in an init container", pod: makePod("p", 0, withInit("i", false, "memory", "10Mi"))},
			{name: "best effort tolerating memory pressure", pod: makePod("p", 0, withToleration(corev1.TaintNodeMemoryPressure, "", corev1.TaintEffectNoSchedule))},
			{name: "best effort tolerating something else", pod: makePod("p", 0, withToleration(corev1.TaintNodeDiskPressure, "", corev1.TaintEffectNoSchedule)), reason: "Evicted"},
			{name: "critical best effort", pod: makePod("p", 0, withPriority(2000001000))},
			{name: "static best effort", pod: makePod("p", 0), static: true},
		}},
		{[]corev1.NodeConditionType{corev1.NodeDiskPressure}, []handlerCase{
			{name: "burstable", pod: makePod("p", 0, burstable), reason: "Evicted", message: "The node had condition: [DiskPressure]. "},
			{name: "critical", pod: makePod("p", 0, withPriority(2000001000))},
			{name: "static", pod: makePod("p", 0), static: true},
		}},
		{[]corev1.NodeConditionType{corev1.NodeMemoryPressure, corev1.NodeDiskPressure}, []handlerCase{
			{name: "burstable under both", pod: makePod("p", 0, burstable), reason: "Evicted", message: "The node had condition: [MemoryPressure DiskPressure]. "},
		}},
		{[]corev1.NodeConditionType{corev1.NodePIDPressure}, []handlerCase{
			{name: "burstable under pid pressure", pod: makePod("p", 0, burstable), reason: "Evicted", message: "The node had condition: [PIDPressure]. "},
		}},
	} {
		runCases(t, &PressureHandler{Conditions: tc.conds}, tc.cases)
	}
}

// The node shutdown manager's admission: while the node shuts down every
// pod is refused, critical and static ones too; pressure keeps its reason.
func TestShutdownRefusesPods(t *testing.T) {
	shutdown := []handlerCase{
		{name: "burstable", pod: makePod("p", 0, withCPU("100m")), reason: ReasonNodeShutdown, message: MessageNodeShutdown},
		{name: "critical", pod: makePod("p", 0, withPriority(2000001000)), reason: ReasonNodeShutdown, message: MessageNodeShutdown},
		{name: "static", pod: makePod("p", 0), static: true, reason: ReasonNodeShutdown, message: MessageNodeShutdown},
	}
	runCases(t, &PressureHandler{ShuttingDown: true}, shutdown)
	runCases(t, &PressureHandler{ShuttingDown: true, Conditions: []corev1.NodeConditionType{corev1.NodeDiskPressure}}, []handlerCase{
		{name: "under pressure too", pod: makePod("p", 0), reason: ReasonEvicted, message: "The node had condition: [DiskPressure]. "},
	})
}

func TestAdmitterOrder(t *testing.T) {
	a := NewAdmitter(testNode(t), nil)
	a.Pressure.Conditions = []corev1.NodeConditionType{corev1.NodeDiskPressure}
	// Pressure is checked first, as the kubelet's eviction handler runs first.
	got := a.Admit(&Attributes{Pod: makePod("p", 0, withCPU("9"), withNodeSelector("disk", "hdd"))})
	if got.Reason != ReasonEvicted {
		t.Fatalf("want Evicted first, got %+v", got)
	}
	a.Pressure.Conditions = nil
	got = a.Admit(&Attributes{Pod: makePod("p", 0, withCPU("9"), withNodeSelector("disk", "hdd"))})
	if got.Reason != ReasonOutOfCPU {
		t.Fatalf("want OutOfcpu, got %+v", got)
	}
	if got := a.Admit(&Attributes{Pod: makePod("p", 0, withCPU("1"))}); !got.Admit {
		t.Fatalf("want admitted, got %+v", got)
	}
}
