package status

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/schemas"
	"github.com/nodelet/nodelet/services/common/podutil"
)

// TestAPIEphemeralContainerAndDeadline: the e2e specs' two updates of a
// running API pod. An ephemeral container added through the
// pods/ephemeralcontainers subresource shows in the API's
// ephemeralContainerStatuses once the runtime runs it; a deadline set on
// the running pod, once the runtime has killed it for it, makes the API
// pod Failed with reason DeadlineExceeded and the kubelet's message.
func TestAPIEphemeralContainerAndDeadline(t *testing.T) {
	h := newHarness(t)
	h.runtimeReady()
	h.startAPI(nil)
	ns := cp.Namespace(t)
	admin := cp.AdminClient(t)
	created, err := admin.CoreV1().Pods(ns).Create(ctxT(t), apiPod(ns, "debugged", "", "app"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h.desire(created, schemas.SourceAPI)
	h.admit(created)
	obs := runningObserved(created, "10.88.0.21", 1)
	h.observe(created, obs)
	waitPod(t, admin, ns, "debugged", "Running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })

	// kubectl debug: the subresource adds the container.
	withDebug, err := admin.CoreV1().Pods(ns).Get(ctxT(t), "debugged", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	withDebug.Spec.EphemeralContainers = append(withDebug.Spec.EphemeralContainers, corev1.EphemeralContainer{
		EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debugger", Image: "busybox",
			ImagePullPolicy: corev1.PullIfNotPresent, TerminationMessagePolicy: corev1.TerminationMessageReadFile},
		TargetContainerName: "app"})
	if withDebug, err = admin.CoreV1().Pods(ns).UpdateEphemeralContainers(ctxT(t), "debugged", withDebug, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.desire(withDebug, schemas.SourceAPI)
	obs.Generation++
	obs.EphemeralContainers = []schemas.ContainerObserved{{Name: "debugger", Kind: schemas.ContainerKindEphemeral,
		ContainerID: "containerd://" + string(created.UID) + "-debugger", Image: "nodelet.local/busybox:1.35", ImageID: "sha256:0123",
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now().Rfc3339Copy()}}}}
	h.observe(created, obs)
	p := waitPod(t, admin, ns, "debugged", "the ephemeral container running", func(p *corev1.Pod) bool {
		return len(p.Status.EphemeralContainerStatuses) == 1 && p.Status.EphemeralContainerStatuses[0].State.Running != nil
	})
	if es := p.Status.EphemeralContainerStatuses[0]; es.Name != "debugger" || es.ContainerID != obs.EphemeralContainers[0].ContainerID || es.Ready {
		t.Fatalf("ephemeral container status: %+v", es)
	}
	if p.Status.Phase != corev1.PodRunning || len(p.Status.ContainerStatuses) != 1 {
		t.Fatalf("pod status: %+v", p.Status)
	}

	// The deadline lowered on the running pod; the runtime kills it.
	p.Spec.ActiveDeadlineSeconds = ptrTo(int64(1))
	updated, err := admin.CoreV1().Pods(ns).Update(ctxT(t), p, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h.desire(updated, schemas.SourceAPI)
	killed := obs
	killed.Generation++
	killed.Terminated, killed.Sandbox.Ready = true, false
	killed.Reason, killed.Message = podutil.ReasonDeadlineExceeded, podutil.MessageDeadlineExceeded
	exited := corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "Error"}}
	killed.Containers = []schemas.ContainerObserved{obs.Containers[0]}
	killed.Containers[0].State = exited
	killed.EphemeralContainers = []schemas.ContainerObserved{obs.EphemeralContainers[0]}
	killed.EphemeralContainers[0].State = exited
	h.observe(created, killed)
	p = waitPod(t, admin, ns, "debugged", "Failed with DeadlineExceeded", func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodFailed && p.Status.Reason == podutil.ReasonDeadlineExceeded
	})
	if p.Status.Message != podutil.MessageDeadlineExceeded || p.Status.EphemeralContainerStatuses[0].State.Terminated == nil {
		t.Fatalf("pod status: %+v", p.Status)
	}
}
