package runtime

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/podutil"
	"github.com/nodelet/nodelet/schemas"
	"github.com/nodelet/nodelet/services/status"
)

// criContainersNamed lists the pod's CRI containers named name.
func (h *harness) criContainersNamed(pod *corev1.Pod, name string) int {
	n := 0
	for _, c := range h.containers(pod.UID) {
		if c.Labels[labelContainerName] == name {
			n++
		}
	}
	return n
}

// An ephemeral container added to a running pod (as the
// pods/ephemeralcontainers subresource does) starts in its sandbox, in the
// PID namespace of its target, with the kubelet's CRI labels, without
// restarting anything; once exited it is never started again; it is killed
// with the pod.
func TestEphemeralContainerStartsInRunningPod(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	pod := newPod("debugged", busybox("app", "exec sleep 3600"))
	pod.Spec.TerminationGracePeriodSeconds = ptr.To(int64(2)) // sleep as PID 1 ignores SIGTERM
	h.run(pod)
	before := h.waitObserved(pod, 2*time.Minute, "app running", func(o *schemas.PodObserved) bool { return running(o, "app") })
	appID, sandboxID := container(before, "app").ContainerID, before.Sandbox.ID

	// kubectl debug --target=app: PID 1 of the debugger is the target's.
	debug := busybox("debugger", "tr '\\0' ' ' < /proc/1/cmdline > /dev/termination-log; exit 3")
	withDebug := pod.DeepCopy()
	withDebug.Spec.EphemeralContainers = []corev1.EphemeralContainer{{
		EphemeralContainerCommon: corev1.EphemeralContainerCommon(debug), TargetContainerName: "app"}}
	h.desire(withDebug)
	o := h.waitObserved(pod, 2*time.Minute, "debugger exited", func(o *schemas.PodObserved) bool {
		c := container(o, "debugger")
		return c != nil && c.State.Terminated != nil
	})
	d := container(o, "debugger")
	if d.Kind != schemas.ContainerKindEphemeral || len(o.EphemeralContainers) != 1 {
		t.Fatalf("debugger not reported as ephemeral: %s", describe(o))
	}
	if tm := d.State.Terminated; tm.ExitCode != 3 || !strings.Contains(tm.Message, "sleep 3600") {
		t.Fatalf("debugger did not see the target's processes (PID namespace TARGET): %+v", tm)
	}
	if a := container(o, "app"); a.ContainerID != appID || a.RestartCount != 0 || a.State.Running == nil || o.Sandbox.ID != sandboxID {
		t.Fatalf("the pod was disturbed: %s", describe(o))
	}
	for _, c := range h.containers(pod.UID) {
		if c.Labels[labelContainerName] != "debugger" {
			continue
		}
		if c.PodSandboxId != sandboxID || c.Labels[labelPodUID] != string(pod.UID) || c.Labels[LabelManaged] != "true" ||
			c.Annotations[annotationContainerType] != schemas.ContainerKindEphemeral ||
			c.Annotations[annotationContainerHash] != hashContainer(&debug) || c.Annotations[annotationRestartCount] != "0" ||
			c.Annotations[annotationTerminationMessagePath] != corev1.TerminationMessagePathDefault {
			t.Fatalf("debugger's CRI metadata: sandbox %s labels %v annotations %v", c.PodSandboxId, c.Labels, c.Annotations)
		}
	}
	waitFor(t, 30*time.Second, "Started event for spec.ephemeralContainers{debugger}", func() (bool, string) {
		for _, e := range h.events.find(pod.UID, "Started") {
			if e.Object.FieldPath == "spec.ephemeralContainers{debugger}" {
				return true, ""
			}
		}
		return false, strings.Join(h.events.reasons(pod.UID), ",")
	})

	// A second one (the e2e spec's update): once it runs, the worker has
	// synced the pod with the first one exited and left it alone.
	withTwo := withDebug.DeepCopy()
	withTwo.Spec.EphemeralContainers = append(withTwo.Spec.EphemeralContainers, corev1.EphemeralContainer{
		EphemeralContainerCommon: corev1.EphemeralContainerCommon(busybox("debugger2", "exec sleep 3600"))})
	h.desire(withTwo)
	o = h.waitObserved(pod, 2*time.Minute, "debugger2 running", func(o *schemas.PodObserved) bool { return running(o, "debugger2") })
	if n := h.criContainersNamed(pod, "debugger"); n != 1 {
		t.Fatalf("the exited ephemeral container was started again: %d instances", n)
	}
	if a := container(o, "app"); a.ContainerID != appID || a.RestartCount != 0 {
		t.Fatalf("app restarted: %s", describe(o))
	}

	h.remove(withTwo)
	waitFor(t, 2*time.Minute, "observed key deleted", func() (bool, string) { return h.obs.wasDeleted(pod.UID), "" })
	hist := h.obs.all(pod.UID)
	last := hist[len(hist)-1]
	if c := container(last, "debugger2"); !last.Terminated || c == nil || c.State.Terminated == nil {
		t.Fatalf("debugger2 not killed with the pod: %s", describe(last))
	}
}

// A running pod whose activeDeadlineSeconds is lowered (the e2e spec's
// update) is killed once it has been active that long since the
// status.startTime nodelet-status wrote, not before; its observed state
// says DeadlineExceeded, the kubelet's event is emitted, and its status
// is Failed/DeadlineExceeded with the kubelet's message.
func TestActiveDeadlineKillsPod(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	pod := newPod("deadline", busybox("app", "exec sleep 3600"))
	pod.Spec.TerminationGracePeriodSeconds = ptr.To(int64(2))
	h.run(pod)
	h.waitObserved(pod, 2*time.Minute, "app running", func(o *schemas.PodObserved) bool { return running(o, "app") })

	// nodelet-status's record of the pod, with its start time (seconds,
	// as the API keeps it).
	start := metav1.NewTime(time.Now().Truncate(time.Second))
	if _, err := h.status.Put(h.ctx, bus.BucketStatus, string(pod.UID), &schemas.PodStatusRecord{
		UID: string(pod.UID), Namespace: pod.Namespace, Name: pod.Name,
		Status: corev1.PodStatus{Phase: corev1.PodRunning, StartTime: &start}}); err != nil {
		t.Fatal(err)
	}
	const deadline = 4
	updated := pod.DeepCopy()
	updated.Spec.ActiveDeadlineSeconds = ptr.To(int64(deadline))
	h.desire(updated)

	h.waitObserved(pod, time.Minute, "pod being killed", func(o *schemas.PodObserved) bool { return o.Terminating || o.Terminated })
	if active := time.Since(start.Time); active < deadline*time.Second {
		t.Fatalf("killed after %v, before its deadline of %ds", active, deadline)
	}
	o := h.waitObserved(pod, time.Minute, "pod killed", func(o *schemas.PodObserved) bool { return o.Terminated })
	if o.Reason != podutil.ReasonDeadlineExceeded || o.Message != podutil.MessageDeadlineExceeded {
		t.Fatalf("observed reason: %s", describe(o))
	}
	if active := time.Since(start.Time); active > (deadline+15)*time.Second {
		t.Fatalf("killed only %v after its start", active)
	}
	if evs := h.events.await(t, pod.UID, podutil.ReasonDeadlineExceeded, 1); len(evs) != 1 || evs[0].Type != corev1.EventTypeNormal ||
		evs[0].Message != podutil.MessageDeadlineExceeded {
		t.Fatalf("DeadlineExceeded events: %+v", evs)
	}
	old := corev1.PodStatus{Phase: corev1.PodRunning, StartTime: &start}
	s := status.ComputePodStatus(status.PodInputs{Pod: updated, Verdict: &schemas.AdmissionVerdict{Admitted: true},
		Observed: o, Old: &old, Now: time.Now()})
	if s.Phase != corev1.PodFailed || s.Reason != podutil.ReasonDeadlineExceeded || s.Message != podutil.MessageDeadlineExceeded {
		t.Fatalf("status: phase %s reason %q message %q", s.Phase, s.Reason, s.Message)
	}
}
