package cgroups

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	libmanager "github.com/opencontainers/cgroups/manager"

	"github.com/nodelet/nodelet/internal/testenv"
)

// The names of the kubelet's cgroup_manager_linux_test.go, with nodelet's root.
func TestNamesByDriver(t *testing.T) {
	n := Name{"nodelet", "burstable", "pod1234-abcd-5678-efgh"}
	if got := n.ToCgroupfs(); got != "/nodelet/burstable/pod1234-abcd-5678-efgh" {
		t.Errorf("cgroupfs: %s", got)
	}
	want := "/nodelet.slice/nodelet-burstable.slice/nodelet-burstable-pod1234_abcd_5678_efgh.slice"
	if got := n.ToSystemd(); got != want {
		t.Errorf("systemd: %s", got)
	}
	if got := n.ForCRI(DriverSystemd); got != "nodelet-burstable-pod1234_abcd_5678_efgh.slice" {
		t.Errorf("systemd CgroupParent: %s", got)
	}
	if got := n.ForCRI(DriverCgroupfs); got != "/nodelet/burstable/pod1234-abcd-5678-efgh" {
		t.Errorf("cgroupfs CgroupParent: %s", got)
	}
	if got := ParseSystemd(want); strings.Join(got, ",") != strings.Join(n, ",") {
		t.Errorf("ParseSystemd: %v", got)
	}
	if got := ParseCgroupfs("/nodelet/burstable/pod1"); len(got) != 3 || got[2] != "pod1" {
		t.Errorf("ParseCgroupfs: %v", got)
	}
	if _, err := NewName(Name{"a"}, "b_c"); err == nil {
		t.Error("NewName accepted _")
	}
}

func TestPodNamesByQOS(t *testing.T) {
	for _, tc := range []struct {
		driver string
		qos    corev1.PodQOSClass
		want   string
	}{
		{DriverCgroupfs, corev1.PodQOSGuaranteed, "/nodelet/pod1-2"},
		{DriverCgroupfs, corev1.PodQOSBurstable, "/nodelet/burstable/pod1-2"},
		{DriverCgroupfs, corev1.PodQOSBestEffort, "/nodelet/besteffort/pod1-2"},
		{DriverSystemd, corev1.PodQOSGuaranteed, "nodelet-pod1_2.slice"},
		{DriverSystemd, corev1.PodQOSBurstable, "nodelet-burstable-pod1_2.slice"},
		{DriverSystemd, corev1.PodQOSBestEffort, "nodelet-besteffort-pod1_2.slice"},
	} {
		p, err := NewPods(nil, PodOptions{Root: "/nodelet", Driver: tc.driver})
		if err != nil {
			t.Fatal(err)
		}
		if got := p.ForCRI("1-2", tc.qos); got != tc.want {
			t.Errorf("%s %s: %s, want %s", tc.driver, tc.qos, got, tc.want)
		}
	}
	if _, err := NewPods(nil, PodOptions{Root: "/nodelet", Driver: "upstart"}); err == nil {
		t.Error("unknown driver accepted")
	}
	if _, err := NewPods(nil, PodOptions{Root: "/", Driver: DriverCgroupfs}); err == nil {
		t.Error("root / accepted")
	}
}

func ctr(name string, req, lim corev1.ResourceList) corev1.Container {
	return corev1.Container{Name: name, Resources: corev1.ResourceRequirements{Requests: req, Limits: lim}}
}

func rl(kv ...string) corev1.ResourceList {
	out := corev1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		out[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return out
}

func i64(p *int64) string {
	if p == nil {
		return "nil"
	}
	return fmt.Sprint(*p)
}

// ResourceConfigForPod as the kubelet's helpers_linux_test.go computes it.
func TestResourceConfigForPod(t *testing.T) {
	burstable := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{
		ctr("a", rl("cpu", "100m", "memory", "16Mi"), rl("cpu", "200m", "memory", "32Mi")),
		ctr("b", rl("cpu", "100m"), rl("memory", "32Mi")),
	}}}
	rc := ResourceConfigForPod(burstable, corev1.PodQOSBurstable, true, QuotaPeriod)
	if i64(rc.Memory) != fmt.Sprint(64<<20) {
		t.Errorf("burstable memory: %s", i64(rc.Memory))
	}
	if *rc.CPUShares != 204 {
		t.Errorf("burstable shares: %d", *rc.CPUShares)
	}
	if rc.CPUQuota != nil {
		t.Errorf("burstable quota without every container's cpu limit: %d", *rc.CPUQuota)
	}
	// Every container with a CPU limit: quota is the sum; overhead counts.
	burstable.Spec.Containers[1].Resources.Limits["cpu"] = resource.MustParse("300m")
	burstable.Spec.Overhead = rl("cpu", "50m", "memory", "8Mi")
	rc = ResourceConfigForPod(burstable, corev1.PodQOSBurstable, true, QuotaPeriod)
	if i64(rc.CPUQuota) != "55000" || *rc.CPUPeriod != QuotaPeriod || i64(rc.Memory) != fmt.Sprint(72<<20) || *rc.CPUShares != 256 {
		t.Errorf("burstable with limits and overhead: quota %s memory %s shares %d", i64(rc.CPUQuota), i64(rc.Memory), *rc.CPUShares)
	}
	guaranteed := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{
		ctr("a", rl("cpu", "1", "memory", "64Mi", "hugepages-2Mi", "4Mi"), rl("cpu", "1", "memory", "64Mi", "hugepages-2Mi", "4Mi")),
	}}}
	rc = ResourceConfigForPod(guaranteed, corev1.PodQOSGuaranteed, true, QuotaPeriod)
	if i64(rc.CPUQuota) != "100000" || i64(rc.Memory) != fmt.Sprint(64<<20) || *rc.CPUShares != 1024 || rc.HugePageLimit[2<<20] != 4<<20 {
		t.Errorf("guaranteed: quota %s memory %s shares %d hugepages %v", i64(rc.CPUQuota), i64(rc.Memory), *rc.CPUShares, rc.HugePageLimit)
	}
	rc = ResourceConfigForPod(guaranteed, corev1.PodQOSGuaranteed, false, QuotaPeriod)
	if i64(rc.CPUQuota) != "-1" {
		t.Errorf("quota not enforced: %s", i64(rc.CPUQuota))
	}
	rc = ResourceConfigForPod(&corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a"}}}}, corev1.PodQOSBestEffort, true, QuotaPeriod)
	if *rc.CPUShares != MinShares || rc.Memory != nil || rc.CPUQuota != nil {
		t.Errorf("besteffort: %+v", rc)
	}
	if hugePageSizeName(2<<20) != "2MB" || hugePageSizeName(1<<30) != "1GB" {
		t.Error("huge page size names")
	}
	if CPUWeight(2) != 1 || CPUWeight(262144) != 10000 || CPUWeight(1024) != 39 {
		t.Errorf("CPU weights: %d %d %d", CPUWeight(2), CPUWeight(262144), CPUWeight(1024))
	}
}

// The systemd driver cannot run where systemd is not init: refused with
// the key to change.
func TestSystemdDriverNeedsSystemd(t *testing.T) {
	if _, err := os.Stat("/run/systemd/system"); err == nil {
		t.Skip("systemd runs here")
	}
	_, err := NewManager(DriverSystemd)
	if err == nil || !strings.Contains(err.Error(), `runtime.cgroupDriver is "systemd" but systemd is not running`) {
		t.Fatalf("systemd driver without systemd: %v", err)
	}
	if _, err := NewManager("upstart"); err == nil {
		t.Fatal("unknown driver accepted")
	}
}

// A real hierarchy with the cgroupfs driver: node allocatable root, QoS
// cgroups, a pod cgroup with its limits and PID limit, listed and removed.
func TestPodCgroupsOnTheHost(t *testing.T) {
	m, p := hostPods(t, "cgtest", PodOptions{PodPidsLimit: 20, NodeAllocatable: rl("cpu", "2", "memory", "1Gi", "pid", "4096")})
	read := func(n Name, ctrl, v1file, v2file string) int64 {
		t.Helper()
		file := v1file
		if m.V2() {
			ctrl, file = "", v2file
		}
		v, err := m.ReadInt(n, ctrl, file)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if v := read(p.Root(), "memory", "memory.limit_in_bytes", "memory.max"); v != 1<<30 {
		t.Errorf("node allocatable memory: %d", v)
	}
	if v := read(p.Root(), "pids", "pids.max", "pids.max"); v != 4096 {
		t.Errorf("node allocatable pids: %d", v)
	}
	if !m.V2() {
		if v := read(p.QOSName(corev1.PodQOSBestEffort), "cpu", "cpu.shares", ""); v != MinShares {
			t.Errorf("besteffort shares: %d", v)
		}
	}
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{
		ctr("a", rl("cpu", "100m", "memory", "32Mi"), rl("cpu", "200m", "memory", "32Mi")),
		ctr("b", rl("cpu", "100m", "memory", "32Mi"), rl("cpu", "200m", "memory", "32Mi")),
	}}}
	pod.UID = types.UID("0f0e0d0c-0000-4000-8000-000000000001")
	began := time.Now()
	if err := p.Ensure(pod, corev1.PodQOSBurstable); err != nil {
		t.Fatal(err)
	}
	t.Logf("pod cgroup created with its limits in %v", time.Since(began))
	n := p.PodName(string(pod.UID), corev1.PodQOSBurstable)
	if v := read(n, "memory", "memory.limit_in_bytes", "memory.max"); v != 64<<20 {
		t.Errorf("pod memory: %d", v)
	}
	if v := read(n, "pids", "pids.max", "pids.max"); v != 20 {
		t.Errorf("pod pids: %d", v)
	}
	if !m.V2() {
		if v := read(n, "cpu", "cpu.cfs_quota_us", ""); v != 40000 {
			t.Errorf("pod quota: %d", v)
		}
		if v := read(n, "cpu", "cpu.shares", ""); v != 204 {
			t.Errorf("pod shares: %d", v)
		}
	}
	if got := p.OnDisk(); len(got) != 1 || got[string(pod.UID)].ToCgroupfs() != n.ToCgroupfs() {
		t.Errorf("pods on disk: %v", got)
	}
	// A container cgroup below it goes with it.
	if err := os.Mkdir(filepath.Join(m.Dir(n, "memory"), "ctr"), 0o755); err != nil {
		t.Fatal(err)
	}
	began = time.Now()
	if err := p.Destroy(n); err != nil {
		t.Fatal(err)
	}
	t.Logf("pod cgroup removed in %v", time.Since(began))
	if _, err := os.Stat(m.Dir(n, "memory")); !os.IsNotExist(err) {
		t.Errorf("pod cgroup still there: %v", err)
	}
	if len(p.OnDisk()) != 0 {
		t.Error("pod still listed")
	}
}

// The directories the manager hands libcontainer (from the mounts it read
// once) are the ones libcontainer finds itself for every controller it
// manages.
func TestLibManagerPathsMatchLibcontainer(t *testing.T) {
	testenv.RequiresRoot(t)
	m, err := NewManager(DriverCgroupfs)
	if err != nil {
		t.Fatal(err)
	}
	if m.V2() {
		t.Skip("cgroup v1 only: on v2 libcontainer finds the one path itself")
	}
	n := ParseCgroupfs("/nodelet-cgtest/pod0f0e0d0c")
	c := m.libctConfig(n, &ResourceConfig{})
	theirs, err := libmanager.New(c)
	if err != nil {
		t.Fatal(err)
	}
	ours, err := m.libManager(c)
	if err != nil {
		t.Fatal(err)
	}
	want, got := theirs.GetPaths(), ours.GetPaths()
	if len(want) == 0 {
		t.Fatal("libcontainer found no controller")
	}
	if !maps.Equal(got, want) {
		t.Errorf("paths %v, libcontainer's %v", got, want)
	}
}

// A pod cgroup's creation with its limits and its removal, as the runtime
// does for each pod (cgroupfs driver).
func BenchmarkPodCgroupEnsureDestroy(b *testing.B) {
	_, p := hostPods(b, "cgbench", PodOptions{})
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{
		ctr("a", rl("cpu", "100m", "memory", "32Mi"), rl("cpu", "200m", "memory", "32Mi")),
	}}}
	pod.UID = types.UID("0f0e0d0c-0000-4000-8000-000000000002")
	n := p.PodName(string(pod.UID), corev1.PodQOSBurstable)
	for b.Loop() {
		if err := p.Ensure(pod, corev1.PodQOSBurstable); err != nil {
			b.Fatal(err)
		}
		if err := p.Destroy(n); err != nil {
			b.Fatal(err)
		}
	}
}

// hostPods is the host's cgroupfs hierarchy with a node root of its own
// (/nodelet-<name>-<pid>, opts.Root is set here), made and removed with tb.
func hostPods(tb testing.TB, name string, opts PodOptions) (*Manager, *Pods) {
	tb.Helper()
	testenv.RequiresRoot(tb)
	m, err := NewManager(DriverCgroupfs)
	if err != nil {
		tb.Fatal(err)
	}
	opts.Root = fmt.Sprintf("/nodelet-%s-%d", name, os.Getpid())
	p, err := NewPods(m, opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = m.Destroy(p.Root()) })
	if err := p.EnsureNode(); err != nil {
		tb.Fatal(err)
	}
	return m, p
}
