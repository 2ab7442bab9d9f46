package runtime

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Issue 32: a resize of a resource whose resizePolicy is RestartContainer
// restarts the container (the kubelet's computePodResizeAction), one of a
// NotRequired resource does not.
func TestResizeRestarts(t *testing.T) {
	policy := []corev1.ContainerResizePolicy{
		{ResourceName: corev1.ResourceCPU, RestartPolicy: corev1.NotRequired},
		{ResourceName: corev1.ResourceMemory, RestartPolicy: corev1.RestartContainer},
	}
	was := resources(rlist("cpu", "100m", "memory", "32Mi"), rlist("cpu", "200m", "memory", "64Mi"))
	for _, tc := range []struct {
		name    string
		policy  []corev1.ContainerResizePolicy
		now     corev1.ResourceRequirements
		restart bool
	}{
		{"memory limit, RestartContainer", policy, resources(rlist("cpu", "100m", "memory", "32Mi"), rlist("cpu", "200m", "memory", "128Mi")), true},
		{"memory request, RestartContainer", policy, resources(rlist("cpu", "100m", "memory", "48Mi"), rlist("cpu", "200m", "memory", "64Mi")), true},
		{"cpu, NotRequired", policy, resources(rlist("cpu", "150m", "memory", "32Mi"), rlist("cpu", "300m", "memory", "64Mi")), false},
		{"memory without a policy", nil, resources(rlist("cpu", "100m", "memory", "32Mi"), rlist("cpu", "200m", "memory", "128Mi")), false},
		{"unchanged", policy, was, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newStepEnv(t)
			app := busybox("app", "")
			app.ResizePolicy, app.Resources = tc.policy, was
			pod := newPod("resize", app)
			sb := &sandboxInfo{ID: "sb1", Ready: true, IPs: []string{"10.88.0.2"}}
			running := &containerInfo{ID: "c1", Name: "app", SandboxID: "sb1", State: runtimeapi.ContainerState_CONTAINER_RUNNING}
			pr := &podRuntime{UID: string(pod.UID), Sandboxes: []*sandboxInfo{sb}, Containers: []*containerInfo{running}}
			e.m.resources.noteStarted(pod, pr) // c1 runs with `was`

			resized := pod.DeepCopy()
			resized.Spec.Containers[0].Resources = tc.now
			a := podActions{Sandbox: sb}
			restarting := e.m.resources.resizeRestarts(resized, pr, &a)
			if !tc.restart {
				if len(restarting) != 0 || len(a.Kill) != 0 || len(a.Start) != 0 {
					t.Fatalf("restarted: %v %+v", restarting, a)
				}
				return
			}
			if !restarting["app"] || len(a.Kill) != 1 || a.Kill[0].C != running || !a.Kill[0].ForResize ||
				a.Kill[0].Message != "Container app resize requires restart" {
				t.Fatalf("kill %+v (%v)", a.Kill, restarting)
			}
			if len(a.Start) != 1 || a.Start[0].Spec.Name != "app" || a.Start[0].Dead != nil || a.Start[0].Kind != "app" {
				t.Fatalf("start %+v: the container must start again at once, without back-off", a.Start)
			}
			// Killed already for another reason: not twice.
			b := podActions{Sandbox: sb, Kill: []containerToKill{{C: running, Message: "Container app definition changed"}}}
			if r := e.m.resources.resizeRestarts(resized, pr, &b); len(r) != 0 || len(b.Kill) != 1 {
				t.Fatalf("killed twice: %+v", b.Kill)
			}
		})
	}
}
