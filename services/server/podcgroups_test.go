package server

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodelet/nodelet/internal/cgroups"
	"github.com/nodelet/nodelet/internal/cri"
	"github.com/nodelet/nodelet/internal/testenv"
)

// A pod in a pod cgroup under runtime.cgroupRoot gets its CPU, memory,
// process count and network in /stats/summary from that cgroup and a
// process in it, as the kubelet's from cAdvisor: no ListPodSandboxStats
// (on containerd 1.6 about 12 ms of containerd's CPU per pod: a full
// summary at 110 pods took 3 s, issue 37) and no PodSandboxStatus per pod.
func TestSummaryFromPodCgroups(t *testing.T) {
	testenv.RequiresRoot(t)
	ctrd := testenv.NewContainerd(t, testenv.ContainerdOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	clients := ctrd.Clients(ctx, t)
	cfg := testConfig(t)
	cfg.Runtime.CgroupRoot = fmt.Sprintf("/nodelet-statstest-%d", os.Getpid())
	m, err := cgroups.NewManager(cfg.Runtime.CgroupDriver)
	if err != nil {
		t.Fatal(err)
	}
	pods, err := cgroups.NewPods(m, cgroups.PodOptions{Root: cfg.Runtime.CgroupRoot})
	if err != nil {
		t.Fatal(err)
	}
	if err := pods.EnsureNode(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Destroy(pods.Root()) })
	const ns, name, uid = "default", "cgstats", "uid-cgstats"
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid)}}
	if err := pods.Ensure(pod, corev1.PodQOSBestEffort); err != nil {
		t.Fatal(err)
	}
	// Pods go before the root: the container's processes die with their
	// sandbox (the containerd's cleanup), the pod cgroup with Destroy.
	t.Cleanup(func() { _ = pods.Destroy(pods.PodName(uid, corev1.PodQOSBestEffort)) })
	testenv.RunBusyboxPodIn(ctx, t, clients.Runtime, cfg.Node.PodLogsDir, ns, name, uid, pods.ForCRI(uid, corev1.PodQOSBestEffort))
	counted := &countingRuntime{RuntimeService: clients.Runtime}
	ts := startServer(t, cfg, &cri.Clients{Runtime: counted, Image: clients.Image}, nil)

	var ps *statsapi.PodStats
	waitFor(t, 60*time.Second, "the pod's cgroup figures in /stats/summary", func() bool {
		var sum statsapi.Summary
		ts.getJSON("/stats/summary", &sum)
		ps = nil
		for i := range sum.Pods {
			if sum.Pods[i].PodRef.UID == uid {
				ps = &sum.Pods[i]
			}
		}
		return ps != nil && len(ps.Containers) == 1 && ps.Containers[0].CPU != nil && ps.Containers[0].CPU.UsageCoreNanoSeconds != nil &&
			ps.CPU != nil && ps.Memory != nil && ps.Network != nil
	})
	if n := counted.sandboxStats.Load(); n != 0 {
		t.Errorf("a full summary of a pod with a pod cgroup called ListPodSandboxStats %d times", n)
	}
	if n := counted.sandboxStatus.Load(); n != 0 {
		t.Errorf("a full summary called PodSandboxStatus %d times for the pod's network", n)
	}
	c := ps.Containers[0]
	// The pod cgroup holds the container (and the pause process): it used
	// at least the container's CPU.
	if ps.CPU.UsageCoreNanoSeconds == nil || *ps.CPU.UsageCoreNanoSeconds < *c.CPU.UsageCoreNanoSeconds {
		t.Errorf("pod CPU %v below its container's %d", ps.CPU.UsageCoreNanoSeconds, *c.CPU.UsageCoreNanoSeconds)
	}
	if ps.Memory.WorkingSetBytes == nil || *ps.Memory.WorkingSetBytes == 0 || ps.Memory.UsageBytes == nil || *ps.Memory.UsageBytes < *ps.Memory.WorkingSetBytes {
		t.Errorf("pod memory %+v", ps.Memory)
	}
	// pause, sh and its sleep.
	if ps.ProcessStats == nil || ps.ProcessStats.ProcessCount == nil || *ps.ProcessStats.ProcessCount < 2 {
		t.Errorf("pod processes %+v, want at least 2", ps.ProcessStats)
	}
	if ps.Network.Name != "eth0" || ps.Network.RxBytes == nil {
		t.Errorf("pod network %+v, want eth0's counters", ps.Network)
	}
}
