package runtime

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/images"
	"github.com/nodelet/nodelet/schemas"
)

// An admitted pod runs on real containerd: sandbox from the pause image,
// busybox httpd answering from the pod IP, observed state on the bus with
// the kubelet's CRI labels; removing it from the sources kills it, the
// final Terminated state is published, and then the sandbox and the
// observed key go.
func TestPodRunsAndIsRemoved(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	web := busybox("web", "exec httpd -f -p 8080 -h /www")
	pod := newPod("web", web)
	grace := int64(2) // httpd as PID 1 ignores SIGTERM
	pod.Spec.TerminationGracePeriodSeconds = &grace
	began := time.Now()
	h.run(pod)
	o := h.waitObserved(pod, 2*time.Minute, "running", func(o *schemas.PodObserved) bool {
		return running(o, "web") && o.Sandbox != nil && len(o.Sandbox.IPs) > 0
	})
	t.Logf("pod start (desired+admitted to observed Running with IP): %v", time.Since(began))
	body := httpGet(t, "http://"+hostPort(o.Sandbox.IPs[0], 8080)+"/", 30*time.Second)
	if body != images.IndexHTML {
		t.Fatalf("GET from the pod: %q", body)
	}
	c := container(o, "web")
	if !strings.HasPrefix(c.ContainerID, "containerd://") || c.ImageID == "" || c.Hash == "" || c.RestartCount != 0 {
		t.Fatalf("container observed: %+v", c)
	}
	// The first state showing web running already says what it was given:
	// the start is published once, not again at the next pass only to add
	// the resources.
	for _, x := range h.obs.all(pod.UID) {
		if running(x, "web") {
			if container(x, "web").Resources == nil {
				t.Fatalf("first running state (gen %d) lacks web's resources", x.Generation)
			}
			break
		}
	}
	sbs := h.sandboxes(pod.UID)
	if len(sbs) != 1 || sbs[0].Labels[labelPodName] != "web" || sbs[0].Labels[labelPodNamespace] != "default" ||
		sbs[0].Labels[LabelManaged] != "true" || sbs[0].Labels["app"] != "web" {
		t.Fatalf("sandboxes: %v", sbs)
	}
	cs := h.containers(pod.UID)
	if len(cs) != 1 || cs[0].Labels[labelContainerName] != "web" || cs[0].Annotations[annotationContainerHash] != hashContainer(&web) ||
		cs[0].Annotations[annotationRestartCount] != "0" || cs[0].Annotations[annotationTerminationMessagePath] != "/dev/termination-log" {
		t.Fatalf("containers: %v", cs)
	}

	// The pod's cgroup (cgroup v1 here), which CRI never removes.
	cgroup := filepath.Join("/sys/fs/cgroup/memory", podCgroupPath(t, h, string(pod.UID), corev1.PodQOSBestEffort))
	if _, err := os.Stat(cgroup); err != nil {
		t.Fatalf("pod cgroup: %v", err)
	}

	h.remove(pod)
	waitFor(t, 2*time.Minute, "observed key deleted", func() (bool, string) {
		return h.obs.wasDeleted(pod.UID), ""
	})
	hist := h.obs.all(pod.UID)
	last := hist[len(hist)-1]
	if !last.Terminated || last.Terminating {
		t.Fatalf("last observed state before deletion is not final: %s", describe(last))
	}
	if c := container(last, "web"); c.State.Terminated == nil {
		t.Fatalf("final state of web: %+v", c.State)
	}
	for i := 1; i < len(hist); i++ {
		if hist[i].Generation != hist[i-1].Generation+1 {
			t.Fatalf("generations not consecutive: %d then %d", hist[i-1].Generation, hist[i].Generation)
		}
	}
	if n := len(h.sandboxes(pod.UID)); n != 0 {
		t.Fatalf("%d sandboxes left", n)
	}
	if _, err := os.Stat(cgroup); !os.IsNotExist(err) {
		t.Fatalf("pod cgroup %s left behind: %v", cgroup, err)
	}
}

func hostPathVolume(name, dir string) corev1.Volume {
	t := corev1.HostPathDirectoryOrCreate
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir, Type: &t}}}
}

func withMount(c corev1.Container, volume, path string) corev1.Container {
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: volume, MountPath: path})
	return c
}

// Two init containers run one after the other, in order, before the two
// app containers; the pod gets an IP from CNI and answers HTTP from the
// host.
func TestInitContainersRunInOrder(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	dir := t.TempDir()
	pod := newPod("ordered",
		withMount(busybox("app-1", "echo app-1 >> /data/order; exec httpd -f -p 8080 -h /www"), "data", "/data"),
		withMount(busybox("app-2", "echo app-2 >> /data/order; exec sleep 3600"), "data", "/data"))
	pod.Spec.InitContainers = []corev1.Container{
		// The first one takes its time: the second must still wait for it.
		withMount(busybox("init-1", "sleep 1; echo init-1 >> /data/order"), "data", "/data"),
		withMount(busybox("init-2", "echo init-2 >> /data/order"), "data", "/data"),
	}
	pod.Spec.Volumes = []corev1.Volume{hostPathVolume("data", dir)}
	grace := int64(2)
	pod.Spec.TerminationGracePeriodSeconds = &grace
	h.run(pod)
	o := h.waitObserved(pod, 2*time.Minute, "app containers running", func(o *schemas.PodObserved) bool {
		return running(o, "app-1", "app-2")
	})
	for _, n := range []string{"init-1", "init-2"} {
		c := container(o, n)
		if c.Kind != schemas.ContainerKindInit || c.State.Terminated == nil || c.State.Terminated.ExitCode != 0 || c.State.Terminated.Reason != "Completed" {
			t.Fatalf("%s: %+v", n, c)
		}
	}
	i1, i2 := container(o, "init-1").State.Terminated, container(o, "init-2").State.Terminated
	if i2.StartedAt.Before(&i1.FinishedAt) {
		t.Fatalf("init-2 started at %v before init-1 finished at %v", i2.StartedAt, i1.FinishedAt)
	}
	b, err := os.ReadFile(filepath.Join(dir, "order"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Fields(string(b))
	if len(lines) != 4 || lines[0] != "init-1" || lines[1] != "init-2" {
		t.Fatalf("order file: %q", b)
	}
	ip, err := netip.ParseAddr(o.Sandbox.IPs[0])
	if err != nil || !netip.MustParsePrefix(h.ctrd.Subnet).Contains(ip) {
		t.Fatalf("pod IP %v not from the CNI subnet %s (%v)", o.Sandbox.IPs, h.ctrd.Subnet, err)
	}
	if body := httpGet(t, "http://"+hostPort(ip.String(), 8080)+"/", 30*time.Second); body != images.IndexHTML {
		t.Fatalf("GET: %q", body)
	}
}

// An init container that fails under restartPolicy Never fails the pod:
// the app containers are never created, and the observed state says why.
func TestInitContainerFailureUnderNever(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	pod := newPod("initfail", busybox("app", "exec sleep 3600"))
	pod.Spec.RestartPolicy = corev1.RestartPolicyNever
	pod.Spec.InitContainers = []corev1.Container{busybox("init", "echo broken >/dev/termination-log; exit 1")}
	h.run(pod)
	o := h.waitObserved(pod, 2*time.Minute, "terminated", func(o *schemas.PodObserved) bool { return o.Terminated })
	if o.Reason != "InitContainerFailed" || !strings.Contains(o.Message, `"init"`) {
		t.Fatalf("pod reason: %s", describe(o))
	}
	ic := container(o, "init")
	if ic.State.Terminated == nil || ic.State.Terminated.ExitCode != 1 || ic.State.Terminated.Reason != "Error" ||
		!strings.Contains(ic.State.Terminated.Message, "broken") {
		t.Fatalf("init: %+v", ic.State)
	}
	if app := container(o, "app"); app.State.Waiting == nil || app.State.Waiting.Reason != reasonPodInitializing || app.ContainerID != "" {
		t.Fatalf("app: %+v", app)
	}
	// A wrong implementation has created it anyway by the time a pod put
	// after it runs.
	h.barrier()
	for _, c := range h.containers(pod.UID) {
		if c.Labels[labelContainerName] == "app" {
			t.Fatalf("app container was created: %v", c)
		}
	}
	for _, sb := range h.sandboxes(pod.UID) {
		if sb.State == runtimeapi.PodSandboxState_SANDBOX_READY {
			t.Fatal("sandbox of the failed pod still ready")
		}
	}
}

// Deleting a pod whose process ignores SIGTERM, with a grace period of 3 s:
// the PreStop hook runs first, the container is killed once the grace
// period is over, Terminated is published, and once the sources drop the
// pod its sandbox is removed.
func TestGracefulDeletionWithPreStop(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	dir := t.TempDir()
	app := withMount(busybox("stubborn", `trap "" TERM; while true; do sleep 0.2; done`), "data", "/data")
	app.Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{
		Exec: &corev1.ExecAction{Command: []string{"sh", "-c", "echo stopping > /data/prestop"}},
	}}
	pod := newPod("stubborn", app)
	pod.Spec.Volumes = []corev1.Volume{hostPathVolume("data", dir)}
	grace := int64(3)
	pod.Spec.TerminationGracePeriodSeconds = &grace
	h.run(pod)
	h.waitObserved(pod, 2*time.Minute, "running", func(o *schemas.PodObserved) bool { return running(o, "stubborn") })

	// The API's graceful deletion: deletionTimestamp and the grace period.
	deleting := pod.DeepCopy()
	now := metav1.Now()
	deleting.DeletionTimestamp = &now
	deleting.DeletionGracePeriodSeconds = &grace
	deletedAt := time.Now()
	h.desire(deleting)
	o := h.waitObserved(pod, time.Minute, "terminated", func(o *schemas.PodObserved) bool { return o.Terminated })
	term := container(o, "stubborn").State.Terminated
	if term == nil || term.ExitCode != 137 {
		t.Fatalf("container state %+v: want killed by SIGKILL (137)", container(o, "stubborn").State)
	}
	// The observed times travel with second precision: ask CRI.
	st, err := h.cri.Runtime.ContainerStatus(h.ctx, &runtimeapi.ContainerStatusRequest{ContainerId: trimContainerID(term.ContainerID)})
	if err != nil {
		t.Fatal(err)
	}
	finished := time.Unix(0, st.Status.FinishedAt)
	took := finished.Sub(deletedAt)
	t.Logf("killed %v after the deletion (grace 3s)", took)
	if took < 2500*time.Millisecond || took > 20*time.Second {
		t.Fatalf("killed %v after the deletion, want about 3s", took)
	}
	mark, err := os.Stat(filepath.Join(dir, "prestop"))
	if err != nil {
		t.Fatalf("PreStop left no mark: %v", err)
	}
	if ran := mark.ModTime(); ran.After(finished) || ran.Before(deletedAt) {
		t.Fatalf("PreStop ran at %v, not between the deletion at %v and the kill at %v", ran, deletedAt, finished)
	}
	h.events.await(t, pod.UID, "Killing", 1)
	// Deleted through the API: the stopped sandbox stays until the sources
	// drop the pod.
	if sbs := h.sandboxes(pod.UID); len(sbs) != 1 || sbs[0].State == runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Fatalf("sandboxes while the pod is still desired: %v", sbs)
	}
	h.remove(pod)
	waitFor(t, time.Minute, "sandbox removed", func() (bool, string) {
		n := len(h.sandboxes(pod.UID))
		return n == 0 && h.obs.wasDeleted(pod.UID), fmt.Sprintf("%d sandboxes", n)
	})
}

// A sidecar starts before the app container, keeps running beside it, and
// a restartPolicy Never pod whose app container exits 0 completes: the
// sidecar is stopped after it and the pod is Terminated.
func TestSidecarAndCompletion(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	always := corev1.ContainerRestartPolicyAlways
	side := busybox("sidecar", "exec sleep 3600")
	side.RestartPolicy = &always
	pod := newPod("withsidecar", busybox("app", "sleep 3; exit 0"))
	pod.Spec.RestartPolicy = corev1.RestartPolicyNever
	pod.Spec.InitContainers = []corev1.Container{side, busybox("init", "true")}
	grace := int64(2)
	pod.Spec.TerminationGracePeriodSeconds = &grace
	h.run(pod)
	o := h.waitObserved(pod, 2*time.Minute, "app and sidecar running", func(o *schemas.PodObserved) bool {
		return running(o, "app", "sidecar")
	})
	if k := container(o, "sidecar").Kind; k != schemas.ContainerKindSidecar {
		t.Fatalf("sidecar kind %q", k)
	}
	if init := container(o, "init").State.Terminated; init == nil || init.StartedAt.Before(&container(o, "sidecar").State.Running.StartedAt) {
		t.Fatalf("init ran before the sidecar started: %s", describe(o))
	}
	o = h.waitObserved(pod, time.Minute, "terminated", func(o *schemas.PodObserved) bool { return o.Terminated })
	app, sc := container(o, "app").State.Terminated, container(o, "sidecar").State.Terminated
	if app == nil || app.ExitCode != 0 || sc == nil {
		t.Fatalf("final states: %s", describe(o))
	}
	if sc.FinishedAt.Before(&app.FinishedAt) {
		t.Fatalf("sidecar stopped at %v before the app exited at %v", sc.FinishedAt, app.FinishedAt)
	}
	if o.Reason != "" {
		t.Fatalf("completed pod has reason %q", o.Reason)
	}
	if phase := observedPhase(pod, o); phase != corev1.PodSucceeded {
		t.Fatalf("phase %s, want Succeeded", phase)
	}
}

// observedPhase is the kubelet's getPhase over the observed state, as
// nodelet-status computes it: sidecars do not count.
func observedPhase(pod *corev1.Pod, o *schemas.PodObserved) corev1.PodPhase {
	succeeded, failed, running := 0, 0, 0
	for _, c := range o.Containers {
		switch {
		case c.State.Running != nil:
			running++
		case c.State.Terminated != nil && c.State.Terminated.ExitCode == 0:
			succeeded++
		case c.State.Terminated != nil:
			failed++
		}
	}
	switch {
	case running > 0:
		return corev1.PodRunning
	case failed > 0 && pod.Spec.RestartPolicy == corev1.RestartPolicyNever:
		return corev1.PodFailed
	case succeeded == len(o.Containers):
		return corev1.PodSucceeded
	}
	return corev1.PodPending
}
