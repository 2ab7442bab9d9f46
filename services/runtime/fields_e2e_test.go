package runtime

import (
	"context"
	"fmt"
	"path"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/schemas"
)

// Issue 32's silent cases, on the real containerd: each field reaches the
// runtime, or the container is refused naming what the runtime lacks.

// terminatedMessage runs pod (restartPolicy Never) and returns the
// termination messages of its containers once they all exited.
func terminatedMessages(t *testing.T, h *harness, pod *corev1.Pod) map[string]string {
	t.Helper()
	pod.Spec.RestartPolicy = corev1.RestartPolicyNever
	h.run(pod)
	o := h.waitObserved(pod, 2*time.Minute, "containers exited", func(o *schemas.PodObserved) bool {
		for _, c := range pod.Spec.Containers {
			if cc := container(o, c.Name); cc == nil || cc.State.Terminated == nil {
				return false
			}
		}
		return true
	})
	out := map[string]string{}
	for _, c := range pod.Spec.Containers {
		out[c.Name] = container(o, c.Name).State.Terminated.Message
	}
	return out
}

// spec.hostnameOverride: the container's hostname and /etc/hosts, as the
// NodeConformance specs "Override hostname of Pod" read them.
func TestHostnameOverrideOnContainerd(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	const script = "hostname > /dev/termination-log; grep -v '^#' /etc/hosts >> /dev/termination-log"
	dotted := newPod("override-dotted", busybox("app", script))
	dotted.Spec.HostnameOverride = ptr.To("override.example.host")
	both := newPod("override-both", busybox("app", script))
	both.Spec.Hostname, both.Spec.Subdomain, both.Spec.HostnameOverride = "custom-host", "t", ptr.To("override-host")
	var wg sync.WaitGroup
	msgs := make([]string, 2)
	for i, pod := range []*corev1.Pod{dotted, both} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			msgs[i] = terminatedMessages(t, h, pod)["app"]
		}()
	}
	wg.Wait()
	for i, want := range []string{"override.example.host", "override-host"} {
		lines := strings.Split(strings.TrimSpace(msgs[i]), "\n")
		if lines[0] != want {
			t.Errorf("hostname %q, want %q (output %q)", lines[0], want, msgs[i])
		}
		found := false
		for _, l := range lines[1:] {
			f := strings.Fields(l)
			if len(f) == 2 && f[1] == want && !strings.HasPrefix(f[0], "127.") && f[0] != "::1" {
				found = true
			}
		}
		if !found || strings.Contains(msgs[i], "svc") || strings.Contains(msgs[i], "custom-host") {
			t.Errorf("/etc/hosts does not name the pod's IP %s alone:\n%s", want, msgs[i])
		}
	}
}

// env valueFrom.fileKeyRef: an init container writes the file into an
// emptyDir, the app container's variable comes from it.
func TestFileKeyRefOnContainerd(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	app := withMount(busybox("app", `echo "$COLOR/$SIZE/${MISSING-unset}" > /dev/termination-log`), "config", "/config")
	ref := func(key string, optional bool) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{FileKeyRef: &corev1.FileKeySelector{VolumeName: "config", Path: "env/app.env", Key: key, Optional: ptr.To(optional)}}
	}
	app.Env = []corev1.EnvVar{{Name: "COLOR", ValueFrom: ref("COLOR", false)}, {Name: "SIZE", ValueFrom: ref("SIZE", false)}, {Name: "MISSING", ValueFrom: ref("NOPE", true)}}
	pod := newPod("filekeyref", app)
	pod.Spec.InitContainers = []corev1.Container{withMount(busybox("write", `mkdir -p /config/env; printf "# made by init\nCOLOR='blue'\nSIZE='large'\n" > /config/env/app.env`), "config", "/config")}
	pod.Spec.Volumes = []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	if got := strings.TrimSpace(terminatedMessages(t, h, pod)["app"]); got != "blue/large/unset" {
		t.Fatalf("environment from the file: %q", got)
	}

	// A required key the file does not have: the container waits, as the
	// kubelet's CreateContainerConfigError.
	bad := newPod("filekeyref-missing", withMount(busybox("app", "exec sleep 3600"), "config", "/config"))
	bad.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "X", ValueFrom: ref("NOPE", false)}}
	bad.Spec.InitContainers = pod.Spec.InitContainers
	bad.Spec.Volumes = pod.Spec.Volumes
	h.run(bad)
	h.waitObserved(bad, 2*time.Minute, "config error", func(o *schemas.PodObserved) bool {
		w := container(o, "app").State.Waiting
		return w != nil && w.Reason == "CreateContainerConfigError" && strings.Contains(w.Message, `environment variable key "NOPE" not found in file`)
	})
}

// criHandlers are the runtime handlers the test's containerd lists.
func criHandlers(t *testing.T, h *harness) []*runtimeapi.RuntimeHandler {
	t.Helper()
	resp, err := h.cri.Runtime.Status(h.ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return resp.RuntimeHandlers
}

// volumeMounts[].recursiveReadOnly: Enabled where the runtime cannot do it
// is refused as the kubelet refuses it; IfPossible runs read-only.
func TestRecursiveReadOnlyOnContainerd(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	supported := false
	for _, hd := range criHandlers(t, h) {
		if hd.Name == "" || hd.Name == "runc" {
			supported = supported || hd.GetFeatures().GetRecursiveReadOnlyMounts()
		}
	}
	mount := func(c corev1.Container, mode corev1.RecursiveReadOnlyMode) corev1.Container {
		c.VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data", ReadOnly: true, RecursiveReadOnly: &mode}}
		return c
	}
	pod := newPod("rro",
		mount(busybox("enabled", "exec sleep 3600"), corev1.RecursiveReadOnlyEnabled),
		mount(busybox("ifpossible", "touch /data/x 2>/dev/null && echo writable || echo read-only; exec sleep 3600"), corev1.RecursiveReadOnlyIfPossible))
	pod.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	h.run(pod)
	if supported {
		o := h.waitObserved(pod, 2*time.Minute, "both running", func(o *schemas.PodObserved) bool { return running(o, "enabled", "ifpossible") })
		if !o.RecursiveReadOnlyMounts {
			t.Fatal("the runtime supports recursive read-only mounts, the observed state says not")
		}
		return
	}
	t.Logf("containerd lists no runtime handler with recursive read-only mounts (%d handlers)", len(criHandlers(t, h)))
	o := h.waitObserved(pod, 2*time.Minute, "enabled refused, ifpossible running", func(o *schemas.PodObserved) bool {
		w := container(o, "enabled").State.Waiting
		return running(o, "ifpossible") && w != nil && w.Reason == "CreateContainerConfigError"
	})
	w := container(o, "enabled").State.Waiting
	const want = `failed to resolve recursive read-only mode: volume "data" requested recursive read-only mode, but it is not supported by the runtime`
	if w.Message != want {
		t.Fatalf("message %q, want %q", w.Message, want)
	}
	if o.RecursiveReadOnlyMounts {
		t.Fatal("observed state claims recursive read-only support")
	}
	for _, c := range h.containers(pod.UID) {
		if c.Metadata.Name == "enabled" {
			t.Fatalf("a container was created for the refused mount: %s", c.Id)
		}
	}
}

// lifecycle.stopSignal reaches CRI; a runtime that does not report taking
// it (containerd before 2.1) gets no container with it.
func TestStopSignalOnContainerd(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	sig := corev1.SIGUSR1
	stop := busybox("stop", "trap 'echo usr1 > /dev/termination-log; exit 0' USR1; while true; do sleep 0.1; done")
	stop.Lifecycle = &corev1.Lifecycle{StopSignal: &sig}
	pod := newPod("stopsignal", stop, busybox("plain", "exec sleep 3600"))
	h.run(pod)
	var o *schemas.PodObserved
	waitFor(t, 2*time.Minute, "the stop-signal container running or refused", func() (bool, string) {
		o = h.obs.get(pod.UID)
		if o == nil {
			return false, "no observed state"
		}
		c := container(o, "stop")
		return running(o, "plain") && c != nil && (c.State.Running != nil || c.State.Waiting != nil && c.State.Waiting.Reason == "CreateContainerError"), describe(o)
	})
	if c := container(o, "stop"); c.State.Running != nil {
		// A runtime that honours it reports it on the container.
		resp, err := h.cri.Runtime.ContainerStatus(h.ctx, &runtimeapi.ContainerStatusRequest{ContainerId: trimContainerID(c.ContainerID)})
		if err != nil || resp.Status.StopSignal != runtimeapi.Signal_SIGNAL_SIGUSR1 {
			t.Fatalf("running container's stop signal %v (%v)", resp.GetStatus().GetStopSignal(), err)
		}
		return
	}
	w := container(o, "stop").State.Waiting
	if !strings.Contains(w.Message, "lifecycle.stopSignal is not supported by the container runtime (containerd ") {
		t.Fatalf("refusal %q", w.Message)
	}
	for _, c := range h.containers(pod.UID) {
		if c.Metadata.Name == "stop" {
			t.Fatalf("a container without its stop signal was left: %s %s", c.Id, c.State)
		}
	}
	h.events.await(t, pod.UID, "Failed", 1)
}

// resizePolicy RestartContainer: a memory resize restarts the container
// with its new limit (restartPolicy Never notwithstanding, as the
// kubelet), a CPU resize (NotRequired) is applied in place.
func TestResizeRestartContainerOnContainerd(t *testing.T) {
	requiresCgroupV1(t)
	h := newHarness(t, harnessOptions{})
	h.setSourcesReady()
	app := busybox("app", "exec sleep 3600")
	app.Resources = resources(rlist("cpu", "100m", "memory", "32Mi"), rlist("cpu", "200m", "memory", "64Mi"))
	app.ResizePolicy = []corev1.ContainerResizePolicy{{ResourceName: corev1.ResourceCPU, RestartPolicy: corev1.NotRequired},
		{ResourceName: corev1.ResourceMemory, RestartPolicy: corev1.RestartContainer}}
	pod := newPod("resize-restart", app)
	pod.Spec.RestartPolicy = corev1.RestartPolicyNever
	pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](1)
	pod.Generation = 1
	h.run(pod)
	o := h.waitObserved(pod, 2*time.Minute, "running", func(o *schemas.PodObserved) bool { return running(o, "app") })
	first := container(o, "app").ContainerID
	memLimit := func(id string) string {
		return cgroupFile(t, "memory", containerCgroupPath(podCgroupPath(t, h, string(pod.UID), corev1.PodQOSBurstable), trimContainerID(id)), "memory.limit_in_bytes")
	}
	if got := memLimit(first); got != fmt.Sprint(64<<20) {
		t.Fatalf("memory limit before %s", got)
	}

	resized := pod.DeepCopy()
	resized.Generation = 2
	resized.Spec.Containers[0].Resources.Limits[corev1.ResourceMemory] = resource.MustParse("128Mi")
	h.desire(resized)
	o = h.waitObserved(pod, 2*time.Minute, "restarted with 128Mi", func(o *schemas.PodObserved) bool {
		c := container(o, "app")
		return c.State.Running != nil && c.ContainerID != first && c.Resources != nil && c.Resources.Limits.Memory().Value() == 128<<20 && len(o.ResizeConditions) == 0
	})
	c := container(o, "app")
	if c.RestartCount != 1 {
		t.Fatalf("restart count %d, want 1", c.RestartCount)
	}
	if got := memLimit(c.ContainerID); got != fmt.Sprint(128<<20) {
		t.Fatalf("memory limit of the new container %s", got)
	}
	killed := false
	for _, ev := range h.events.await(t, pod.UID, "Killing", 1) {
		killed = killed || strings.Contains(ev.Message, "Container app resize requires restart")
	}
	if !killed {
		t.Fatal("no Killing event for the resize restart")
	}

	// CPU: NotRequired, in place.
	second := c.ContainerID
	cpu := resized.DeepCopy()
	cpu.Generation = 3
	cpu.Spec.Containers[0].Resources.Limits[corev1.ResourceCPU] = resource.MustParse("300m")
	h.desire(cpu)
	o = h.waitObserved(pod, time.Minute, "cpu resized", func(o *schemas.PodObserved) bool {
		c := container(o, "app")
		return c.Resources != nil && c.Resources.Limits.Cpu().MilliValue() == 300 && len(o.ResizeConditions) == 0
	})
	if c := container(o, "app"); c.ContainerID != second || c.RestartCount != 1 {
		t.Fatalf("a NotRequired resize restarted the container: %+v", c)
	}
}

// createRecorder is the real runtime, remembering the container configs
// nodelet-runtime creates.
type createRecorder struct {
	internalapi.RuntimeService
	mu      sync.Mutex
	configs []*runtimeapi.ContainerConfig
}

func (r *createRecorder) CreateContainer(ctx context.Context, sb string, cfg *runtimeapi.ContainerConfig, sbCfg *runtimeapi.PodSandboxConfig) (string, error) {
	r.mu.Lock()
	r.configs = append(r.configs, cfg)
	r.mu.Unlock()
	return r.RuntimeService.CreateContainer(ctx, sb, cfg, sbCfg)
}

func (r *createRecorder) config(name string) *runtimeapi.ContainerConfig {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.configs {
		if c.Metadata.Name == name {
			return c
		}
	}
	return nil
}

// Pod-level resources on the real runtime: a pod whose only resources are
// its own is Guaranteed (its cgroup directly under the root, not
// besteffort/), and its container gets the pod's memory limit; a
// container's huge page limits reach CRI (containerd 1.x drops them while
// disable_hugetlb_controller is true, its default, as for the kubelet).
func TestPodLevelResourcesOnContainerd(t *testing.T) {
	requiresCgroupV1(t)
	rec := &createRecorder{}
	h := newHarness(t, harnessOptions{noStart: true})
	h.start(func(o *Options) { rec.RuntimeService = o.Runtime; o.Runtime = rec })
	pod := newPod("podlevel", busybox("app", "exec sleep 3600"))
	pod.Spec.Resources = &corev1.ResourceRequirements{Requests: rlist("cpu", "200m", "memory", "64Mi"), Limits: rlist("cpu", "200m", "memory", "64Mi")}
	huge := newPod("hugepages", busybox("app", "exec sleep 3600"))
	huge.Spec.Containers[0].Resources = resources(rlist("memory", "64Mi", "hugepages-2Mi", "4Mi"), rlist("memory", "64Mi", "hugepages-2Mi", "4Mi"))
	h.run(pod)
	h.run(huge)
	for _, p := range []*corev1.Pod{pod, huge} {
		h.waitObserved(p, 2*time.Minute, "running", func(o *schemas.PodObserved) bool { return running(o, "app") })
	}
	o := h.obs.get(pod.UID)
	dir := podCgroupPath(t, h, string(pod.UID), corev1.PodQOSGuaranteed)
	if path.Dir(dir) != testCgroupPath(h.cfg.Runtime.CgroupRoot) {
		t.Fatalf("Guaranteed pod cgroup %s not directly under the root", dir)
	}
	if got := cgroupFile(t, "memory", dir, "memory.limit_in_bytes"); got != fmt.Sprint(64<<20) {
		t.Fatalf("Guaranteed pod cgroup %s: memory limit %s", dir, got)
	}
	if got := cgroupFile(t, "memory", containerCgroupPath(dir, trimContainerID(container(o, "app").ContainerID)), "memory.limit_in_bytes"); got != fmt.Sprint(64<<20) {
		t.Fatalf("container memory limit %s, want the pod's", got)
	}
	if got := cgroupFile(t, "cpu", dir, "cpu.cfs_quota_us"); got != "20000" {
		t.Fatalf("pod CPU quota %s", got)
	}
	if rec.config("app") == nil {
		t.Fatal("no CreateContainer recorded")
	}
	var got []string
	rec.mu.Lock()
	for _, c := range rec.configs {
		for _, l := range c.GetLinux().GetResources().GetHugepageLimits() {
			got = append(got, fmt.Sprintf("%s=%d", l.PageSize, l.Limit))
		}
	}
	rec.mu.Unlock()
	want := fmt.Sprintf("2MB=%d", 4<<20)
	found := false
	for _, g := range got {
		found = found || g == want
	}
	if !found {
		t.Fatalf("huge page limits sent to CRI %v, want %s among them", got, want)
	}
}
