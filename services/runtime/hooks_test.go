package runtime

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodelet/nodelet/schemas"
)

// A PostStart exec hook runs right after the start (its mark is there
// when the container is seen running); an HTTP PostStart hook reaches the
// pod; a failing PostStart hook kills the container with
// FailedPostStartHook.
func TestPostStartHooks(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	dir := t.TempDir()

	// The HTTP hook's server runs in a pod of its own, already answering:
	// a hook aimed at its own container's server races that server's
	// start (as on a kubelet), which a loaded machine loses.
	srv := busybox("server", "exec httpd -f -p 8080 -h /www")
	server := newPod("hookserver", srv)
	h.run(server)
	so := h.waitObserved(server, 2*time.Minute, "server running", func(o *schemas.PodObserved) bool {
		return running(o, "server") && o.Sandbox != nil && len(o.Sandbox.IPs) > 0
	})
	httpGet(t, "http://"+hostPort(so.Sandbox.IPs[0], 8080)+"/", 30*time.Second)

	ok := withMount(busybox("app", "while [ ! -f /data/poststart ]; do sleep 0.1; done; exec sleep 3600"), "data", "/data")
	ok.Lifecycle = &corev1.Lifecycle{PostStart: &corev1.LifecycleHandler{
		Exec: &corev1.ExecAction{Command: []string{"sh", "-c", "echo started > /data/poststart"}},
	}}
	web := busybox("web", "exec sleep 3600")
	web.Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}
	web.Lifecycle = &corev1.Lifecycle{PostStart: &corev1.LifecycleHandler{
		HTTPGet: &corev1.HTTPGetAction{Host: so.Sandbox.IPs[0], Path: "/index.html", Port: intstr.FromString("http")},
	}}
	pod := newPod("hooks", ok, web)
	pod.Spec.Volumes = []corev1.Volume{hostPathVolume("data", dir)}
	grace := int64(1)
	pod.Spec.TerminationGracePeriodSeconds = &grace
	h.run(pod)
	h.waitObserved(pod, 2*time.Minute, "running", func(o *schemas.PodObserved) bool { return running(o, "app", "web") })
	if b, err := os.ReadFile(filepath.Join(dir, "poststart")); err != nil || strings.TrimSpace(string(b)) != "started" {
		t.Fatalf("PostStart mark: %q %v", b, err)
	}
	if n := len(h.events.find(pod.UID, "FailedPostStartHook")); n != 0 {
		t.Fatalf("%d FailedPostStartHook events for working hooks", n)
	}

	bad := busybox("app", "exec sleep 3600")
	bad.Lifecycle = &corev1.Lifecycle{PostStart: &corev1.LifecycleHandler{
		Exec: &corev1.ExecAction{Command: []string{"sh", "-c", "echo no >&2; exit 3"}},
	}}
	failing := newPod("badhook", bad)
	failing.Spec.TerminationGracePeriodSeconds = &grace
	h.run(failing)
	waitFor(t, 2*time.Minute, "FailedPostStartHook event", func() (bool, string) {
		return len(h.events.find(failing.UID, "FailedPostStartHook")) > 0, strings.Join(h.events.reasons(failing.UID), ",")
	})
	ev := h.events.find(failing.UID, "FailedPostStartHook")[0]
	if !strings.Contains(ev.Message, "Exec lifecycle hook") || ev.Type != corev1.EventTypeWarning || ev.Object.FieldPath != "spec.containers{app}" {
		t.Fatalf("event: %+v", ev)
	}
	o := h.waitObserved(failing, time.Minute, "killed", func(o *schemas.PodObserved) bool {
		c := container(o, "app")
		return c.State.Waiting != nil || c.State.Terminated != nil || c.LastTerminationState.Terminated != nil
	})
	if c := container(o, "app"); c.State.Running != nil {
		t.Fatalf("container with a failed PostStart hook still runs: %s", describe(o))
	}
}

// The termination message is read from terminationMessagePath, or from the
// end of the log with FallbackToLogsOnError; emptyDir volumes are shared
// by the containers of a pod and removed with it.
func TestTerminationMessagesAndEmptyDir(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	file := busybox("file", "echo from-file > /dev/termination-log; exit 0")
	logs := busybox("logs", "echo line-1; echo from-logs; exit 2")
	logs.TerminationMessagePolicy = corev1.TerminationMessageFallbackToLogsOnError
	writer := withMount(busybox("writer", "echo shared > /scratch/x; exec sleep 3600"), "scratch", "/scratch")
	reader := withMount(busybox("reader", "while [ ! -f /scratch/x ]; do sleep 0.1; done; cat /scratch/x > /dev/termination-log; exit 0"), "scratch", "/scratch")
	pod := newPod("messages", file, logs, writer, reader)
	pod.Spec.RestartPolicy = corev1.RestartPolicyNever
	pod.Spec.Volumes = []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	grace := int64(1)
	pod.Spec.TerminationGracePeriodSeconds = &grace
	h.run(pod)
	o := h.waitObserved(pod, 2*time.Minute, "three exited", func(o *schemas.PodObserved) bool {
		for _, n := range []string{"file", "logs", "reader"} {
			if container(o, n).State.Terminated == nil {
				return false
			}
		}
		return true
	})
	for name, want := range map[string]string{"file": "from-file", "logs": "from-logs", "reader": "shared"} {
		if msg := container(o, name).State.Terminated.Message; !strings.Contains(msg, want) {
			t.Errorf("%s: termination message %q, want %q", name, msg, want)
		}
	}
	emptyDir := filepath.Join(h.cfg.Node.StateDir, "pods", string(pod.UID), "volumes", "kubernetes.io~empty-dir", "scratch")
	if b, err := os.ReadFile(filepath.Join(emptyDir, "x")); err != nil || strings.TrimSpace(string(b)) != "shared" {
		t.Fatalf("emptyDir on disk: %q %v", b, err)
	}
	h.remove(pod)
	waitFor(t, time.Minute, "pod removed", func() (bool, string) { return h.obs.wasDeleted(pod.UID), "" })
	if _, err := os.Stat(filepath.Join(h.cfg.Node.StateDir, "pods", string(pod.UID))); !os.IsNotExist(err) {
		t.Fatalf("pod dir left after removal: %v", err)
	}
	if _, err := os.Stat(podLogDir(h.cfg.Node.PodLogsDir, pod)); !os.IsNotExist(err) {
		t.Fatalf("pod log dir left after removal: %v", err)
	}
}

// PreStop hooks as the kubelet's executePreStopHook runs them: the kill
// waits for a hook at most the grace period (3 s) and then stops the
// container (SIGKILL 2 s later, the minimum grace), but the hook is not
// cut off there: one that ends between the two (a busy node's slow exec)
// completes and is no failure. A hook that fails gets FailedPreStopHook
// with the kubelet's "PreStopHook failed" only, never the hook's output.
func TestPreStopHooks(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	dir := t.TempDir()
	stubborn := `trap "" TERM; while true; do sleep 0.2; done`
	late := withMount(busybox("late", stubborn), "data", "/data")
	late.Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{
		Exec: &corev1.ExecAction{Command: []string{"sh", "-c", "sleep 3.5; echo done > /data/late"}},
	}}
	bad := busybox("bad", stubborn)
	bad.Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{
		Exec: &corev1.ExecAction{Command: []string{"sh", "-c", "echo hook-output >&2; exit 3"}},
	}}
	pod := newPod("prestops", late, bad)
	pod.Spec.Volumes = []corev1.Volume{hostPathVolume("data", dir)}
	grace := int64(3)
	pod.Spec.TerminationGracePeriodSeconds = &grace
	h.run(pod)
	h.waitObserved(pod, 2*time.Minute, "running", func(o *schemas.PodObserved) bool { return running(o, "late", "bad") })

	deleting := pod.DeepCopy()
	now := metav1.Now()
	deleting.DeletionTimestamp, deleting.DeletionGracePeriodSeconds = &now, &grace
	h.desire(deleting)
	h.waitObserved(pod, time.Minute, "terminated", func(o *schemas.PodObserved) bool { return o.Terminated })
	if b, err := os.ReadFile(filepath.Join(dir, "late")); err != nil || strings.TrimSpace(string(b)) != "done" {
		t.Errorf("the PreStop hook longer than the grace period did not complete: %q %v", b, err)
	}
	evs := h.events.await(t, pod.UID, "FailedPreStopHook", 1)
	for _, ev := range evs {
		if ev.Object.FieldPath != "spec.containers{bad}" || ev.Message != "PreStopHook failed" || ev.Type != corev1.EventTypeWarning {
			t.Errorf("FailedPreStopHook event %+v: want only the failing hook's, saying only \"PreStopHook failed\"", ev)
		}
	}
}
