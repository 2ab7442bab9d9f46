package admission

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/internal/config"
)

// twoCPU is the node most tests run on: 2 cpus, 4Gi of memory, 20Gi of
// disk and two example.com/gpu devices.
var twoCPU = StaticCapacity{
	corev1.ResourceCPU:              resource.MustParse("2"),
	corev1.ResourceMemory:           resource.MustParse("4Gi"),
	corev1.ResourceEphemeralStorage: resource.MustParse("20Gi"),
	"example.com/gpu":               resource.MustParse("2"),
}

// testConfig is the defaults for node "node-a" without eviction
// reservations, so allocatable equals capacity unless a test reserves.
func testConfig(mutate ...func(*config.Config)) *config.Config {
	cfg := config.Defaults()
	cfg.Node.Name = "node-a"
	cfg.GC.EvictionHard = nil
	for _, m := range mutate {
		m(cfg)
	}
	return cfg
}

func testNode(t testing.TB, mutate ...func(*config.Config)) *corev1.Node {
	t.Helper()
	capacity, _ := twoCPU.Capacity()
	node, err := NodeFromConfig(testConfig(mutate...), capacity)
	if err != nil {
		t.Fatal(err)
	}
	return node
}

var epoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// makePod builds a pod of one container "c" created at epoch+created
// seconds, with the options applied.
func makePod(name string, created int, opts ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "default", Name: name, UID: types.UID("uid-" + name),
			CreationTimestamp: metav1.NewTime(epoch.Add(time.Duration(created) * time.Second)),
		},
		Spec: corev1.PodSpec{
			NodeName:      "node-a",
			RestartPolicy: corev1.RestartPolicyAlways,
			Containers:    []corev1.Container{{Name: "c", Image: "busybox"}},
		},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func requests(kv ...string) corev1.ResourceList {
	rl := corev1.ResourceList{}
	for i := 0; i+1 < len(kv); i += 2 {
		rl[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return rl
}

// withRequests sets the requests of the first app container.
func withRequests(kv ...string) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Spec.Containers[0].Resources.Requests = requests(kv...) }
}

func withCPU(q string) func(*corev1.Pod) { return withRequests("cpu", q) }

func withLimits(kv ...string) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Spec.Containers[0].Resources.Limits = requests(kv...) }
}

func withContainer(name string, kv ...string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: name, Image: "busybox",
			Resources: corev1.ResourceRequirements{Requests: requests(kv...)}})
	}
}

func withInit(name string, sidecar bool, kv ...string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		c := corev1.Container{Name: name, Image: "busybox", Resources: corev1.ResourceRequirements{Requests: requests(kv...)}}
		if sidecar {
			always := corev1.ContainerRestartPolicyAlways
			c.RestartPolicy = &always
		}
		p.Spec.InitContainers = append(p.Spec.InitContainers, c)
	}
}

func withOverhead(kv ...string) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Spec.Overhead = requests(kv...) }
}

func withPodResources(kv ...string) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Spec.Resources = &corev1.ResourceRequirements{Requests: requests(kv...)} }
}

func withHostPort(port int32, ip string, proto corev1.Protocol) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Spec.Containers[0].Ports = append(p.Spec.Containers[0].Ports,
			corev1.ContainerPort{ContainerPort: port, HostPort: port, HostIP: ip, Protocol: proto})
	}
}

func withSidecarPort(port int32) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		always := corev1.ContainerRestartPolicyAlways
		p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{Name: "proxy", Image: "busybox",
			RestartPolicy: &always, Ports: []corev1.ContainerPort{{ContainerPort: port, HostPort: port}}})
	}
}

func withInitPort(port int32) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{Name: "setup", Image: "busybox",
			Ports: []corev1.ContainerPort{{ContainerPort: port, HostPort: port}}})
	}
}

func withNodeSelector(kv ...string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Spec.NodeSelector = map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			p.Spec.NodeSelector[kv[i]] = kv[i+1]
		}
	}
}

func withRequiredAffinity(reqs ...corev1.NodeSelectorRequirement) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: reqs}},
			},
		}}
	}
}

func withFieldAffinity(name string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{
					{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{name}},
				}}},
			},
		}}
	}
}

func withToleration(key, value string, effect corev1.TaintEffect) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		op := corev1.TolerationOpEqual
		if value == "" {
			op = corev1.TolerationOpExists
		}
		p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Key: key, Operator: op, Value: value, Effect: effect})
	}
}

func withPriority(p int32) func(*corev1.Pod) {
	return func(pod *corev1.Pod) { pod.Spec.Priority = &p }
}

func withAnnotation(k, v string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[k] = v
	}
}

func withLabel(k, v string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		if p.Labels == nil {
			p.Labels = map[string]string{}
		}
		p.Labels[k] = v
	}
}

func withRestartPolicy(rp corev1.RestartPolicy) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Spec.RestartPolicy = rp }
}

func infos(pods ...*corev1.Pod) []*PodInfo {
	out := make([]*PodInfo, 0, len(pods))
	for _, p := range pods {
		out = append(out, NewPodInfo(p))
	}
	return out
}

// cpuPods returns n pods holding milli millicores each.
func cpuPods(n int, milli string) []*PodInfo {
	var pods []*corev1.Pod
	for i := 0; i < n; i++ {
		pods = append(pods, makePod("other-"+string(rune('a'+i)), 0, withCPU(milli)))
	}
	return infos(pods...)
}
