package runtime

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"
)

// Issue 32: a pod with only pod-level resources is not BestEffort, and
// its containers inherit its limits (the kubelet's getCPULimit and
// getMemoryLimit); the cgroup parent, OOM score and limits agree with
// the QoS class status reports (podutil.QOSClass).
func TestPodLevelResources(t *testing.T) {
	m := testManager(t)
	const capacity = 8 << 30
	for _, tc := range []struct {
		name     string
		podLevel corev1.ResourceRequirements
		cgroupIn string
		oom      int64
		shares   int64
		quota    int64
		memory   int64
	}{
		{"guaranteed at pod level", resources(rlist("cpu", "1", "memory", "256Mi"), rlist("cpu", "1", "memory", "256Mi")),
			"/nodelet/pod", -997, 1024, 100000, 256 << 20},
		// 1Gi asked by the pod and none by its two containers: each gets
		// half of it in its OOM score (remainingPodMemReqPerContainer).
		{"burstable at pod level", resources(rlist("memory", "1Gi"), rlist("memory", "2Gi")),
			"/nodelet/burstable/", 1000 - 1000*(512<<20)/capacity, 2, 0, 2 << 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := newPod("p", busybox("a", ""), busybox("b", ""))
			pod.Spec.Resources = &tc.podLevel
			if p := m.resources.cgroupParent(pod); !strings.HasPrefix(p, tc.cgroupIn) {
				t.Fatalf("cgroup parent %q, want under %q", p, tc.cgroupIn)
			}
			r := containerResources(pod, &pod.Spec.Containers[0], capacity)
			if r.OomScoreAdj != tc.oom || r.CpuShares != tc.shares || r.CpuQuota != tc.quota || r.MemoryLimitInBytes != tc.memory {
				t.Fatalf("resources %v, want oom %d shares %d quota %d memory %d", r, tc.oom, tc.shares, tc.quota, tc.memory)
			}
		})
	}
	// A container's own limit wins over the pod's.
	pod := newPod("p", busybox("a", ""))
	pod.Spec.Resources = &corev1.ResourceRequirements{Limits: rlist("memory", "1Gi"), Requests: rlist("memory", "1Gi")}
	pod.Spec.Containers[0].Resources = resources(rlist("memory", "64Mi"), rlist("memory", "128Mi"))
	if r := containerResources(pod, &pod.Spec.Containers[0], capacity); r.MemoryLimitInBytes != 128<<20 {
		t.Fatalf("container limit %d, want its own 128Mi", r.MemoryLimitInBytes)
	}
}

// Issue 32: per-container huge page limits, the kubelet's
// GetHugepageLimitsFromResources: every size of the machine at 0, then
// the pod's limits, then the container's.
func TestContainerHugePageLimits(t *testing.T) {
	sizes := []string{"2MB", "1GB"}
	limits := func(r *runtimeapi.LinuxContainerResources) map[string]uint64 {
		out := map[string]uint64{}
		for _, l := range r.HugepageLimits {
			out[l.PageSize] = l.Limit
		}
		return out
	}
	pod := newPod("p", busybox("a", ""), busybox("b", ""))
	pod.Spec.Containers[0].Resources = resources(rlist("memory", "64Mi", "hugepages-2Mi", "4Mi"), rlist("memory", "64Mi", "hugepages-2Mi", "4Mi"))
	got := limits(containerResourcesWith(pod, &pod.Spec.Containers[0], 8<<30, sizes))
	if len(got) != 2 || got["2MB"] != 4<<20 || got["1GB"] != 0 {
		t.Fatalf("container with hugepages-2Mi: %v", got)
	}
	if got := limits(containerResourcesWith(pod, &pod.Spec.Containers[1], 8<<30, sizes)); len(got) != 2 || got["2MB"] != 0 || got["1GB"] != 0 {
		t.Fatalf("container without huge pages: %v, want every size at 0", got)
	}
	// Pod-level huge pages reach the containers that set none.
	pod.Spec.Resources = &corev1.ResourceRequirements{Limits: rlist("memory", "1Gi", "hugepages-1Gi", "1Gi"), Requests: rlist("memory", "1Gi", "hugepages-1Gi", "1Gi")}
	if got := limits(containerResourcesWith(pod, &pod.Spec.Containers[1], 8<<30, sizes)); got["1GB"] != 1<<30 || got["2MB"] != 0 {
		t.Fatalf("pod-level hugepages-1Gi: %v", got)
	}
	if got := limits(containerResourcesWith(pod, &pod.Spec.Containers[0], 8<<30, sizes)); got["1GB"] != 1<<30 || got["2MB"] != 4<<20 {
		t.Fatalf("pod-level and container huge pages: %v", got)
	}
}

// The kubelet's GetContainerOOMScoreAdjust: a node-critical pod
// (priorityClassName system-node-critical, critical priority) is treated
// as Guaranteed whatever its QoS; a sidecar scores no higher than the
// pod's smallest regular container.
func TestOOMScoreAdj(t *testing.T) {
	const capacity = 8 << 30
	critical := newPod("dns", busybox("a", ""))
	critical.Spec.PriorityClassName = systemNodeCritical
	critical.Spec.Priority = ptr.To[int32](2000001000)
	if adj := oomScoreAdj(critical, &critical.Spec.Containers[0], capacity); adj != guaranteedOOMScoreAdj {
		t.Fatalf("node-critical best-effort pod: %d", adj)
	}
	critical.Spec.PriorityClassName = "system-cluster-critical"
	if adj := oomScoreAdj(critical, &critical.Spec.Containers[0], capacity); adj != besteffortOOMScoreAdj {
		t.Fatalf("cluster-critical best-effort pod: %d", adj)
	}

	side := busybox("side", "")
	side.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
	side.Resources = resources(rlist("memory", "64Mi"), nil)
	app := busybox("app", "")
	app.Resources = resources(rlist("memory", "1Gi"), nil)
	pod := newPod("sidecar", app)
	pod.Spec.InitContainers = []corev1.Container{side}
	appAdj := oomScoreAdj(pod, &pod.Spec.Containers[0], capacity)
	if adj := oomScoreAdj(pod, &pod.Spec.InitContainers[0], capacity); adj != appAdj || appAdj != 1000-1000*(1<<30)/capacity {
		t.Fatalf("sidecar %d, app %d: the sidecar must score as the smallest regular container", adj, appAdj)
	}
}
