package runtime

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/schemas"
)

// ctr is a CRI container of the test pod: name, state and exit code, in
// sandbox sb, created at minute n.
func ctr(pod *corev1.Pod, name, sb, state string, exit int32, n int) *containerInfo {
	st := map[string]runtimeapi.ContainerState{
		"running": runtimeapi.ContainerState_CONTAINER_RUNNING,
		"exited":  runtimeapi.ContainerState_CONTAINER_EXITED,
		"created": runtimeapi.ContainerState_CONTAINER_CREATED,
	}[state]
	c := &containerInfo{
		ID: fmt.Sprintf("%s-%s-%d", sb, name, n), Name: name, SandboxID: sb, State: st, ExitCode: exit,
		CreatedAt: time.Unix(int64(n)*60, 0),
	}
	if spec := specOf(pod, name); spec != nil {
		c.Hash = hashContainer(spec)
	}
	return c
}

func runtimeOf(sbs []*sandboxInfo, cs ...*containerInfo) *podRuntime {
	pr := &podRuntime{UID: "uid", Sandboxes: sbs, Containers: cs}
	sort.SliceStable(pr.Containers, func(i, j int) bool { return pr.Containers[i].CreatedAt.After(pr.Containers[j].CreatedAt) })
	return pr
}

func readySB(id string, attempt uint32) *sandboxInfo {
	return &sandboxInfo{ID: id, Attempt: attempt, Ready: true, IPs: []string{"10.0.0.2"}}
}

func deadSB(id string, attempt uint32) *sandboxInfo {
	return &sandboxInfo{ID: id, Attempt: attempt}
}

// summary renders actions compactly: create(attempt) kill[...] start[...]
// init-done terminal(reason).
func summary(a podActions) string {
	var parts []string
	if a.CreateSandbox {
		parts = append(parts, fmt.Sprintf("create(%d)", a.Attempt))
	}
	if len(a.StopSandboxes) > 0 {
		var ids []string
		for _, s := range a.StopSandboxes {
			ids = append(ids, s.ID)
		}
		parts = append(parts, "stopsb["+strings.Join(ids, ",")+"]")
	}
	if len(a.Kill) > 0 {
		var ids []string
		for _, k := range a.Kill {
			ids = append(ids, k.C.ID)
		}
		parts = append(parts, "kill["+strings.Join(ids, ",")+"]")
	}
	if len(a.Start) > 0 {
		var names []string
		for _, s := range a.Start {
			n := s.Spec.Name
			if s.Existing != nil {
				n += "(existing)"
			}
			if s.Dead != nil {
				n += "(after " + s.Dead.ID + ")"
			}
			if s.Replace != nil {
				n += "(replacing " + s.Replace.ID + ")"
			}
			names = append(names, n)
		}
		parts = append(parts, "start["+strings.Join(names, ",")+"]")
	}
	if a.InitDone {
		parts = append(parts, "init-done")
	}
	if a.Terminal {
		parts = append(parts, "terminal("+a.TerminalReason+")")
	}
	return strings.Join(parts, " ")
}

func TestComputePodActions(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	base := newPod("p", busybox("a", ""), busybox("b", ""))
	withInit := base.DeepCopy()
	withInit.Spec.InitContainers = []corev1.Container{busybox("i1", ""), busybox("i2", "")}
	withSidecar := base.DeepCopy()
	side := busybox("side", "")
	side.RestartPolicy = &always
	withSidecar.Spec.InitContainers = []corev1.Container{side, busybox("i1", "")}
	withProbedSidecar := withSidecar.DeepCopy()
	withProbedSidecar.Spec.InitContainers[0].StartupProbe = &corev1.Probe{}
	never := func(p *corev1.Pod) *corev1.Pod {
		p = p.DeepCopy()
		p.Spec.RestartPolicy = corev1.RestartPolicyNever
		return p
	}
	onFailure := func(p *corev1.Pod) *corev1.Pod {
		p = p.DeepCopy()
		p.Spec.RestartPolicy = corev1.RestartPolicyOnFailure
		return p
	}
	changedImage := base.DeepCopy()
	changedImage.Spec.Containers[0].Image = "other:1"
	hostNet := base.DeepCopy()
	hostNet.Spec.HostNetwork = true
	// Container restart rules (on by default since 1.35): restart a on
	// exit 42 although the pod and the container say Never.
	neverC := corev1.ContainerRestartPolicyNever
	withRule := never(base)
	withRule.Spec.Containers[0].RestartPolicy = &neverC
	withRule.Spec.Containers[0].RestartPolicyRules = []corev1.ContainerRestartRule{{
		Action:    corev1.ContainerRestartRuleActionRestart,
		ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: corev1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}},
	}}

	noProbes := func(string, string, string) *schemas.ProbeResult { return nil }
	probes := func(results ...*schemas.ProbeResult) probeLookup {
		return func(c, kind, id string) *schemas.ProbeResult {
			for _, r := range results {
				if r.Container == c && r.Probe == kind && trimContainerID(r.ContainerID) == id {
					return r
				}
			}
			return nil
		}
	}
	sb1 := readySB("sb1", 0)

	for _, tc := range []struct {
		name  string
		pod   *corev1.Pod
		pr    *podRuntime
		probe probeLookup
		want  string
	}{
		{"new pod", base, runtimeOf(nil), nil, "create(0) start[a,b]"},
		{"new pod with init", withInit, runtimeOf(nil), nil, "create(0) start[i1]"},
		{"all running", base, runtimeOf([]*sandboxInfo{sb1},
			ctr(base, "a", "sb1", "running", 0, 1), ctr(base, "b", "sb1", "running", 0, 2)), nil, "init-done"},
		{"one missing", base, runtimeOf([]*sandboxInfo{sb1},
			ctr(base, "a", "sb1", "running", 0, 1)), nil, "start[b] init-done"},
		{"created never started is started, not duplicated", base, runtimeOf([]*sandboxInfo{sb1},
			ctr(base, "a", "sb1", "running", 0, 1), ctr(base, "b", "sb1", "created", 0, 2)), nil, "start[b(existing)] init-done"},
		{"crashed under Always restarts after back-off", base, runtimeOf([]*sandboxInfo{sb1},
			ctr(base, "a", "sb1", "exited", 1, 1), ctr(base, "b", "sb1", "running", 0, 2)), nil, "start[a(after sb1-a-1)] init-done"},
		{"start cut short by the caller is replaced, even under Never", never(base), runtimeOf([]*sandboxInfo{sb1},
			func() *containerInfo {
				c := ctr(base, "a", "sb1", "exited", 128, 1)
				c.Reason, c.Message = "StartError", "failed to create containerd task: failed to create shim task: context canceled: unknown"
				return c
			}(), ctr(base, "b", "sb1", "running", 0, 2)), nil, "start[a(replacing sb1-a-1)] init-done"},
		{"a real start error is a crash", never(base), runtimeOf([]*sandboxInfo{sb1},
			func() *containerInfo {
				c := ctr(base, "a", "sb1", "exited", 128, 1)
				c.Reason, c.Message = "StartError", `exec: "nope": executable file not found in $PATH`
				return c
			}(), ctr(base, "b", "sb1", "running", 0, 2)), nil, "init-done"},
		{"exit 0 under OnFailure stays", onFailure(base), runtimeOf([]*sandboxInfo{sb1},
			ctr(base, "a", "sb1", "exited", 0, 1), ctr(base, "b", "sb1", "running", 0, 2)), nil, "init-done"},
		{"exit 1 under OnFailure restarts", onFailure(base), runtimeOf([]*sandboxInfo{sb1},
			ctr(base, "a", "sb1", "exited", 1, 1), ctr(base, "b", "sb1", "running", 0, 2)), nil, "start[a(after sb1-a-1)] init-done"},
		{"all done under Never", never(base), runtimeOf([]*sandboxInfo{sb1},
			ctr(base, "a", "sb1", "exited", 1, 1), ctr(base, "b", "sb1", "exited", 0, 2)), nil, "init-done terminal(Completed)"},
		{"restart rule matches under Never", withRule, runtimeOf([]*sandboxInfo{sb1},
			ctr(base, "a", "sb1", "exited", 42, 1), ctr(base, "b", "sb1", "running", 0, 2)), nil, "start[a(after sb1-a-1)] init-done"},
		{"restart rule does not match under Never", withRule, runtimeOf([]*sandboxInfo{sb1},
			ctr(base, "a", "sb1", "exited", 1, 1), ctr(base, "b", "sb1", "running", 0, 2)), nil, "init-done"},
		{"all succeeded under OnFailure", onFailure(base), runtimeOf([]*sandboxInfo{sb1},
			ctr(base, "a", "sb1", "exited", 0, 1), ctr(base, "b", "sb1", "exited", 0, 2)), nil, "init-done terminal(Completed)"},
		{"image changed: kill and restart", changedImage, runtimeOf([]*sandboxInfo{sb1},
			ctr(base, "a", "sb1", "running", 0, 1), ctr(base, "b", "sb1", "running", 0, 2)), nil, "kill[sb1-a-1] init-done"},
		{"liveness failure of this instance kills", base, runtimeOf([]*sandboxInfo{sb1},
			ctr(base, "a", "sb1", "running", 0, 1), ctr(base, "b", "sb1", "running", 0, 2)),
			probes(&schemas.ProbeResult{Container: "a", Probe: schemas.ProbeLiveness, Result: schemas.ProbeFailure, ContainerID: "containerd://sb1-a-1"}),
			"kill[sb1-a-1] init-done"},
		{"liveness failure of an older instance is ignored", base, runtimeOf([]*sandboxInfo{sb1},
			ctr(base, "a", "sb1", "running", 0, 1), ctr(base, "b", "sb1", "running", 0, 2)),
			probes(&schemas.ProbeResult{Container: "a", Probe: schemas.ProbeLiveness, Result: schemas.ProbeFailure, ContainerID: "containerd://old"}),
			"init-done"},
		{"startup failure kills", base, runtimeOf([]*sandboxInfo{sb1},
			ctr(base, "a", "sb1", "running", 0, 1), ctr(base, "b", "sb1", "running", 0, 2)),
			probes(&schemas.ProbeResult{Container: "b", Probe: schemas.ProbeStartup, Result: schemas.ProbeFailure, ContainerID: "containerd://sb1-b-2"}),
			"kill[sb1-b-2] init-done"},
		{"first init running: wait", withInit, runtimeOf([]*sandboxInfo{sb1},
			ctr(withInit, "i1", "sb1", "running", 0, 1)), nil, ""},
		{"first init done: second", withInit, runtimeOf([]*sandboxInfo{sb1},
			ctr(withInit, "i1", "sb1", "exited", 0, 1)), nil, "start[i2]"},
		{"inits done: apps", withInit, runtimeOf([]*sandboxInfo{sb1},
			ctr(withInit, "i1", "sb1", "exited", 0, 1), ctr(withInit, "i2", "sb1", "exited", 0, 2)), nil, "start[a,b] init-done"},
		{"init failed under Always restarts", withInit, runtimeOf([]*sandboxInfo{sb1},
			ctr(withInit, "i1", "sb1", "exited", 1, 1)), nil, "start[i1(after sb1-i1-1)]"},
		{"init failed under Never fails the pod", never(withInit), runtimeOf([]*sandboxInfo{sb1},
			ctr(withInit, "i1", "sb1", "exited", 1, 1)), nil, "terminal(InitContainerFailed)"},
		{"init gone after the apps started (GC) is not rerun", withInit, runtimeOf([]*sandboxInfo{sb1},
			ctr(withInit, "a", "sb1", "running", 0, 3), ctr(withInit, "b", "sb1", "running", 0, 4)), nil, "init-done"},
		{"sidecar first", withSidecar, runtimeOf([]*sandboxInfo{sb1}), nil, "start[side]"},
		{"sidecar started: next init", withSidecar, runtimeOf([]*sandboxInfo{sb1},
			ctr(withSidecar, "side", "sb1", "running", 0, 1)), nil, "start[i1]"},
		{"sidecar with startup probe not yet started: wait", withProbedSidecar, runtimeOf([]*sandboxInfo{sb1},
			ctr(withSidecar, "side", "sb1", "running", 0, 1)), noProbes, ""},
		{"sidecar with startup probe succeeded: next", withProbedSidecar, runtimeOf([]*sandboxInfo{sb1},
			ctr(withSidecar, "side", "sb1", "running", 0, 1)),
			probes(&schemas.ProbeResult{Container: "side", Probe: schemas.ProbeStartup, Result: schemas.ProbeSuccess, ContainerID: "sb1-side-1"}),
			"start[i1]"},
		{"sidecar died beside the apps: restart it", withSidecar, runtimeOf([]*sandboxInfo{sb1},
			ctr(withSidecar, "side", "sb1", "exited", 137, 1), ctr(withSidecar, "i1", "sb1", "exited", 0, 2),
			ctr(withSidecar, "a", "sb1", "running", 0, 3), ctr(withSidecar, "b", "sb1", "running", 0, 4)),
			nil, "start[side(after sb1-side-1)] init-done"},
		{"apps done under Never with sidecar running", never(withSidecar), runtimeOf([]*sandboxInfo{sb1},
			ctr(withSidecar, "side", "sb1", "running", 0, 1), ctr(withSidecar, "i1", "sb1", "exited", 0, 2),
			ctr(withSidecar, "a", "sb1", "exited", 0, 3), ctr(withSidecar, "b", "sb1", "exited", 0, 4)),
			nil, "init-done terminal(Completed)"},
		{"sandbox died under Always: new attempt, start over", withInit, runtimeOf([]*sandboxInfo{deadSB("sb1", 0)},
			ctr(withInit, "i1", "sb1", "exited", 0, 1), ctr(withInit, "i2", "sb1", "exited", 0, 2),
			ctr(withInit, "a", "sb1", "exited", 137, 3)), nil, "create(1) start[i1]"},
		{"sandbox died under Never after running: over", never(base), runtimeOf([]*sandboxInfo{deadSB("sb1", 0)},
			ctr(base, "a", "sb1", "exited", 137, 1), ctr(base, "b", "sb1", "running", 0, 2)), nil, "terminal(SandboxLost)"},
		{"completed under OnFailure with its sandbox stopped: stays done", onFailure(base), runtimeOf([]*sandboxInfo{deadSB("sb1", 0)},
			ctr(base, "a", "sb1", "exited", 0, 1), ctr(base, "b", "sb1", "exited", 0, 2)), nil, "init-done terminal(Completed)"},
		{"sandbox without IP is recreated", base, runtimeOf([]*sandboxInfo{{ID: "sb1", Ready: true}}), nil, "create(1) stopsb[sb1] start[a,b]"},
		{"host network needs no IP", hostNet, runtimeOf([]*sandboxInfo{{ID: "sb1", Ready: true}},
			ctr(base, "a", "sb1", "running", 0, 1), ctr(base, "b", "sb1", "running", 0, 2)), nil, "init-done"},
		{"two ready sandboxes: the older stops, its containers die", base, runtimeOf([]*sandboxInfo{readySB("sb2", 1), readySB("sb1", 0)},
			ctr(base, "a", "sb1", "running", 0, 1), ctr(base, "a", "sb2", "running", 0, 2), ctr(base, "b", "sb2", "running", 0, 3)),
			nil, "stopsb[sb1] kill[sb1-a-1] init-done"},
		{"container not in the spec is killed", base, runtimeOf([]*sandboxInfo{sb1},
			ctr(base, "a", "sb1", "running", 0, 1), ctr(base, "b", "sb1", "running", 0, 2), ctr(base, "gone", "sb1", "running", 0, 3)),
			nil, "kill[sb1-gone-3] init-done"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			probe := tc.probe
			if probe == nil {
				probe = noProbes
			}
			if got := summary(computePodActions(tc.pod, tc.pr, probe)); got != tc.want {
				t.Fatalf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestKillRunningMessages(t *testing.T) {
	pod := newPod("p", busybox("a", ""))
	c := &pod.Spec.Containers[0]
	s := ctr(pod, "a", "sb", "running", 0, 1)
	grace := int64(7)
	fail := func(kind string) probeLookup {
		return func(_, k, _ string) *schemas.ProbeResult {
			if k != kind {
				return nil
			}
			return &schemas.ProbeResult{Result: schemas.ProbeFailure, TerminationGracePeriodSeconds: &grace}
		}
	}
	for _, tc := range []struct {
		kind    string
		restart bool
		want    string
	}{
		{schemas.ProbeLiveness, true, "Container a failed liveness probe, will be restarted"},
		{schemas.ProbeLiveness, false, "Container a failed liveness probe"},
		{schemas.ProbeStartup, true, "Container a failed startup probe, will be restarted"},
	} {
		k, ok := killRunning(c, s, fail(tc.kind), tc.restart)
		if !ok || k.Message != tc.want || k.Reason != "Unhealthy" || k.Grace == nil || *k.Grace != 7 {
			t.Errorf("%s restart=%v: %+v", tc.kind, tc.restart, k)
		}
	}
	changed := c.DeepCopy()
	changed.Image = "x:2"
	if k, ok := killRunning(changed, s, fail(""), false); !ok || k.Message != "Container a definition changed, will be restarted" {
		t.Errorf("changed spec: %+v", k)
	}
}
