package machine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodelet/nodelet/internal/e2e"
	"github.com/nodelet/nodelet/internal/testenv"
	"github.com/nodelet/nodelet/internal/testenv/eventually"
	"github.com/nodelet/nodelet/internal/tools/units"
)

// burstableManifest is a static pod of class Burstable: requests below
// its limits (memory 32Mi of 64Mi, CPU 100m of 200m).
const burstableManifest = `apiVersion: v1
kind: Pod
metadata:
  name: limited
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: sleep
    image: nodelet.local/busybox:1.35
    imagePullPolicy: Never
    command: [sleep, "3600"]
    resources:
      requests: {memory: 32Mi, cpu: 100m}
      limits: {memory: 64Mi, cpu: 200m}
`

// TestNodeUnderSystemdDriver runs a whole node under the systemd cgroup
// driver: Debian 12 with its own systemd as PID 1 (systemd-nspawn, the
// machine testenv.BootSystemdDriverMachine makes), a containerd of its
// own there as containerd.service with SystemdCgroup = true (2.x, or 1.6
// with NODELET_TEST_CONTAINERD=1), and every daemon as its generated unit
// (nodelet.target) with runtime.cgroupDriver systemd under the kubelet's
// root, kubepods. A Burstable static pod runs: its pod cgroup is the slice
// kubepods-burstable-pod<uid, "-" as "_">.slice under
// kubepods-burstable.slice with the pod's limits, its container the scope
// cri-containerd-<id>.scope under it with its own, as systemd and the
// cgroup files both say; the read-only API says Running and
// /stats/summary gives the pod's CPU and processes from its slice. A
// restart of nodelet-runtime's unit alone keeps the container. Without
// the manifest the pod goes and leaves no unit, slice or scope; the
// machine's teardown leaves no cgroup, shim or bridge on the host.
func TestNodeUnderSystemdDriver(t *testing.T) {
	root := testenv.RequiresNspawn(t)
	// Before the host check below is registered: it runs under the lock.
	testenv.LockSystemdDriver(t)
	began := time.Now()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	_, stateDir, logsDir := nodeDirs(t, "nspawn")
	etc := t.TempDir()
	manifests := filepath.Join(etc, "manifests")
	if err := os.MkdirAll(manifests, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(etc, 0o755); err != nil {
		t.Fatal(err)
	}
	var mc *testenv.Containerd
	// Registered first, it runs last: after the machine is gone.
	t.Cleanup(func() {
		// The machine's cgroups are the host's. The node's root and QoS
		// slices stay, as the kubelet's kubepods: systemd removed them at
		// poweroff in the hierarchies it manages, the others (cpuset,
		// freezer, ...: made by the systemd driver itself) go here.
		defer e2e.RemoveCgroupDirs("/kubepods.slice")
		if t.Failed() || mc == nil {
			return
		}
		// Nothing of the pods is left on the host: no pod slice or
		// container scope in any hierarchy, and nothing of the machine's
		// containerd (dirs, bridge, shims, nat rules) while its slot is
		// free.
		if out, _ := exec.Command("sh", "-c", "find /sys/fs/cgroup/ -name 'kubepods*-pod*.slice' -o -name 'cri-containerd-*.scope' 2>/dev/null").Output(); strings.TrimSpace(string(out)) != "" {
			t.Errorf("pod cgroups left on the host after the machine's teardown:\n%s", out)
		}
		if left, ok := mc.Leftovers(""); !ok {
			t.Logf("slot %d was taken again before its check", mc.Slot)
		} else if len(left) > 0 {
			t.Errorf("the machine's containerd left on the host: %v", left)
		}
	})

	m := testenv.BootSystemdDriverMachine(t, root, []string{stateDir, logsDir},
		[]string{binDir + ":/usr/local/bin", etc + ":/etc/nodelet", filepath.Dir(self)})
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := m.Run("journalctl", "--no-pager", "-n", "200", "-u", "nodelet-*", "-u", testenv.MachineContainerdUnit)
			t.Logf("journal:\n%s", out)
		}
	})
	mc = testenv.StartMachineContainerd(t, m, self, testenv.ContainerdOptions{SystemdCgroup: true})
	cri := mc.RuntimeClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if v, err := cri.Runtime.Version(ctx, &runtimeapi.VersionRequest{}); err != nil {
		t.Fatal(err)
	} else {
		t.Logf("the machine's runtime: %s %s", v.RuntimeName, v.RuntimeVersion)
	}

	readOnly := fmt.Sprintf("127.0.0.1:%d", e2e.FreePort(t))
	_, roPort, _ := strings.Cut(readOnly, ":")
	cfg := fmt.Sprintf(`node:
  name: systemd-driver-node
  stateDir: %s
  podLogsDir: %s
  podCIDR: %s
bus:
  listen: 127.0.0.1:%d
  heartbeatInterval: 1s
runtime:
  endpoint: %s
  cniConfDir: %s
  cgroupDriver: systemd
  cgroupRoot: /kubepods
  cniBridgeName: %s
  cniNetworkName: %s
  manageCNIConfig: false
sources:
  staticPodPath: /etc/nodelet/manifests
  fileCheckFrequency: 2s
server:
  address: 127.0.0.1
  port: %d
  readOnlyPort: %s
  healthzPort: %d
`, stateDir, logsDir, mc.Subnet, e2e.FreePort(t), mc.Endpoint, mc.CNIConfDir, mc.BridgeName, mc.NetworkName,
		e2e.FreePort(t), roPort, e2e.FreePort(t))
	if err := os.WriteFile(filepath.Join(etc, "nodelet.yaml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	o := units.Defaults()
	o.StateDir, o.PodLogsDir, o.CgroupRoot, o.CgroupDriver = stateDir, logsDir, "/kubepods", "systemd"
	shareSocket(t, mc.Address, installUnits(t, m, o))
	m.MustRun(t, "systemctl", "daemon-reload")
	startAt := time.Now()
	m.MustRun(t, "systemctl", "start", "nodelet.target")
	t.Logf("nodelet.target started in %s", time.Since(startAt).Round(time.Millisecond))
	for name, s := range showUnits(t, m) {
		if s.active != "active" {
			t.Fatalf("%s: %+v", name, s)
		}
	}

	// The Burstable pod runs, as the read-only API says.
	if err := os.WriteFile(filepath.Join(manifests, "limited.yaml"), []byte(burstableManifest), 0o644); err != nil {
		t.Fatal(err)
	}
	podName := "limited-systemd-driver-node"
	var pod *corev1.Pod
	eventually.True(t, 60*time.Second, "the static pod Running on the read-only API", func() bool {
		pod = readOnlyPod(readOnly, podName)
		return pod != nil && pod.Status.Phase == corev1.PodRunning && len(pod.Status.ContainerStatuses) == 1 &&
			pod.Status.ContainerStatuses[0].State.Running != nil
	})
	uid := string(pod.UID)
	ctr := runningContainer(t, cri, uid)

	// The pod slice: systemd's unit under kubepods-burstable.slice, under
	// kubepods.slice, with the pod's limits (the kubelet's
	// ResourceConfigForPod: memory 64Mi, CPU quota 20ms of 100ms).
	podSlice := "kubepods-burstable-pod" + strings.ReplaceAll(uid, "-", "_") + ".slice"
	scope := "cri-containerd-" + ctr.Id + ".scope"
	for unit, want := range map[string]map[string]string{
		"kubepods-burstable.slice": {"ActiveState": "active", "Slice": "kubepods.slice"},
		podSlice: {"ActiveState": "active", "Slice": "kubepods-burstable.slice",
			"MemoryLimit": strconv.Itoa(64 << 20), "CPUQuotaPerSecUSec": "200ms"},
		scope: {"ActiveState": "active", "Slice": podSlice, "MemoryLimit": strconv.Itoa(64 << 20)},
	} {
		got := unitProps(t, m, unit)
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s: %s=%q, want %q", unit, k, got[k], v)
			}
		}
	}
	podDir := "kubepods.slice/kubepods-burstable.slice/" + podSlice
	for file, want := range map[string]string{
		"memory/" + podDir + "/memory.limit_in_bytes":               strconv.Itoa(64 << 20),
		"cpu/" + podDir + "/cpu.cfs_quota_us":                       "20000",
		"cpu/" + podDir + "/cpu.cfs_period_us":                      "100000",
		"memory/" + podDir + "/" + scope + "/memory.limit_in_bytes": strconv.Itoa(64 << 20),
	} {
		if got := cgroupFile(t, m, file); got != want {
			t.Errorf("%s = %q, want %q", file, got, want)
		}
	}

	// /stats/summary reads the pod's slice: its CPU time lies between two
	// readings of the slice's cpuacct.usage around the request, its
	// process count (pause and sleep) is the slice's pids.current.
	eventually.True(t, 30*time.Second, "the pod's CPU and processes in /stats/summary from its slice", func() bool {
		before := cgroupUint(t, m, "cpuacct/"+podDir+"/cpuacct.usage")
		ps := summaryPod(t, readOnly, uid)
		after := cgroupUint(t, m, "cpuacct/"+podDir+"/cpuacct.usage")
		if ps == nil || ps.CPU == nil || ps.CPU.UsageCoreNanoSeconds == nil || ps.ProcessStats == nil || ps.ProcessStats.ProcessCount == nil ||
			ps.Memory == nil || ps.Memory.WorkingSetBytes == nil {
			return false
		}
		cpu := *ps.CPU.UsageCoreNanoSeconds
		return before > 0 && before <= cpu && cpu <= after &&
			*ps.ProcessStats.ProcessCount == cgroupUint(t, m, "pids/"+podDir+"/pids.current") && *ps.Memory.WorkingSetBytes > 0
	})

	// The server found the pod slices (no fallback to CRI's sandbox
	// stats), and containerd measures the container in its scope, where
	// eviction (nodelet-gc, ListContainerStats) reads its working set.
	if out, _ := m.Run("journalctl", "--no-pager", "-o", "cat", "-u", "nodelet-server"); strings.Contains(out, "Cannot read pod cgroups") {
		t.Errorf("nodelet-server cannot read the pod slices:\n%s", out)
	}
	eventually.True(t, 30*time.Second, "the container's working set from CRI", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		st, err := cri.Runtime.ContainerStats(ctx, &runtimeapi.ContainerStatsRequest{ContainerId: ctr.Id})
		return err == nil && st.GetStats().GetMemory().GetWorkingSetBytes().GetValue() > 0
	})

	// A restart of nodelet-runtime's unit alone keeps the container: once
	// the new process has loaded its inputs and started its pod workers,
	// the pod has the same running container, never restarted.
	before := showUnits(t, m)
	m.MustRun(t, "systemctl", "restart", "nodelet-runtime.service")
	var newPID int
	eventually.True(t, 60*time.Second, "nodelet-runtime restarted and its pod workers started", func() bool {
		s := showUnits(t, m)["runtime"]
		if s.active != "active" || s.mainPID == before["runtime"].mainPID {
			return false
		}
		newPID = s.mainPID
		out, _ := m.Run("journalctl", "--no-pager", "-o", "cat", "_PID="+strconv.Itoa(newPID))
		return strings.Contains(out, "Inputs loaded, starting pod workers")
	})
	eventually.True(t, 30*time.Second, "the pod Running on the read-only API after the runtime's restart", func() bool {
		p := readOnlyPod(readOnly, podName)
		return p != nil && p.Status.Phase == corev1.PodRunning
	})
	if again := runningContainer(t, cri, uid); again.Id != ctr.Id || again.Annotations["io.kubernetes.container.restartCount"] != "0" {
		t.Errorf("after the runtime's restart the container is %s (restartCount %s), was %s",
			again.Id, again.Annotations["io.kubernetes.container.restartCount"], ctr.Id)
	}
	if out, _ := m.Run("journalctl", "--no-pager", "-o", "cat", "_PID="+strconv.Itoa(newPID)); strings.Contains(out, "Killing container") {
		t.Errorf("the restarted runtime killed a container:\n%s", out)
	}
	sameExcept(t, before, showUnits(t, m), "runtime")

	// Without the manifest the pod goes, and so do its slice and scope.
	if err := os.Remove(filepath.Join(manifests, "limited.yaml")); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 60*time.Second, "the pod gone from the read-only API and CRI", func() bool {
		if readOnlyPod(readOnly, podName) != nil {
			return false
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		sbs, err := cri.Runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
		return err == nil && len(sbs.Items) == 0
	})
	var left string
	eventually.True(t, 30*time.Second, "no pod slice or container scope left", func() bool {
		units, _ := m.Run("systemctl", "list-units", "--all", "--plain", "--no-legend", "kubepods*pod*", "cri-containerd-*")
		dirs, _ := m.Run("sh", "-c", "find /sys/fs/cgroup/ -name 'kubepods*-pod*.slice' -o -name 'cri-containerd-*.scope' 2>/dev/null")
		left = strings.TrimSpace(units + dirs)
		return left == ""
	})
	t.Logf("the test took %s (after the lock)", time.Since(began).Round(time.Second))
}

// readOnlyPod is the pod named name on the read-only API at addr, nil when
// absent or unreadable.
func readOnlyPod(addr, name string) *corev1.Pod {
	resp, err := http.Get("http://" + addr + "/pods")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var l corev1.PodList
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&l) != nil {
		return nil
	}
	for i := range l.Items {
		if l.Items[i].Name == name {
			return &l.Items[i]
		}
	}
	return nil
}

// summaryPod is the pod uid's entry of /stats/summary at addr.
func summaryPod(t *testing.T, addr, uid string) *statsapi.PodStats {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/stats/summary")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var s statsapi.Summary
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&s) != nil {
		return nil
	}
	for i := range s.Pods {
		if s.Pods[i].PodRef.UID == uid {
			return &s.Pods[i]
		}
	}
	return nil
}

// runningContainer is the pod uid's one running container (the test fails
// unless there is exactly one).
func runningContainer(t *testing.T, cri *testenv.CRI, uid string) *runtimeapi.Container {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := cri.Runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
		LabelSelector: map[string]string{"io.kubernetes.pod.uid": uid}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Containers) != 1 || resp.Containers[0].State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("pod %s: containers %v, want one running", uid, resp.Containers)
	}
	return resp.Containers[0]
}

// unitProps is `systemctl show` of unit in the machine.
func unitProps(t *testing.T, m *testenv.Machine, unit string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, l := range strings.Split(m.MustRun(t, "systemctl", "show", unit), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			out[k] = v
		}
	}
	return out
}

// cgroupFile reads a file below the machine's /sys/fs/cgroup.
func cgroupFile(t *testing.T, m *testenv.Machine, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(m.RootPath(), "/sys/fs/cgroup", rel))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func cgroupUint(t *testing.T, m *testenv.Machine, rel string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(cgroupFile(t, m, rel), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
