package status

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/schemas"
)

func ephemeral(o schemas.ContainerObserved) schemas.ContainerObserved {
	o.Kind = schemas.ContainerKindEphemeral
	return o
}

// status.ephemeralContainerStatuses follow convertToAPIContainerStatuses
// as for app containers: waiting until the runtime has the container,
// then running, then terminated (kept so even when the runtime loses it);
// never ready; they do not change the phase or the conditions.
func TestEphemeralContainerStatuses(t *testing.T) {
	pod := testPod(corev1.RestartPolicyAlways, "app")
	pod.Spec.EphemeralContainers = []corev1.EphemeralContainer{
		{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debugger", Image: "busybox"}, TargetContainerName: "app"},
		{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "b-debugger", Image: "agnhost"}},
	}
	compute := func(old *corev1.PodStatus, eph ...schemas.ContainerObserved) corev1.PodStatus {
		return ComputePodStatus(PodInputs{Pod: pod, Verdict: admitted(), Now: t0, Old: old,
			Observed: &schemas.PodObserved{Sandbox: readySandbox(), Containers: []schemas.ContainerObserved{running("app")},
				EphemeralContainers: eph}})
	}
	byName := func(s corev1.PodStatus, name string) corev1.ContainerStatus {
		t.Helper()
		cs := statusByName(s.EphemeralContainerStatuses, name)
		if cs == nil {
			t.Fatalf("no ephemeral status %q in %+v", name, s.EphemeralContainerStatuses)
		}
		return *cs
	}

	s := compute(nil)
	if len(s.EphemeralContainerStatuses) != 2 || s.EphemeralContainerStatuses[0].Name != "b-debugger" {
		t.Fatalf("statuses not sorted by name: %+v", s.EphemeralContainerStatuses)
	}
	if w := byName(s, "debugger").State.Waiting; w == nil || w.Reason != ReasonContainerCreating {
		t.Fatalf("not yet reported: %+v", byName(s, "debugger").State)
	}
	expect(t, s.Phase, corev1.PodRunning, "phase")
	expect(t, condStatus(s, corev1.PodReady), corev1.ConditionTrue, "Ready with an ephemeral container waiting")

	s = compute(&s, ephemeral(running("debugger")), ephemeral(waiting("b-debugger", "ErrImagePull")))
	d := byName(s, "debugger")
	if d.State.Running == nil || d.ContainerID != "containerd://debugger-1" || d.Ready || d.Image != "docker.io/library/busybox:latest" {
		t.Fatalf("running ephemeral: %+v", d)
	}
	if w := byName(s, "b-debugger").State.Waiting; w == nil || w.Reason != "ErrImagePull" {
		t.Fatalf("waiting ephemeral: %+v", byName(s, "b-debugger").State)
	}

	s = compute(&s, ephemeral(exited("debugger", 3)))
	if tm := byName(s, "debugger").State.Terminated; tm == nil || tm.ExitCode != 3 {
		t.Fatalf("exited ephemeral: %+v", byName(s, "debugger").State)
	}
	expect(t, s.Phase, corev1.PodRunning, "phase with an ephemeral container exited")
	expect(t, condStatus(s, corev1.ContainersReady), corev1.ConditionTrue, "ContainersReady with an ephemeral container exited")

	// The runtime no longer has it: the terminated state stays.
	s = compute(&s)
	if tm := byName(s, "debugger").State.Terminated; tm == nil || tm.ExitCode != 3 {
		t.Fatalf("terminated ephemeral forgotten: %+v", byName(s, "debugger").State)
	}
}
