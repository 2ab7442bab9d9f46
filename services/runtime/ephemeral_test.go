package runtime

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/schemas"
)

func withEphemeral(p *corev1.Pod, name, target string) *corev1.Pod {
	p = p.DeepCopy()
	c := busybox(name, "")
	p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, corev1.EphemeralContainer{
		EphemeralContainerCommon: corev1.EphemeralContainerCommon(c), TargetContainerName: target})
	return p
}

// Ephemeral containers follow the kubelet's computePodActions: started
// once in a ready sandbox (first, even during init), never restarted, not
// killed as "not in the spec", not started in a sandbox being created.
func TestComputePodActionsEphemeral(t *testing.T) {
	base := newPod("p", busybox("a", ""))
	dbg := withEphemeral(base, "debug", "a")
	withInit := dbg.DeepCopy()
	withInit.Spec.InitContainers = []corev1.Container{busybox("i1", "")}
	never := dbg.DeepCopy()
	never.Spec.RestartPolicy = corev1.RestartPolicyNever
	sb1 := readySB("sb1", 0)
	noProbes := func(string, string, string) *schemas.ProbeResult { return nil }

	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		pr   *podRuntime
		want string
	}{
		{"added to a running pod: started alone", dbg, runtimeOf([]*sandboxInfo{sb1},
			ctr(dbg, "a", "sb1", "running", 0, 1)), "start[debug] init-done"},
		{"running: nothing to do", dbg, runtimeOf([]*sandboxInfo{sb1},
			ctr(dbg, "a", "sb1", "running", 0, 1), ctr(dbg, "debug", "sb1", "running", 0, 2)), "init-done"},
		{"exited 1: never restarted", dbg, runtimeOf([]*sandboxInfo{sb1},
			ctr(dbg, "a", "sb1", "running", 0, 1), ctr(dbg, "debug", "sb1", "exited", 1, 2)), "init-done"},
		{"exited 0: never restarted", dbg, runtimeOf([]*sandboxInfo{sb1},
			ctr(dbg, "a", "sb1", "running", 0, 1), ctr(dbg, "debug", "sb1", "exited", 0, 2)), "init-done"},
		{"created never started: started, not duplicated", dbg, runtimeOf([]*sandboxInfo{sb1},
			ctr(dbg, "a", "sb1", "running", 0, 1), ctr(dbg, "debug", "sb1", "created", 0, 2)), "start[debug(existing)] init-done"},
		{"during init: started first", withInit, runtimeOf([]*sandboxInfo{sb1},
			ctr(withInit, "i1", "sb1", "running", 0, 1)), "start[debug]"},
		{"no sandbox: not started with the pod", dbg, runtimeOf(nil), "create(0) start[a]"},
		{"sandbox gone: not started in the new one", dbg, runtimeOf([]*sandboxInfo{deadSB("sb1", 0)},
			ctr(dbg, "a", "sb1", "exited", 137, 1)), "create(1) start[a]"},
		{"removed from the spec: killed", base, runtimeOf([]*sandboxInfo{sb1},
			ctr(base, "a", "sb1", "running", 0, 1), ctr(dbg, "debug", "sb1", "running", 0, 2)), "kill[sb1-debug-2] init-done"},
		{"running ephemeral does not keep a finished pod", never, runtimeOf([]*sandboxInfo{sb1},
			ctr(never, "a", "sb1", "exited", 0, 1), ctr(never, "debug", "sb1", "running", 0, 2)), "init-done terminal(Completed)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := computePodActions(tc.pod, tc.pr, noProbes)
			if got := summary(a); got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
			for _, s := range a.Start {
				if s.Spec.Name == "debug" && (s.Kind != schemas.ContainerKindEphemeral || s.Target != "a") {
					t.Fatalf("ephemeral start: kind %q target %q", s.Kind, s.Target)
				}
			}
		})
	}
}

// The kubelet's generateLinuxContainerConfig: a target puts the ephemeral
// container in the target's PID namespace; a pod sharing its process
// namespace keeps POD.
func TestEphemeralTargetNamespace(t *testing.T) {
	pod := withEphemeral(newPod("p", busybox("a", "")), "debug", "a")
	spec := (*corev1.Container)(&pod.Spec.EphemeralContainers[0].EphemeralContainerCommon)
	ns := func(p *corev1.Pod, target string) *runtimeapi.NamespaceOption {
		sc := securityFor(p, spec, nil, target)
		return sc.NamespaceOptions
	}
	if o := ns(pod, "ctr-a"); o.Pid != runtimeapi.NamespaceMode_TARGET || o.TargetId != "ctr-a" {
		t.Fatalf("with target: %+v", o)
	}
	if o := ns(pod, ""); o.Pid != runtimeapi.NamespaceMode_CONTAINER || o.TargetId != "" {
		t.Fatalf("without target: %+v", o)
	}
	shared := pod.DeepCopy()
	yes := true
	shared.Spec.ShareProcessNamespace = &yes
	if o := ns(shared, "ctr-a"); o.Pid != runtimeapi.NamespaceMode_POD || o.TargetId != "" {
		t.Fatalf("shared process namespace: %+v", o)
	}
	if k := containerKind(pod, "debug"); k != schemas.ContainerKindEphemeral {
		t.Fatalf("containerKind: %q", k)
	}
	if s := specOf(pod, "debug"); s == nil || s.Name != "debug" {
		t.Fatalf("specOf: %v", s)
	}
}
