package runtime

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/bus/bustest"
	"github.com/nodelet/nodelet/internal/cgroups"
	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/internal/cri"
	"github.com/nodelet/nodelet/internal/daemon"
	"github.com/nodelet/nodelet/internal/testenv"
	"github.com/nodelet/nodelet/schemas"
)

// removeTestCgroupRoot removes what the package's runtimes left under
// testCgroupRoot (its QoS cgroups).
func removeTestCgroupRoot() {
	m, err := cgroups.NewManager(testCgroupDriver)
	if err != nil {
		return
	}
	// Under systemd, stopping the slice stops its child units as a job
	// libcontainer waits on for a second at most: a directory still busy
	// then is removed by a later try.
	root := cgroups.ParseCgroupfs(testCgroupRoot)
	for range 50 {
		_ = m.Destroy(root)
		if _, err := os.Stat(m.Dir(root, "memory")); os.IsNotExist(err) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// systemctlShow is `systemctl show -p props unit` (the systemd driver's
// units, in the machine the test runs in).
func systemctlShow(t *testing.T, unit, props string) string {
	t.Helper()
	out, err := exec.Command("systemctl", "show", "-p", props, unit).CombinedOutput()
	if err != nil {
		t.Fatalf("systemctl show %s: %v %s", unit, err, out)
	}
	return string(out)
}

// testCgroupPath is the cgroup named by a cgroupfs-style name (e.g.
// runtime.cgroupRoot) in the test driver's form: /nodelet-test-1/burstable
// or /kubepods.slice/kubepods-burstable.slice.
func testCgroupPath(cgroupfs string) string {
	return cgroups.ParseCgroupfs(cgroupfs).Path(testCgroupDriver)
}

// podCgroupPath is the pod's cgroup in the test driver's form (the
// kubelet's GetPodContainerName).
func podCgroupPath(t *testing.T, h *harness, uid string, qos corev1.PodQOSClass) string {
	t.Helper()
	p, err := cgroups.NewPods(nil, cgroups.PodOptions{Root: h.cfg.Runtime.CgroupRoot, Driver: testCgroupDriver})
	if err != nil {
		t.Fatal(err)
	}
	return p.PodName(uid, qos).Path(testCgroupDriver)
}

// qosCgroupPath is the parent of the pods of class qos.
func qosCgroupPath(t *testing.T, h *harness, qos corev1.PodQOSClass) string {
	t.Helper()
	p, err := cgroups.NewPods(nil, cgroups.PodOptions{Root: h.cfg.Runtime.CgroupRoot, Driver: testCgroupDriver})
	if err != nil {
		t.Fatal(err)
	}
	return p.QOSName(qos).Path(testCgroupDriver)
}

// containerCgroupPath is where runc puts a container (or sandbox) of a
// pod: a directory named by its ID under cgroupfs, the scope
// cri-containerd-<id>.scope under systemd (containerd's CRI gives runc
// "<slice>:cri-containerd:<id>").
func containerCgroupPath(pod, id string) string {
	if testCgroupDriver == cgroups.DriverSystemd {
		return filepath.Join(pod, "cri-containerd-"+id+".scope")
	}
	return filepath.Join(pod, id)
}

// cgroupFile reads one value of a cgroup v1 controller file under
// /sys/fs/cgroup/<controller><dir>.
func cgroupFile(t *testing.T, controller, dir, file string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", controller, dir, file))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func requiresCgroupV1(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/sys/fs/cgroup/memory"); err != nil {
		t.Skip("the cgroup files these tests read are cgroup v1's")
	}
}

func resources(req, lim corev1.ResourceList) corev1.ResourceRequirements {
	return corev1.ResourceRequirements{Requests: req, Limits: lim}
}

func rlist(kv ...string) corev1.ResourceList {
	out := corev1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		out[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return out
}

// Issue 19's acceptance, pod cgroups: a Burstable pod with a 64Mi memory
// limit over two containers gets its pod cgroup under the burstable
// parent with the summed limit and the pod PID limit, its containers and
// sandbox inside it; a container exceeding its memory is OOM-killed
// (OOMKilled); podPidsLimit 20 stops a fork bomb in one pod while another
// pod keeps running; the pod cgroups are gone after the pods, and a
// leftover pod cgroup found at start is removed.
func TestPodCgroupsLimitsAndRemoval(t *testing.T) {
	requiresCgroupV1(t)
	h := newHarness(t, harnessOptions{noStart: true, configure: func(c *config.Config) {
		c.Runtime.PodPidsLimit = 20
	}})
	root := h.cfg.Runtime.CgroupRoot
	// A pod cgroup no pod and no container knows, as a pod removed while
	// nodelet-runtime was down leaves it: directories under cgroupfs; under
	// systemd a slice unit, which systemd keeps (with its parent slices)
	// while nodelet is away.
	leftover := podCgroupPath(t, h, uuid.NewString(), corev1.PodQOSBurstable)
	if testCgroupDriver == cgroups.DriverSystemd {
		mgr, err := cgroups.NewManager(testCgroupDriver)
		if err != nil {
			t.Fatal(err)
		}
		if err := mgr.Create(cgroups.ParseSystemd(leftover), &cgroups.ResourceConfig{}); err != nil {
			t.Fatal(err)
		}
	} else {
		for _, ctrl := range []string{"memory", "cpu", "pids"} {
			if err := os.MkdirAll(filepath.Join("/sys/fs/cgroup", ctrl, leftover), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	h.setSourcesReady()
	h.start(nil)
	waitFor(t, time.Minute, "leftover pod cgroup removed", func() (bool, string) {
		_, err := os.Stat(filepath.Join("/sys/fs/cgroup/memory", leftover))
		return os.IsNotExist(err), fmt.Sprint(err)
	})

	// Two containers, 32Mi each: the pod's limit is 64Mi. "hog" fills
	// its memory once /tmp/go appears.
	hog := busybox("hog", `while [ ! -e /tmp/go ]; do sleep 0.2; done; x=$(head -c 134217728 /dev/zero | tr '\0' x); echo survived`)
	hog.Resources = resources(rlist("cpu", "50m", "memory", "16Mi"), rlist("memory", "32Mi"))
	idle := busybox("idle", "exec sleep 3600")
	idle.Resources = resources(rlist("cpu", "50m", "memory", "16Mi"), rlist("memory", "32Mi"))
	mem := newPod("mem", hog, idle)
	grace := int64(1)
	mem.Spec.TerminationGracePeriodSeconds = &grace
	mem.Spec.RestartPolicy = corev1.RestartPolicyNever

	bomb := newPod("bomb", busybox("bomb", "exec sleep 3600"))
	bomb.Spec.TerminationGracePeriodSeconds = &grace
	other := newPod("other", busybox("other", "exec sleep 3600"))
	other.Spec.TerminationGracePeriodSeconds = &grace
	// Guaranteed: requests equal limits, its cgroup directly under the root.
	goldC := busybox("gold", "exec sleep 3600")
	goldC.Resources = resources(rlist("cpu", "150m", "memory", "48Mi"), rlist("cpu", "150m", "memory", "48Mi"))
	gold := newPod("gold", goldC)
	gold.Spec.TerminationGracePeriodSeconds = &grace

	h.run(mem)
	h.run(other)
	h.run(gold)
	o := h.waitObserved(mem, 2*time.Minute, "mem running", func(o *schemas.PodObserved) bool { return running(o, "hog", "idle") })
	h.waitObserved(other, 2*time.Minute, "other running", func(o *schemas.PodObserved) bool { return running(o, "other") })
	og := h.waitObserved(gold, 2*time.Minute, "gold running", func(o *schemas.PodObserved) bool { return running(o, "gold") })

	memCgroup := podCgroupPath(t, h, string(mem.UID), corev1.PodQOSBurstable)
	// The kubelet's names: /<root>/burstable/pod<uid> under cgroupfs, the
	// slices kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice
	// (the UID's dashes as underscores) under systemd.
	wantMem := filepath.Join(root, "burstable", "pod"+string(mem.UID))
	if testCgroupDriver == cgroups.DriverSystemd {
		wantMem = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + strings.ReplaceAll(string(mem.UID), "-", "_") + ".slice"
	}
	if memCgroup != wantMem {
		t.Fatalf("burstable pod cgroup %s, want %s", memCgroup, wantMem)
	}
	goldCgroup := podCgroupPath(t, h, string(gold.UID), corev1.PodQOSGuaranteed)
	if path.Dir(goldCgroup) != testCgroupPath(root) {
		t.Fatalf("guaranteed pod cgroup %s not directly under the root %s", goldCgroup, testCgroupPath(root))
	}
	for file, want := range map[string]string{"memory.limit_in_bytes": strconv.Itoa(48 << 20)} {
		if v := cgroupFile(t, "memory", goldCgroup, file); v != want {
			t.Fatalf("guaranteed pod %s %s, want %s", file, v, want)
		}
	}
	for file, want := range map[string]string{"cpu.cfs_quota_us": "15000", "cpu.cfs_period_us": "100000", "cpu.shares": "153"} {
		if v := cgroupFile(t, "cpu", goldCgroup, file); v != want {
			t.Fatalf("guaranteed pod %s %s, want %s", file, v, want)
		}
	}
	if v := cgroupFile(t, "memory", containerCgroupPath(goldCgroup, trimContainerID(container(og, "gold").ContainerID)), "memory.limit_in_bytes"); v != strconv.Itoa(48<<20) {
		t.Fatalf("guaranteed container memory limit %s", v)
	}
	if v := cgroupFile(t, "memory", memCgroup, "memory.limit_in_bytes"); v != strconv.Itoa(64<<20) {
		t.Fatalf("pod memory limit %s, want 64Mi", v)
	}
	if v := cgroupFile(t, "pids", memCgroup, "pids.max"); v != "20" {
		t.Fatalf("pod pids.max %s, want 20", v)
	}
	if testCgroupDriver == cgroups.DriverSystemd {
		// The limits are systemd's, set on the slice unit through D-Bus
		// (libcontainer's systemd manager), not only written to the files:
		// systemd keeps them when it realizes the slice again.
		got := strings.Fields(systemctlShow(t, path.Base(memCgroup), "ActiveState,MemoryLimit,TasksMax,CPUShares"))
		slices.Sort(got)
		if want := []string{"ActiveState=active", "CPUShares=102", fmt.Sprintf("MemoryLimit=%d", 64<<20), "TasksMax=20"}; !slices.Equal(got, want) {
			t.Fatalf("pod slice %s: %v, want %v", path.Base(memCgroup), got, want)
		}
	}
	if v := cgroupFile(t, "cpu", memCgroup, "cpu.shares"); v != "102" {
		t.Fatalf("pod cpu.shares %s, want 102 (100m)", v)
	}
	// The burstable parent's shares are its pods' CPU requests (one pod).
	if v := cgroupFile(t, "cpu", qosCgroupPath(t, h, corev1.PodQOSBurstable), "cpu.shares"); v != "102" {
		t.Fatalf("burstable cpu.shares %s, want 102", v)
	}
	if v := cgroupFile(t, "cpu", qosCgroupPath(t, h, corev1.PodQOSBestEffort), "cpu.shares"); v != "2" {
		t.Fatalf("besteffort cpu.shares %s, want 2", v)
	}
	// Containers and sandbox are placed under the pod cgroup.
	for _, name := range []string{"hog", "idle"} {
		id := trimContainerID(container(o, name).ContainerID)
		if v := cgroupFile(t, "memory", containerCgroupPath(memCgroup, id), "memory.limit_in_bytes"); v != strconv.Itoa(32<<20) {
			t.Fatalf("%s memory limit %s", name, v)
		}
	}
	if _, err := os.Stat(filepath.Join("/sys/fs/cgroup/memory", containerCgroupPath(memCgroup, o.Sandbox.ID))); err != nil {
		t.Fatalf("sandbox not under the pod cgroup: %v", err)
	}

	// Past its limit, hog is OOM-killed.
	if _, err := h.cri.Runtime.ExecSync(h.ctx, &runtimeapi.ExecSyncRequest{
		ContainerId: trimContainerID(container(o, "hog").ContainerID), Cmd: []string{"touch", "/tmp/go"}, Timeout: 30,
	}); err != nil {
		t.Fatal(err)
	}
	o = h.waitObserved(mem, 2*time.Minute, "hog OOM-killed", func(o *schemas.PodObserved) bool {
		c := container(o, "hog")
		return c != nil && c.State.Terminated != nil
	})
	if term := container(o, "hog").State.Terminated; term.Reason != "OOMKilled" {
		t.Fatalf("hog terminated with %q (exit %d), want OOMKilled", term.Reason, term.ExitCode)
	}
	if !running(o, "idle") {
		t.Fatalf("idle stopped: %s", describe(o))
	}

	// The fork bomb stops at 20 processes; the other pod runs on.
	h.run(bomb)
	o = h.waitObserved(bomb, 2*time.Minute, "bomb running", func(o *schemas.PodObserved) bool { return running(o, "bomb") })
	bombCgroup := podCgroupPath(t, h, string(bomb.UID), corev1.PodQOSBestEffort)
	// The bomb goes off inside the running container: its forks stop at
	// the pod's limit (20 processes, pause and sleep included).
	bombID := trimContainerID(container(o, "bomb").ContainerID)
	resp, err := h.cri.Runtime.ExecSync(h.ctx, &runtimeapi.ExecSyncRequest{
		ContainerId: bombID, Timeout: 60,
		Cmd: []string{"sh", "-c", `i=0; while [ $i -lt 200 ]; do sleep 3600 </dev/null >/dev/null 2>&1 & i=$((i+1)); done; echo all forked`},
	})
	if err != nil {
		t.Fatal(err)
	}
	if resp.ExitCode == 0 || strings.Contains(string(resp.Stdout), "all forked") || !strings.Contains(string(resp.Stderr), "can't fork") {
		t.Fatalf("fork bomb not stopped: exit %d, stdout %q, stderr %q", resp.ExitCode, resp.Stdout, resp.Stderr)
	}
	// A refused fork counts in pids.events of the cgroup it was tried
	// from: the container's, below the pod's.
	if ev := cgroupFile(t, "pids", containerCgroupPath(bombCgroup, bombID), "pids.events"); ev == "max 0" {
		t.Fatalf("container pids.events: %s", ev)
	}
	if v, _ := strconv.Atoi(cgroupFile(t, "pids", bombCgroup, "pids.current")); v > 20 {
		t.Fatalf("bomb pod has %d processes, limit 20", v)
	}
	oc := container(h.obs.get(other.UID), "other")
	resp, err = h.cri.Runtime.ExecSync(h.ctx, &runtimeapi.ExecSyncRequest{
		ContainerId: trimContainerID(oc.ContainerID), Cmd: []string{"sh", "-c", "echo still here"}, Timeout: 30,
	})
	if err != nil || strings.TrimSpace(string(resp.Stdout)) != "still here" {
		t.Fatalf("other pod cannot run a process next to the bomb: %v %q", err, resp.GetStdout())
	}
	if oc2 := container(h.obs.get(other.UID), "other"); oc2.ContainerID != oc.ContainerID || oc2.RestartCount != 0 || oc2.State.Running == nil {
		t.Fatalf("other pod disturbed: %+v", oc2)
	}

	for _, p := range []*corev1.Pod{mem, bomb, other, gold} {
		h.remove(p)
	}
	for _, p := range []*corev1.Pod{mem, bomb, other, gold} {
		waitFor(t, 2*time.Minute, p.Name+" removed", func() (bool, string) { return h.obs.wasDeleted(p.UID), "" })
	}
	for _, dir := range []string{memCgroup, bombCgroup, goldCgroup, podCgroupPath(t, h, string(other.UID), corev1.PodQOSBestEffort)} {
		for _, ctrl := range []string{"memory", "pids", "cpu"} {
			if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", ctrl, dir)); !os.IsNotExist(err) {
				t.Fatalf("pod cgroup %s left in %s: %v", dir, ctrl, err)
			}
		}
	}
	if testCgroupDriver == cgroups.DriverSystemd {
		// No pod slice unit is left with systemd either (loaded, active or not).
		out, err := exec.Command("systemctl", "list-units", "--all", "--plain", "--no-legend", "kubepods*pod*").CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "" {
			t.Fatalf("pod slices left: %s %v", out, err)
		}
	}
}

// runtime.cgroupDriver must be containerd's: systemd against a
// containerd with SystemdCgroup = false (or cgroupfs against true, under
// the systemd driver) is refused at start, naming both settings, before
// any pod cgroup is made.
func TestCgroupDriverMismatchRefused(t *testing.T) {
	wrong, theirs := cgroups.DriverSystemd, false
	if testCgroupDriver == cgroups.DriverSystemd {
		wrong, theirs = cgroups.DriverCgroupfs, true
	}
	h := newHarness(t, harnessOptions{noStart: true, configure: func(c *config.Config) {
		c.Runtime.CgroupDriver = wrong
		c.Runtime.CgroupRoot = testCgroupRoot + "-mismatch"
	}})
	clients, err := cri.Connect(h.ctx, h.cfg.Runtime.EndpointURL(), "", h.cfg.Runtime.RuntimeRequestTimeout)
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(Options{Deps: daemon.Deps{Config: h.cfg, Log: bustest.Logger(), Bus: h.bus.Connect(bus.Runtime)}, Runtime: clients.Runtime, Image: clients.Image})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(h.ctx, time.Minute)
	defer cancel()
	err = m.Run(ctx)
	// containerd 1.6 tells its driver only in its config (Status verbose),
	// 2.x through CRI's RuntimeConfig.
	setting := fmt.Sprintf(`containerd's runtime "runc" has SystemdCgroup = %t`, theirs)
	if major, _ := testenv.ContainerdMajor(); major >= 2 {
		setting = "the runtime's cgroup driver (CRI RuntimeConfig) is " + testCgroupDriver
	}
	want := fmt.Sprintf(`runtime.cgroupDriver is %q but %s: they must match`, wrong, setting)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Run with the wrong driver: %v\nwant it to contain %q", err, want)
	}
	for _, d := range []string{cgroups.DriverCgroupfs, cgroups.DriverSystemd} {
		dir := filepath.Join("/sys/fs/cgroup/memory", cgroups.ParseCgroupfs(h.cfg.Runtime.CgroupRoot).Path(d))
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Fatalf("cgroups made despite the refusal: %s: %v", dir, err)
		}
	}
	if wrong != cgroups.DriverSystemd {
		return
	}
	// The systemd names the pods would have had.
	pod := newPod("p", busybox("c", "true"))
	pod.Spec.Containers[0].Resources = resources(rlist("cpu", "10m"), nil)
	want = strings.ReplaceAll(strings.TrimPrefix(h.cfg.Runtime.CgroupRoot, "/"), "-", "_") +
		"-burstable-pod" + strings.ReplaceAll(string(pod.UID), "-", "_") + ".slice"
	if got := m.resources.cgroupParent(pod); got != want {
		t.Fatalf("systemd CgroupParent %q, want %q", got, want)
	}
}

// Issue 19's acceptance, in-place resize: a running pod's CPU limit
// raised and lowered changes the pod and container cgroups (pod limits
// grow before the container's and shrink after), the container is not
// restarted, the observed state carries the new resources and the
// resize conditions while it is under way; a resize beyond the node is
// Deferred with the kubelet's message and changes nothing.
func TestInPlaceResize(t *testing.T) {
	requiresCgroupV1(t)
	h := newHarness(t, harnessOptions{})
	h.setSourcesReady()
	app := busybox("app", "exec sleep 3600")
	app.Resources = resources(rlist("cpu", "100m", "memory", "16Mi"), rlist("cpu", "200m", "memory", "64Mi"))
	pod := newPod("resize", app)
	grace := int64(1)
	pod.Spec.TerminationGracePeriodSeconds = &grace
	pod.Generation = 1
	h.run(pod)
	o := h.waitObserved(pod, 2*time.Minute, "running", func(o *schemas.PodObserved) bool { return running(o, "app") })
	first := container(o, "app")
	id := trimContainerID(first.ContainerID)
	podCgroup := podCgroupPath(t, h, string(pod.UID), corev1.PodQOSBurstable)
	quotas := func() (string, string) {
		return cgroupFile(t, "cpu", podCgroup, "cpu.cfs_quota_us"),
			cgroupFile(t, "cpu", containerCgroupPath(podCgroup, id), "cpu.cfs_quota_us")
	}
	if p, c := quotas(); p != "20000" || c != "20000" {
		t.Fatalf("quota before resize: pod %s container %s", p, c)
	}

	resize := func(gen int64, cpuLimit, cpuRequest string) {
		t.Helper()
		p := pod.DeepCopy()
		p.Generation = gen
		p.Spec.Containers[0].Resources.Limits[corev1.ResourceCPU] = resource.MustParse(cpuLimit)
		p.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse(cpuRequest)
		h.desire(p)
	}
	limitOf := func(o *schemas.PodObserved) string {
		c := container(o, "app")
		if c == nil || c.Resources == nil {
			return ""
		}
		return c.Resources.Limits.Cpu().String()
	}
	for _, step := range []struct {
		gen            int64
		limit, request string
		quota          string
	}{{2, "400m", "100m", "40000"}, {3, "150m", "50m", "15000"}} {
		resize(step.gen, step.limit, step.request)
		o = h.waitObserved(pod, time.Minute, "resized to "+step.limit, func(o *schemas.PodObserved) bool {
			return limitOf(o) == step.limit && len(o.ResizeConditions) == 0
		})
		if p, c := quotas(); p != step.quota || c != step.quota {
			t.Fatalf("quota after resize to %s: pod %s container %s, want %s", step.limit, p, c, step.quota)
		}
		if testCgroupDriver == cgroups.DriverSystemd {
			// The pod slice unit holds the new quota too (set through
			// D-Bus): 400m is 400ms of CPU per second.
			want := "CPUQuotaPerSecUSec=" + strings.TrimSuffix(step.limit, "m") + "ms"
			if got := strings.TrimSpace(systemctlShow(t, path.Base(podCgroup), "CPUQuotaPerSecUSec")); got != want {
				t.Fatalf("pod slice after resize to %s: %s, want %s", step.limit, got, want)
			}
		}
		c := container(o, "app")
		if c.ContainerID != first.ContainerID || c.RestartCount != 0 || c.State.Running == nil {
			t.Fatalf("container restarted by the resize: %+v", c)
		}
		if c.Allocated == nil || c.Allocated.Requests.Cpu().String() != step.request {
			t.Fatalf("allocated after resize: %+v", c.Allocated)
		}
	}
	if n := len(h.events.await(t, pod.UID, "ResizeCompleted", 2)); n != 2 {
		t.Fatalf("ResizeCompleted events: %d (%v)", n, h.events.reasons(pod.UID))
	}
	sawInProgress := false
	for _, o := range h.obs.all(pod.UID) {
		for _, c := range o.ResizeConditions {
			sawInProgress = sawInProgress || c.Type == corev1.PodResizeInProgress
		}
	}
	if !sawInProgress {
		t.Log("PodResizeInProgress was never published between start and completion (both in one sync)")
	}

	// More CPU than the node has: Deferred, nothing changes.
	resize(4, "200", "100")
	o = h.waitObserved(pod, time.Minute, "resize deferred", func(o *schemas.PodObserved) bool {
		return len(o.ResizeConditions) == 1 && o.ResizeConditions[0].Type == corev1.PodResizePending
	})
	cond := o.ResizeConditions[0]
	if cond.Reason != corev1.PodReasonDeferred || !strings.HasPrefix(cond.Message, "Node didn't have enough resource: cpu, requested: 100000, used: ") || cond.ObservedGeneration != 4 {
		t.Fatalf("pending condition: %+v", cond)
	}
	if p, c := quotas(); p != "15000" || c != "15000" {
		t.Fatalf("deferred resize changed the quota: pod %s container %s", p, c)
	}
	if c := container(o, "app"); c.Allocated.Requests.Cpu().String() != "50m" || limitOf(o) != "150m" {
		t.Fatalf("deferred resize changed the allocation: %+v", c)
	}
	h.events.await(t, pod.UID, "ResizeDeferred", 1)
	// Reverted: the pending condition goes.
	resize(5, "150m", "50m")
	h.waitObserved(pod, time.Minute, "pending cleared", func(o *schemas.PodObserved) bool { return len(o.ResizeConditions) == 0 })
}

// enforceNodeAllocatable: the cgroup root is limited to capacity less
// both reservations (pods), and kube-reserved is enforced on the existing
// kubeReservedCgroup.
func TestNodeAllocatableEnforced(t *testing.T) {
	requiresCgroupV1(t)
	// The kube-reserved cgroup exists before the runtime starts, as the
	// operator's (made here through the driver: a slice under systemd).
	// runtime.kubeReservedCgroup is in the driver's form, as the kubelet's
	// kubeReservedCgroup (its cgroupManager.CgroupName).
	kubeCgroup := testCgroupRoot + "-kube"
	kubeName := cgroups.ParseCgroupfs(kubeCgroup)
	if testCgroupDriver == cgroups.DriverSystemd {
		kubeCgroup = "/kube.slice"
		kubeName = cgroups.ParseSystemd(kubeCgroup)
	}
	kubeDir := kubeName.Path(testCgroupDriver)
	mgr, err := cgroups.NewManager(testCgroupDriver)
	if err != nil {
		t.Fatal(err)
	}
	if err := mgr.Create(kubeName, &cgroups.ResourceConfig{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mgr.Destroy(kubeName) })
	h := newHarness(t, harnessOptions{configure: func(c *config.Config) {
		c.Node.KubeReserved = map[string]string{"memory": "1Gi", "cpu": "500m"}
		c.Node.SystemReserved = map[string]string{"memory": "512Mi"}
		c.Runtime.EnforceNodeAllocatable = []string{"pods", "kube-reserved"}
		c.Runtime.KubeReservedCgroup = kubeCgroup
	}})
	root := h.cfg.Runtime.CgroupRoot
	capacity, err := readNodeCapacity(h.cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := capacity.Memory.Value() - (1<<30 + 512<<20)
	waitFor(t, time.Minute, "node allocatable on the cgroup root", func() (bool, string) {
		b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/memory", testCgroupPath(root), "memory.limit_in_bytes"))
		if err != nil {
			return false, err.Error()
		}
		v, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		return v <= want && v > want-4096, fmt.Sprintf("%d, want %d", v, want)
	})
	if v := cgroupFile(t, "pids", testCgroupPath(root), "pids.max"); v != strconv.FormatInt(cgroups.PidMax(), 10) {
		t.Fatalf("root pids.max %s", v)
	}
	waitFor(t, time.Minute, "kube-reserved enforced", func() (bool, string) {
		mem := cgroupFile(t, "memory", kubeDir, "memory.limit_in_bytes")
		shares := cgroupFile(t, "cpu", kubeDir, "cpu.shares")
		return mem == strconv.Itoa(1<<30) && shares == "512", mem + " " + shares
	})
}

// The e2e suite's "6 containers - various operations performed": a resize
// may add a request the container had none of, and rolling it back takes
// the request away again; both are allocated and applied.
func TestInPlaceResizeAddsAndRemovesRequests(t *testing.T) {
	requiresCgroupV1(t)
	h := newHarness(t, harnessOptions{})
	h.setSourcesReady()
	app := busybox("app", "exec sleep 3600")
	app.Resources = resources(rlist("cpu", "20m"), nil)
	pod := newPod("resize-add", app)
	grace := int64(1)
	pod.Spec.TerminationGracePeriodSeconds = &grace
	pod.Generation = 1
	h.run(pod)
	h.waitObserved(pod, 2*time.Minute, "running", func(o *schemas.PodObserved) bool { return running(o, "app") })
	resize := func(gen int64, req corev1.ResourceList) {
		t.Helper()
		p := pod.DeepCopy()
		p.Generation = gen
		p.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: req}
		h.desire(p)
		h.waitObserved(pod, time.Minute, fmt.Sprintf("generation %d allocated %v", gen, req), func(o *schemas.PodObserved) bool {
			c := container(o, "app")
			return c != nil && c.Allocated != nil && equality.Semantic.DeepEqual(c.Allocated.Requests, req) &&
				c.Resources != nil && equality.Semantic.DeepEqual(c.Resources.Requests, req) && len(o.ResizeConditions) == 0
		})
	}
	resize(2, rlist("cpu", "15m", "memory", "35Mi"))
	resize(3, rlist("cpu", "20m"))
}

// The e2e suite's "burstable pods - extended: 6 containers - various
// operations performed (including adding limits and requests)", resize as
// the spec makes it: requests raised, lowered and added, limits added.
func TestInPlaceResizeVariousOperations(t *testing.T) {
	requiresCgroupV1(t)
	h := newHarness(t, harnessOptions{})
	h.setSourcesReady()
	before := []corev1.ResourceList{rlist("cpu", "20m"), rlist("memory", "35Mi"), rlist("cpu", "20m", "memory", "35Mi"),
		rlist("cpu", "20m"), rlist("memory", "35Mi")}
	after := []corev1.ResourceRequirements{
		resources(rlist("cpu", "25m"), rlist("cpu", "35m")),
		resources(rlist("memory", "30Mi"), rlist("memory", "50Mi")),
		resources(rlist("cpu", "20m", "memory", "30Mi"), nil),
		resources(rlist("cpu", "15m", "memory", "35Mi"), nil),
		resources(rlist("cpu", "20m", "memory", "40Mi"), nil),
	}
	var cs []corev1.Container
	for i, r := range before {
		c := busybox(fmt.Sprintf("c%d", i+1), "exec sleep 3600")
		c.Resources = corev1.ResourceRequirements{Requests: r}
		cs = append(cs, c)
	}
	pod := newPod("resize-ops", cs...)
	grace := int64(1)
	pod.Spec.TerminationGracePeriodSeconds = &grace
	pod.Generation = 1
	h.run(pod)
	h.waitObserved(pod, 2*time.Minute, "running", func(o *schemas.PodObserved) bool {
		for _, c := range cs {
			if !running(o, c.Name) {
				return false
			}
		}
		return true
	})
	p := pod.DeepCopy()
	p.Generation = 2
	for i := range after {
		p.Spec.Containers[i].Resources = after[i]
	}
	h.desire(p)
	o := h.waitObserved(pod, time.Minute, "resized", func(o *schemas.PodObserved) bool {
		for i, want := range after {
			c := container(o, fmt.Sprintf("c%d", i+1))
			if c == nil || c.Allocated == nil || !equality.Semantic.DeepEqual(*c.Allocated, want) ||
				c.Resources == nil || !equality.Semantic.DeepEqual(*c.Resources, want) {
				return false
			}
		}
		return len(o.ResizeConditions) == 0
	})
	for _, c := range o.Containers {
		if c.RestartCount != 0 {
			t.Errorf("%s restarted by the resize", c.Name)
		}
	}
}
