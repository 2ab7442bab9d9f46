package admission

import (
	"runtime"
	"syscall"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/internal/podutil"
	"github.com/nodelet/nodelet/schemas"
)

func TestNodeFromConfig(t *testing.T) {
	cfg := testConfig(func(c *config.Config) {
		c.Node.MaxPods = 50
		c.Node.Labels = map[string]string{"disk": "ssd", "kubernetes.io/hostname": "override"}
		c.Node.Taints = []config.Taint{{Key: "dedicated", Value: "gpu", Effect: "NoExecute"}}
		c.Node.KubeReserved = map[string]string{"cpu": "200m", "memory": "256Mi"}
		c.Node.SystemReserved = map[string]string{"cpu": "300m", "ephemeral-storage": "1Gi", "pid": "100"}
		c.GC.EvictionHard = map[string]string{"memory.available": "100Mi", "nodefs.available": "10%", "imagefs.available": "15%"}
	})
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:              resource.MustParse("2"),
		corev1.ResourceMemory:           resource.MustParse("4Gi"),
		corev1.ResourceEphemeralStorage: resource.MustParse("10Gi"),
		"hugepages-2Mi":                 resource.MustParse("512Mi"),
	}
	node, err := NodeFromConfig(cfg, capacity)
	if err != nil {
		t.Fatal(err)
	}
	wantLabels := map[string]string{
		"kubernetes.io/hostname": "override", // node.labels win, as --node-labels do
		"kubernetes.io/os":       runtime.GOOS,
		"kubernetes.io/arch":     runtime.GOARCH,
		"disk":                   "ssd",
	}
	for k, v := range wantLabels {
		if node.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, node.Labels[k], v)
		}
	}
	if node.Name != "node-a" || len(node.Spec.Taints) != 1 || node.Spec.Taints[0].Effect != corev1.TaintEffectNoExecute {
		t.Errorf("name/taints: %s %+v", node.Name, node.Spec.Taints)
	}
	for name, want := range map[corev1.ResourceName]string{
		corev1.ResourceCPU: "1500m",
		// 4Gi - 256Mi kube - 100Mi eviction - 512Mi huge pages
		corev1.ResourceMemory: "3228Mi",
		// 10Gi - 1Gi system - 10% of 10Gi
		corev1.ResourceEphemeralStorage: "8Gi",
		"hugepages-2Mi":                 "512Mi",
		corev1.ResourcePods:             "50",
	} {
		got := node.Status.Allocatable[name]
		if got.Cmp(resource.MustParse(want)) != 0 {
			t.Errorf("allocatable %s = %s, want %s", name, got.String(), want)
		}
	}
	if c := node.Status.Capacity[corev1.ResourceCPU]; c.MilliValue() != 2000 {
		t.Errorf("capacity cpu = %s", c.String())
	}
	if p := node.Status.Capacity[corev1.ResourcePods]; p.Value() != 50 {
		t.Errorf("capacity pods = %s", p.String())
	}
	if capacity[corev1.ResourcePods] != (resource.Quantity{}) {
		t.Error("NodeFromConfig changed the capacity it was given")
	}

	// More reserved than there is: zero, never negative.
	cfg.Node.KubeReserved = map[string]string{"cpu": "3"}
	node, err = NodeFromConfig(cfg, capacity)
	if err != nil {
		t.Fatal(err)
	}
	if c := node.Status.Allocatable[corev1.ResourceCPU]; c.Sign() != 0 {
		t.Errorf("over-reserved cpu = %s, want 0", c.String())
	}

	cfg.Node.KubeReserved = map[string]string{"cpu": "lots"}
	if _, err := NodeFromConfig(cfg, capacity); err == nil {
		t.Error("a reservation that is not a quantity must be an error")
	}
}

// TestMachineCapacity reads this machine through cAdvisor.
func TestMachineCapacity(t *testing.T) {
	dir := t.TempDir()
	capacity, err := MachineCapacity{Dir: dir}.Capacity()
	if err != nil {
		t.Fatal(err)
	}
	cpu := capacity[corev1.ResourceCPU]
	if cpu.MilliValue() < 1000 || cpu.MilliValue()%1000 != 0 {
		t.Errorf("cpu = %s, want whole cores", cpu.String())
	}
	mem := capacity[corev1.ResourceMemory]
	if mem.Value() < 64<<20 {
		t.Errorf("memory = %s", mem.String())
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	disk := capacity[corev1.ResourceEphemeralStorage]
	if want := int64(st.Blocks) * st.Bsize; disk.Value() != want {
		t.Errorf("ephemeral-storage = %d, want the size of the filesystem of %s, %d", disk.Value(), dir, want)
	}

	_, err = MachineCapacity{Dir: "/does/not/exist"}.Capacity()
	if err == nil {
		t.Error("a state dir that does not exist must be reported")
	}
}

func TestPodInactive(t *testing.T) {
	term := func(code int32) schemas.ContainerObserved {
		return schemas.ContainerObserved{Name: "c", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code}}}
	}
	running := schemas.ContainerObserved{Name: "c", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}
	obs := func(f func(*schemas.PodObserved), ctrs ...schemas.ContainerObserved) *schemas.PodObserved {
		o := &schemas.PodObserved{Containers: ctrs}
		if f != nil {
			f(o)
		}
		return o
	}
	terminated := func(o *schemas.PodObserved) { o.Terminated = true }
	terminating := func(o *schemas.PodObserved) { o.Terminating = true }
	never, onFailure := withRestartPolicy(corev1.RestartPolicyNever), withRestartPolicy(corev1.RestartPolicyOnFailure)
	succeeded := func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }
	for _, tc := range []struct {
		name     string
		pod      *corev1.Pod
		obs      *schemas.PodObserved
		inactive bool
	}{
		{"not yet observed", makePod("p", 0), nil, false},
		{"running", makePod("p", 0), obs(nil, running), false},
		{"runtime says terminated", makePod("p", 0), obs(terminated), true},
		{"being killed still holds", makePod("p", 0, never), obs(terminating, term(0)), false},
		{"phase succeeded", makePod("p", 0, succeeded), nil, true},
		{"never: all exited", makePod("p", 0, never), obs(nil, term(1)), true},
		{"never: one still running", makePod("p", 0, never, withContainer("d")), obs(nil, term(0), running), false},
		{"never: a container not listed yet", makePod("p", 0, never, withContainer("d")), obs(nil, term(0)), false},
		{"on failure: succeeded", makePod("p", 0, onFailure), obs(nil, term(0)), true},
		{"on failure: failed, will restart", makePod("p", 0, onFailure), obs(nil, term(2)), false},
		{"always: exited, will restart", makePod("p", 0), obs(nil, term(0)), false},
	} {
		if got := podutil.Inactive(tc.pod, tc.obs); got != tc.inactive {
			t.Errorf("%s: inactive = %v, want %v", tc.name, got, tc.inactive)
		}
	}
}
