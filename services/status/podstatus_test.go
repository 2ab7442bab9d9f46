package status

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/internal/podutil"
	"github.com/nodelet/nodelet/schemas"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// testPod is a pod with one app container "app" per name given.
func testPod(policy corev1.RestartPolicy, containers ...string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "uid-1", Generation: 1},
		Spec:       corev1.PodSpec{RestartPolicy: policy},
	}
	for _, c := range containers {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: c, Image: "busybox"})
	}
	return p
}

func running(name string) schemas.ContainerObserved {
	return schemas.ContainerObserved{
		Name: name, Kind: schemas.ContainerKindApp, ContainerID: "containerd://" + name + "-1",
		Image: "docker.io/library/busybox:latest", ImageID: "sha256:abc",
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(t0)}},
	}
}

func exited(name string, code int32) schemas.ContainerObserved {
	c := running(name)
	reason := "Completed"
	if code != 0 {
		reason = "Error"
	}
	c.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
		ExitCode: code, Reason: reason, StartedAt: metav1.NewTime(t0), FinishedAt: metav1.NewTime(t0.Add(time.Second)),
	}}
	return c
}

func waiting(name, reason string) schemas.ContainerObserved {
	return schemas.ContainerObserved{Name: name, Kind: schemas.ContainerKindApp,
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: reason + " message"}}}
}

// torndown is o once the runtime has stopped the pod: its sandbox too.
func torndown(o *schemas.PodObserved) *schemas.PodObserved {
	o.Terminated = true
	if o.Sandbox != nil {
		o.Sandbox.Ready = false
	}
	return o
}

func readySandbox() *schemas.SandboxObserved {
	return &schemas.SandboxObserved{ID: "sb1", Ready: true, IPs: []string{"10.88.0.5"}, CreatedAt: t0}
}

func admitted() *schemas.AdmissionVerdict { return &schemas.AdmissionVerdict{Admitted: true} }

func cond(s corev1.PodStatus, t corev1.PodConditionType) *corev1.PodCondition {
	return findCondition(s.Conditions, t)
}

func condStatus(s corev1.PodStatus, t corev1.PodConditionType) corev1.ConditionStatus {
	if c := cond(s, t); c != nil {
		return c.Status
	}
	return ""
}

func TestComputePodStatus(t *testing.T) {
	withInit := testPod(corev1.RestartPolicyAlways, "app")
	withInit.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "busybox"}}
	withSidecar := testPod(corev1.RestartPolicyNever, "app")
	withSidecar.Spec.InitContainers = []corev1.Container{{Name: "side", Image: "busybox", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)}}
	withReadiness := testPod(corev1.RestartPolicyAlways, "app")
	withReadiness.Spec.Containers[0].ReadinessProbe = &corev1.Probe{}
	withStartup := testPod(corev1.RestartPolicyAlways, "app")
	withStartup.Spec.Containers[0].StartupProbe = &corev1.Probe{}
	withGate := testPod(corev1.RestartPolicyAlways, "app")
	withGate.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: "example.com/lb"}}
	gateTrue := withGate.DeepCopy()
	gateTrue.Status.Conditions = []corev1.PodCondition{{Type: "example.com/lb", Status: corev1.ConditionTrue}}
	hostNet := testPod(corev1.RestartPolicyAlways, "app")
	hostNet.Spec.HostNetwork = true
	guaranteed := testPod(corev1.RestartPolicyAlways, "app")
	guaranteed.Spec.Containers[0].Resources = corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
	}
	burstable := testPod(corev1.RestartPolicyAlways, "app")
	burstable.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}
	static := testPod(corev1.RestartPolicyAlways, "app")
	static.Annotations = map[string]string{podutil.AnnotationConfigSource: "file", podutil.AnnotationConfigHash: "h1"}

	obs := func(sb *schemas.SandboxObserved, apps ...schemas.ContainerObserved) *schemas.PodObserved {
		return &schemas.PodObserved{UID: "uid-1", Sandbox: sb, Containers: apps}
	}
	probe := func(container, kind, result, cid string) map[ProbeID]schemas.ProbeResult {
		return map[ProbeID]schemas.ProbeResult{{container, kind}: {Container: container, Probe: kind, Result: result, ContainerID: cid}}
	}

	tests := []struct {
		name  string
		in    PodInputs
		check func(t *testing.T, s corev1.PodStatus)
	}{{
		name: "rejected by admission: Failed with the kubelet's reason",
		in: PodInputs{Pod: testPod(corev1.RestartPolicyAlways, "app"),
			Verdict: &schemas.AdmissionVerdict{Reason: "OutOfcpu", Message: "Node didn't have enough resource: cpu, requested: 4000, used: 0, capacity: 2000"}},
		check: func(t *testing.T, s corev1.PodStatus) {
			expect(t, s.Phase, corev1.PodFailed, "phase")
			expect(t, s.Reason, "OutOfcpu", "reason")
			expect(t, s.Message, "Pod was rejected: Node didn't have enough resource: cpu, requested: 4000, used: 0, capacity: 2000", "message")
			expect(t, s.QOSClass, corev1.PodQOSBestEffort, "qos")
			if s.StartTime == nil || !s.StartTime.Time.Equal(t0) {
				t.Errorf("startTime = %v, want %v", s.StartTime, t0)
			}
			if len(s.ContainerStatuses) != 0 {
				t.Errorf("a rejected pod has no container statuses, got %v", s.ContainerStatuses)
			}
		},
	}, {
		name: "admitted, nothing created yet: Pending, ContainerCreating",
		in:   PodInputs{Pod: testPod(corev1.RestartPolicyAlways, "app"), Verdict: admitted(), HostIPs: []string{"192.168.1.10"}},
		check: func(t *testing.T, s corev1.PodStatus) {
			expect(t, s.Phase, corev1.PodPending, "phase")
			expect(t, s.ContainerStatuses[0].State.Waiting.Reason, ReasonContainerCreating, "waiting reason")
			expect(t, s.ContainerStatuses[0].Image, "busybox", "image")
			expect(t, condStatus(s, corev1.PodReadyToStartContainers), corev1.ConditionFalse, "PodReadyToStartContainers")
			expect(t, cond(s, corev1.PodReadyToStartContainers).Reason, ReasonPodSandboxNotReady, "PodReadyToStartContainers reason")
			expect(t, condStatus(s, corev1.PodInitialized), corev1.ConditionTrue, "Initialized")
			expect(t, condStatus(s, corev1.PodReady), corev1.ConditionFalse, "Ready")
			expect(t, cond(s, corev1.PodReady).Reason, ReasonContainersNotReady, "Ready reason")
			expect(t, condStatus(s, corev1.ContainersReady), corev1.ConditionFalse, "ContainersReady")
			expect(t, condStatus(s, corev1.PodScheduled), corev1.ConditionTrue, "PodScheduled")
			expect(t, s.HostIP, "192.168.1.10", "hostIP")
			expect(t, len(s.HostIPs), 1, "hostIPs")
			expect(t, cond(s, corev1.PodReady).ObservedGeneration, int64(1), "condition observedGeneration")
		},
	}, {
		name: "init containers pending: PodInitializing and not initialized",
		in:   PodInputs{Pod: withInit, Verdict: admitted()},
		check: func(t *testing.T, s corev1.PodStatus) {
			expect(t, s.Phase, corev1.PodPending, "phase")
			expect(t, s.ContainerStatuses[0].State.Waiting.Reason, ReasonPodInitializing, "app waiting reason")
			expect(t, s.InitContainerStatuses[0].State.Waiting.Reason, ReasonPodInitializing, "init waiting reason")
			expect(t, condStatus(s, corev1.PodInitialized), corev1.ConditionFalse, "Initialized")
			expect(t, cond(s, corev1.PodInitialized).Reason, ReasonContainersNotInitialized, "Initialized reason")
		},
	}, {
		name: "running without probes: Running and Ready, pod IP from the sandbox",
		in:   PodInputs{Pod: testPod(corev1.RestartPolicyAlways, "app"), Verdict: admitted(), Observed: obs(readySandbox(), running("app"))},
		check: func(t *testing.T, s corev1.PodStatus) {
			expect(t, s.Phase, corev1.PodRunning, "phase")
			expect(t, s.PodIP, "10.88.0.5", "podIP")
			expect(t, len(s.PodIPs), 1, "podIPs")
			cs := s.ContainerStatuses[0]
			expect(t, cs.Ready, true, "ready")
			expect(t, *cs.Started, true, "started")
			expect(t, cs.ContainerID, "containerd://app-1", "containerID")
			expect(t, cs.ImageID, "sha256:abc", "imageID")
			expect(t, cs.Image, "docker.io/library/busybox:latest", "image")
			for _, c := range []corev1.PodConditionType{corev1.PodReadyToStartContainers, corev1.PodInitialized, corev1.PodReady, corev1.ContainersReady, corev1.PodScheduled} {
				expect(t, condStatus(s, c), corev1.ConditionTrue, string(c))
			}
		},
	}, {
		name: "readiness probe without a result: not ready",
		in:   PodInputs{Pod: withReadiness, Verdict: admitted(), Observed: obs(readySandbox(), running("app"))},
		check: func(t *testing.T, s corev1.PodStatus) {
			expect(t, s.Phase, corev1.PodRunning, "phase")
			expect(t, s.ContainerStatuses[0].Ready, false, "ready")
			expect(t, condStatus(s, corev1.PodReady), corev1.ConditionFalse, "Ready")
		},
	}, {
		name: "readiness success for this container instance: ready",
		in: PodInputs{Pod: withReadiness, Verdict: admitted(), Observed: obs(readySandbox(), running("app")),
			Probes: probe("app", schemas.ProbeReadiness, schemas.ProbeSuccess, "containerd://app-1")},
		check: func(t *testing.T, s corev1.PodStatus) {
			expect(t, s.ContainerStatuses[0].Ready, true, "ready")
			expect(t, condStatus(s, corev1.PodReady), corev1.ConditionTrue, "Ready")
		},
	}, {
		name: "readiness success of an earlier instance does not count",
		in: PodInputs{Pod: withReadiness, Verdict: admitted(), Observed: obs(readySandbox(), running("app")),
			Probes: probe("app", schemas.ProbeReadiness, schemas.ProbeSuccess, "containerd://app-0")},
		check: func(t *testing.T, s corev1.PodStatus) { expect(t, s.ContainerStatuses[0].Ready, false, "ready") },
	}, {
		name: "readiness failure: not ready",
		in: PodInputs{Pod: withReadiness, Verdict: admitted(), Observed: obs(readySandbox(), running("app")),
			Probes: probe("app", schemas.ProbeReadiness, schemas.ProbeFailure, "containerd://app-1")},
		check: func(t *testing.T, s corev1.PodStatus) { expect(t, s.ContainerStatuses[0].Ready, false, "ready") },
	}, {
		name: "startup probe not yet succeeded: not started, not ready",
		in:   PodInputs{Pod: withStartup, Verdict: admitted(), Observed: obs(readySandbox(), running("app"))},
		check: func(t *testing.T, s corev1.PodStatus) {
			expect(t, *s.ContainerStatuses[0].Started, false, "started")
			expect(t, s.ContainerStatuses[0].Ready, false, "ready")
		},
	}, {
		name: "startup probe succeeded: started and ready",
		in: PodInputs{Pod: withStartup, Verdict: admitted(), Observed: obs(readySandbox(), running("app")),
			Probes: probe("app", schemas.ProbeStartup, schemas.ProbeSuccess, "containerd://app-1")},
		check: func(t *testing.T, s corev1.PodStatus) {
			expect(t, *s.ContainerStatuses[0].Started, true, "started")
			expect(t, s.ContainerStatuses[0].Ready, true, "ready")
		},
	}, {
		name: "readiness gate without its condition: Ready False",
		in:   PodInputs{Pod: withGate, Verdict: admitted(), Observed: obs(readySandbox(), running("app"))},
		check: func(t *testing.T, s corev1.PodStatus) {
			expect(t, condStatus(s, corev1.ContainersReady), corev1.ConditionTrue, "ContainersReady")
			expect(t, condStatus(s, corev1.PodReady), corev1.ConditionFalse, "Ready")
			expect(t, cond(s, corev1.PodReady).Reason, ReasonReadinessGatesNotReady, "Ready reason")
		},
	}, {
		name: "readiness gate True (set by a controller): Ready True, gate condition kept",
		in:   PodInputs{Pod: gateTrue, Verdict: admitted(), Observed: obs(readySandbox(), running("app"))},
		check: func(t *testing.T, s corev1.PodStatus) {
			expect(t, condStatus(s, corev1.PodReady), corev1.ConditionTrue, "Ready")
			expect(t, condStatus(s, "example.com/lb"), corev1.ConditionTrue, "gate condition")
		},
	}, {
		name: "restartPolicy Never, exit 0: Succeeded",
		in:   PodInputs{Pod: testPod(corev1.RestartPolicyNever, "app"), Verdict: admitted(), Observed: torndown(obs(readySandbox(), exited("app", 0)))},
		check: func(t *testing.T, s corev1.PodStatus) {
			expect(t, s.Phase, corev1.PodSucceeded, "phase")
			expect(t, cond(s, corev1.PodReady).Reason, ReasonPodCompleted, "Ready reason")
			expect(t, s.ContainerStatuses[0].State.Terminated.ContainerID, "containerd://app-1", "terminated containerID")
		},
	}, {
		name: "restartPolicy Never, exit 1: Failed",
		in:   PodInputs{Pod: testPod(corev1.RestartPolicyNever, "app"), Verdict: admitted(), Observed: torndown(obs(readySandbox(), exited("app", 1)))},
		check: func(t *testing.T, s corev1.PodStatus) {
			expect(t, s.Phase, corev1.PodFailed, "phase")
			expect(t, cond(s, corev1.PodReady).Reason, ReasonPodFailed, "Ready reason")
		},
	}, {
		name:  "restartPolicy OnFailure, exit 1: Running (restarting)",
		in:    PodInputs{Pod: testPod(corev1.RestartPolicyOnFailure, "app"), Verdict: admitted(), Observed: obs(readySandbox(), exited("app", 1))},
		check: func(t *testing.T, s corev1.PodStatus) { expect(t, s.Phase, corev1.PodRunning, "phase") },
	}, {
		name:  "restartPolicy OnFailure, exit 0: Succeeded",
		in:    PodInputs{Pod: testPod(corev1.RestartPolicyOnFailure, "app"), Verdict: admitted(), Observed: torndown(obs(readySandbox(), exited("app", 0)))},
		check: func(t *testing.T, s corev1.PodStatus) { expect(t, s.Phase, corev1.PodSucceeded, "phase") },
	}, {
		// The kubelet's mergePodStatus: no terminal phase while the pod
		// could have running containers (its worker has not finished
		// terminating it), though getPhase says Succeeded.
		name: "restartPolicy Never, exit 0, the runtime still tearing the pod down: the phase it had",
		in: PodInputs{Pod: testPod(corev1.RestartPolicyNever, "app"), Verdict: admitted(),
			Observed: func() *schemas.PodObserved {
				o := obs(readySandbox(), exited("app", 0))
				o.Terminating = true
				return o
			}(),
			Old: &corev1.PodStatus{Phase: corev1.PodRunning}},
		check: func(t *testing.T, s corev1.PodStatus) { expect(t, s.Phase, corev1.PodRunning, "phase") },
	}, {
		name: "restartPolicy Never, exit 1, not yet seen by the runtime's sync: the phase it had",
		in: PodInputs{Pod: testPod(corev1.RestartPolicyNever, "app"), Verdict: admitted(), Observed: obs(readySandbox(), exited("app", 1)),
			Old: &corev1.PodStatus{Phase: corev1.PodRunning}},
		check: func(t *testing.T, s corev1.PodStatus) { expect(t, s.Phase, corev1.PodRunning, "phase") },
	}, {
		name: "restartPolicy Always, CrashLoopBackOff: Running with the runtime's waiting reason",
		in: PodInputs{Pod: testPod(corev1.RestartPolicyAlways, "app"), Verdict: admitted(), Observed: obs(readySandbox(), func() schemas.ContainerObserved {
			c := waiting("app", "CrashLoopBackOff")
			c.ContainerID = "containerd://app-3"
			c.RestartCount = 3
			c.LastTerminationState = exited("app", 1).State
			return c
		}())},
		check: func(t *testing.T, s corev1.PodStatus) {
			expect(t, s.Phase, corev1.PodRunning, "phase")
			cs := s.ContainerStatuses[0]
			expect(t, cs.State.Waiting.Reason, "CrashLoopBackOff", "waiting reason")
			expect(t, cs.RestartCount, int32(3), "restartCount")
			expect(t, cs.LastTerminationState.Terminated.ExitCode, int32(1), "last exit code")
		},
	}, {
		name: "image pull errors pass through",
		in: PodInputs{Pod: testPod(corev1.RestartPolicyAlways, "a", "b", "c"), Verdict: admitted(),
			Observed: obs(readySandbox(), waiting("a", "ErrImagePull"), waiting("b", "ImagePullBackOff"), waiting("c", "CreateContainerConfigError"))},
		check: func(t *testing.T, s corev1.PodStatus) {
			expect(t, s.Phase, corev1.PodPending, "phase")
			expect(t, s.ContainerStatuses[0].State.Waiting.Reason, "ErrImagePull", "a")
			expect(t, s.ContainerStatuses[1].State.Waiting.Reason, "ImagePullBackOff", "b")
			expect(t, s.ContainerStatuses[2].State.Waiting.Reason, "CreateContainerConfigError", "c")
			expect(t, s.ContainerStatuses[2].State.Waiting.Message, "CreateContainerConfigError message", "c message")
		},
	}, {
		name: "init container failed with restartPolicy Never: Failed",
		in: PodInputs{Pod: func() *corev1.Pod {
			p := withInit.DeepCopy()
			p.Spec.RestartPolicy = corev1.RestartPolicyNever
			return p
		}(), Verdict: admitted(), Observed: torndown(&schemas.PodObserved{Sandbox: readySandbox(),
			InitContainers: []schemas.ContainerObserved{exited("init", 2)}, Containers: []schemas.ContainerObserved{waiting("app", ReasonPodInitializing)}})},
		check: func(t *testing.T, s corev1.PodStatus) {
			expect(t, s.Phase, corev1.PodFailed, "phase")
			expect(t, s.InitContainerStatuses[0].Ready, false, "init ready")
		},
	}, {
		name: "init container done: initialized, app running",
		in: PodInputs{Pod: withInit, Verdict: admitted(), Observed: &schemas.PodObserved{Sandbox: readySandbox(),
			InitContainers: []schemas.ContainerObserved{exited("init", 0)}, Containers: []schemas.ContainerObserved{running("app")}}},
		check: func(t *testing.T, s corev1.PodStatus) {
			expect(t, s.Phase, corev1.PodRunning, "phase")
			expect(t, s.InitContainerStatuses[0].Ready, true, "init ready")
			expect(t, condStatus(s, corev1.PodInitialized), corev1.ConditionTrue, "Initialized")
		},
	}, {
		name: "sidecar running but not started yet: Pending",
		in: PodInputs{Pod: func() *corev1.Pod {
			p := withSidecar.DeepCopy()
			p.Spec.InitContainers[0].StartupProbe = &corev1.Probe{}
			return p
		}(), Verdict: admitted(), Observed: &schemas.PodObserved{Sandbox: readySandbox(),
			InitContainers: []schemas.ContainerObserved{running("side")}, Containers: []schemas.ContainerObserved{waiting("app", ReasonPodInitializing)}}},
		check: func(t *testing.T, s corev1.PodStatus) {
			expect(t, s.Phase, corev1.PodPending, "phase")
			expect(t, condStatus(s, corev1.PodInitialized), corev1.ConditionFalse, "Initialized")
		},
	}, {
		name: "sidecar and app running: Running, sidecar counts for ContainersReady",
		in: PodInputs{Pod: withSidecar, Verdict: admitted(), Observed: &schemas.PodObserved{Sandbox: readySandbox(),
			InitContainers: []schemas.ContainerObserved{running("side")}, Containers: []schemas.ContainerObserved{running("app")}}},
		check: func(t *testing.T, s corev1.PodStatus) {
			expect(t, s.Phase, corev1.PodRunning, "phase")
			expect(t, s.InitContainerStatuses[0].Ready, true, "sidecar ready")
			expect(t, condStatus(s, corev1.ContainersReady), corev1.ConditionTrue, "ContainersReady")
		},
	}, {
		name: "sidecar still running after the app completed (Never): Succeeded",
		in: PodInputs{Pod: withSidecar, Verdict: admitted(), Observed: torndown(&schemas.PodObserved{Sandbox: readySandbox(),
			InitContainers: []schemas.ContainerObserved{exited("side", 137)}, Containers: []schemas.ContainerObserved{exited("app", 0)}})},
		check: func(t *testing.T, s corev1.PodStatus) { expect(t, s.Phase, corev1.PodSucceeded, "phase") },
	}, {
		name: "runtime finished a deleted pod: Failed, TerminatePod rules",
		in: PodInputs{Pod: testPod(corev1.RestartPolicyAlways, "app", "other"), Verdict: admitted(),
			Observed: &schemas.PodObserved{Terminated: true, Sandbox: &schemas.SandboxObserved{ID: "sb1"},
				Containers: []schemas.ContainerObserved{exited("app", 143), waiting("other", "")}},
			Old: &corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: "10.88.0.5"}}, PodIP: "10.88.0.5"}},
		check: func(t *testing.T, s corev1.PodStatus) {
			expect(t, s.Phase, corev1.PodFailed, "phase")
			expect(t, s.ContainerStatuses[1].State.Terminated.Reason, ReasonContainerStatusUnknown, "never-started container")
			expect(t, s.PodIP, "10.88.0.5", "pod IP kept after the sandbox stopped")
		},
	}, {
		name: "static pod finished by the runtime keeps a non-terminal phase (kubelet #116484)",
		in: PodInputs{Pod: static, Static: true, Verdict: admitted(),
			Observed: &schemas.PodObserved{Terminated: true, Containers: []schemas.ContainerObserved{exited("app", 143)}}},
		check: func(t *testing.T, s corev1.PodStatus) { expect(t, s.Phase, corev1.PodRunning, "phase") },
	}, {
		name: "eviction while containers run: phase held until they stop",
		in: PodInputs{Pod: testPod(corev1.RestartPolicyAlways, "app"), Verdict: admitted(), Observed: obs(readySandbox(), running("app")),
			Eviction: &schemas.PodEviction{Reason: "Evicted", Message: "The node was low on resource: memory."},
			Old:      &corev1.PodStatus{Phase: corev1.PodRunning}},
		check: func(t *testing.T, s corev1.PodStatus) {
			expect(t, s.Phase, corev1.PodRunning, "phase")
			expect(t, condStatus(s, corev1.DisruptionTarget), corev1.ConditionTrue, "DisruptionTarget")
		},
	}, {
		name: "eviction done: Failed, reason Evicted",
		in: PodInputs{Pod: testPod(corev1.RestartPolicyAlways, "app"), Verdict: admitted(),
			Observed: &schemas.PodObserved{Terminated: true, Containers: []schemas.ContainerObserved{exited("app", 137)}},
			Eviction: &schemas.PodEviction{Reason: "Evicted", Message: "The node was low on resource: memory."},
			Old:      &corev1.PodStatus{Phase: corev1.PodRunning}},
		check: func(t *testing.T, s corev1.PodStatus) {
			expect(t, s.Phase, corev1.PodFailed, "phase")
			expect(t, s.Reason, "Evicted", "reason")
			expect(t, s.Message, "The node was low on resource: memory.", "message")
			expect(t, cond(s, corev1.DisruptionTarget).Reason, corev1.PodReasonTerminationByKubelet, "DisruptionTarget reason")
			expect(t, condStatus(s, corev1.PodReady), corev1.ConditionFalse, "Ready")
		},
	}, {
		name: "preempted for a critical pod: Failed, reason Preempting, the kubelet's condition",
		in: PodInputs{Pod: testPod(corev1.RestartPolicyAlways, "app"),
			Verdict:  &schemas.AdmissionVerdict{Preempted: true, Reason: schemas.ReasonPreempting, Message: schemas.MessagePreempted},
			Observed: &schemas.PodObserved{Terminated: true, Containers: []schemas.ContainerObserved{exited("app", 137)}},
			Old:      &corev1.PodStatus{Phase: corev1.PodRunning}},
		check: func(t *testing.T, s corev1.PodStatus) {
			expect(t, s.Phase, corev1.PodFailed, "phase")
			expect(t, s.Reason, "Preempting", "reason")
			expect(t, s.Message, "Preempted in order to admit critical pod", "message")
			expect(t, cond(s, corev1.DisruptionTarget).Message, "Pod was preempted by Kubelet to accommodate a critical pod.", "DisruptionTarget message")
			if s.ContainerStatuses[0].State.Terminated == nil {
				t.Errorf("container state %+v, want terminated (not a rejection's empty status)", s.ContainerStatuses[0].State)
			}
		},
	}, {
		name: "never backwards: a terminated container (Never) never reads running again",
		in: PodInputs{Pod: testPod(corev1.RestartPolicyNever, "app"), Verdict: admitted(), Observed: obs(readySandbox(), running("app")),
			Old: &corev1.PodStatus{Phase: corev1.PodSucceeded, ContainerStatuses: []corev1.ContainerStatus{{Name: "app", RestartCount: 0,
				State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed"}}}}}},
		check: func(t *testing.T, s corev1.PodStatus) {
			expect(t, s.Phase, corev1.PodSucceeded, "phase")
			if s.ContainerStatuses[0].State.Terminated == nil {
				t.Errorf("container went from terminated to %+v", s.ContainerStatuses[0].State)
			}
		},
	}, {
		name: "never backwards: restart count never decreases, phase never leaves Failed",
		in: PodInputs{Pod: testPod(corev1.RestartPolicyAlways, "app"), Verdict: admitted(), Observed: obs(readySandbox(), running("app")),
			Old: &corev1.PodStatus{Phase: corev1.PodFailed, Reason: "Evicted", ContainerStatuses: []corev1.ContainerStatus{{Name: "app", RestartCount: 5,
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}}},
		check: func(t *testing.T, s corev1.PodStatus) {
			expect(t, s.Phase, corev1.PodFailed, "phase")
			expect(t, s.Reason, "Evicted", "reason")
			expect(t, s.ContainerStatuses[0].RestartCount, int32(5), "restartCount")
		},
	}, {
		name: "a running container that vanished from the runtime: last state unknown, restart counted",
		in: PodInputs{Pod: testPod(corev1.RestartPolicyAlways, "app"), Verdict: admitted(), Observed: obs(readySandbox()),
			Old: &corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{Name: "app", RestartCount: 1,
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}}},
		check: func(t *testing.T, s corev1.PodStatus) {
			cs := s.ContainerStatuses[0]
			expect(t, cs.LastTerminationState.Terminated.Reason, ReasonContainerStatusUnknown, "last state")
			expect(t, cs.RestartCount, int32(2), "restartCount")
		},
	}, {
		name: "QoS Guaranteed",
		in:   PodInputs{Pod: guaranteed, Verdict: admitted()},
		check: func(t *testing.T, s corev1.PodStatus) {
			expect(t, s.QOSClass, corev1.PodQOSGuaranteed, "qos")
			expect(t, s.ContainerStatuses[0].Resources.Limits.Cpu().String(), "100m", "container resources")
		},
	}, {
		name:  "QoS Burstable",
		in:    PodInputs{Pod: burstable, Verdict: admitted()},
		check: func(t *testing.T, s corev1.PodStatus) { expect(t, s.QOSClass, corev1.PodQOSBurstable, "qos") },
	}, {
		name: "host network: pod IP is the node's",
		in: PodInputs{Pod: hostNet, Verdict: admitted(), HostIPs: []string{"192.168.1.10"},
			Observed: obs(&schemas.SandboxObserved{ID: "sb", Ready: true}, running("app"))},
		check: func(t *testing.T, s corev1.PodStatus) {
			expect(t, s.PodIP, "192.168.1.10", "podIP")
			expect(t, condStatus(s, corev1.PodReadyToStartContainers), corev1.ConditionTrue, "PodReadyToStartContainers")
		},
	}, {
		name: "dual-stack sandbox: primary family first, one per family",
		in: PodInputs{Pod: testPod(corev1.RestartPolicyAlways, "app"), Verdict: admitted(), HostIPs: []string{"192.168.1.10"},
			Observed: obs(&schemas.SandboxObserved{ID: "sb", Ready: true, IPs: []string{"fd00::5", "10.88.0.5", "10.88.0.6"}}, running("app"))},
		check: func(t *testing.T, s corev1.PodStatus) {
			expect(t, len(s.PodIPs), 2, "podIPs")
			expect(t, s.PodIPs[0].IP, "10.88.0.5", "primary")
			expect(t, s.PodIPs[1].IP, "fd00::5", "secondary")
		},
	}, {
		name: "start time and transition times stay",
		in: PodInputs{Pod: testPod(corev1.RestartPolicyAlways, "app"), Verdict: admitted(), Observed: obs(readySandbox(), running("app")),
			Old: &corev1.PodStatus{Phase: corev1.PodRunning, StartTime: ptr.To(metav1.NewTime(t0.Add(-time.Hour))),
				Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(t0.Add(-30 * time.Minute))}}}},
		check: func(t *testing.T, s corev1.PodStatus) {
			expect(t, s.StartTime.Time, t0.Add(-time.Hour), "startTime")
			expect(t, cond(s, corev1.PodReady).LastTransitionTime.Time, t0.Add(-30*time.Minute), "Ready lastTransitionTime")
			expect(t, cond(s, corev1.ContainersReady).LastTransitionTime.Time, t0, "new condition's lastTransitionTime")
		},
	}, {
		name: "long termination messages are cut to the kubelet's budget",
		in: PodInputs{Pod: testPod(corev1.RestartPolicyNever, "app"), Verdict: admitted(), Observed: obs(readySandbox(), func() schemas.ContainerObserved {
			c := exited("app", 1)
			c.State.Terminated.Message = strings.Repeat("x", 20000)
			return c
		}())},
		check: func(t *testing.T, s corev1.PodStatus) {
			expect(t, len(s.ContainerStatuses[0].State.Terminated.Message), maxPodTerminationMessageLogLength, "message length")
		},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.in.Now.IsZero() {
				tc.in.Now = t0
			}
			s := ComputePodStatus(tc.in)
			tc.check(t, s)
			// Computing again from the result changes nothing: a restarted
			// daemon writes nothing when nothing happened.
			again := tc.in
			again.Old = &s
			again.Now = t0.Add(time.Hour)
			s2 := ComputePodStatus(again)
			if !equalStatus(s, s2) {
				t.Errorf("recomputing from the written status changed it:\nfirst:  %+v\nsecond: %+v", s, s2)
			}
		})
	}
}

func equalStatus(a, b corev1.PodStatus) bool {
	pa, _, _ := podStatusPatch("x", a, b)
	return string(pa) == `{"metadata":{"uid":"x"}}`
}

func expect[T comparable](t *testing.T, got, want T, what string) {
	t.Helper()
	if got != want {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}

func TestContainerShouldRestart(t *testing.T) {
	never := corev1.ContainerRestartPolicyNever
	rules := corev1.Container{Name: "c", RestartPolicy: &never, RestartPolicyRules: []corev1.ContainerRestartRule{{
		Action:    corev1.ContainerRestartRuleActionRestart,
		ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: corev1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}},
	}}}
	tests := []struct {
		name   string
		c      corev1.Container
		policy corev1.RestartPolicy
		code   int32
		want   bool
	}{
		{"pod Always", corev1.Container{}, corev1.RestartPolicyAlways, 0, true},
		{"pod OnFailure, exit 0", corev1.Container{}, corev1.RestartPolicyOnFailure, 0, false},
		{"pod OnFailure, exit 1", corev1.Container{}, corev1.RestartPolicyOnFailure, 1, true},
		{"pod Never", corev1.Container{}, corev1.RestartPolicyNever, 1, false},
		{"rule matches: restart", rules, corev1.RestartPolicyAlways, 42, true},
		{"rule does not match: container policy Never", rules, corev1.RestartPolicyAlways, 1, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := containerShouldRestart(tc.c, corev1.PodSpec{RestartPolicy: tc.policy}, tc.code); got != tc.want {
				t.Errorf("containerShouldRestart = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestMergePodStatus(t *testing.T) {
	api := corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{
		{Type: "example.com/lb", Status: corev1.ConditionTrue},
		{Type: corev1.PodReady, Status: corev1.ConditionFalse},
	}}
	ours := corev1.PodStatus{Phase: corev1.PodFailed, Conditions: []corev1.PodCondition{
		{Type: corev1.PodReady, Status: corev1.ConditionTrue},
		{Type: "example.com/lb", Status: corev1.ConditionFalse},
	}}
	m := mergePodStatus(api, ours)
	expect(t, m.Phase, corev1.PodFailed, "phase")
	expect(t, condStatus(m, "example.com/lb"), corev1.ConditionTrue, "a condition the node does not own stays as the API has it")
	expect(t, condStatus(m, corev1.PodReady), corev1.ConditionFalse, "a terminal pod is never ready")
	expect(t, cond(m, corev1.PodReady).Reason, ReasonPodFailed, "Ready reason")

	back := mergePodStatus(corev1.PodStatus{Phase: corev1.PodSucceeded}, corev1.PodStatus{Phase: corev1.PodRunning})
	expect(t, back.Phase, corev1.PodSucceeded, "the API's terminal phase stays")
}

func TestPodStatusPatch(t *testing.T) {
	old := corev1.PodStatus{Phase: corev1.PodPending}
	patch, unchanged, err := podStatusPatch("u1", old, old)
	if err != nil || !unchanged {
		t.Fatalf("same status: unchanged=%v err=%v patch=%s", unchanged, err, patch)
	}
	patch, unchanged, err = podStatusPatch("u1", old, corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1"})
	if err != nil || unchanged {
		t.Fatalf("changed status: unchanged=%v err=%v", unchanged, err)
	}
	for _, want := range []string{`"uid":"u1"`, `"phase":"Running"`, `"podIP":"10.0.0.1"`} {
		if !strings.Contains(string(patch), want) {
			t.Errorf("patch %s lacks %s", patch, want)
		}
	}
}
