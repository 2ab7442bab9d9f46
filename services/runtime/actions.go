package runtime

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/podutil"
	"github.com/nodelet/nodelet/schemas"
)

// containerToKill is a container computePodActions wants stopped.
type containerToKill struct {
	C       *containerInfo
	Reason  string // kubelet's kill reason, e.g. "Unhealthy" for probes
	Message string // Killing event message
	// Grace overrides the pod's grace period (a probe's own
	// terminationGracePeriodSeconds).
	Grace *int64
	// ForResize: killed to be started again at once with its resized
	// resources (resizePolicy RestartContainer, resizerestart.go).
	ForResize bool
}

// containerToStart is a container computePodActions wants started.
type containerToStart struct {
	Spec *corev1.Container
	Kind string
	// Existing is a container that was created but never started (the
	// runtime was killed between CreateContainer and StartContainer): it is
	// started instead of creating a duplicate.
	Existing *containerInfo
	// Dead is the container's last exited instance: the restart waits for
	// its back-off.
	Dead *containerInfo
	// Replace is an instance whose start was cut short by its caller
	// (nodelet-runtime killed during StartContainer): it never ran, so it
	// is removed and created again with the same restart count, without
	// back-off.
	Replace *containerInfo
	// Target is an ephemeral container's targetContainerName: it joins
	// that container's PID namespace.
	Target string
}

// podActions is what syncPod must do to bring a pod to its spec
// (the kubelet's computePodActions).
type podActions struct {
	// CreateSandbox: there is no usable sandbox; every container is killed
	// and the pod starts over in a new one with Attempt.
	CreateSandbox bool
	Attempt       uint32
	// Sandbox is the current ready sandbox (nil when one is created).
	Sandbox *sandboxInfo
	// StopSandboxes are other ready sandboxes of the pod (old or
	// duplicated ones).
	StopSandboxes []*sandboxInfo
	Kill          []containerToKill
	Start         []containerToStart
	// InitDone: every init container succeeded and every sidecar started;
	// app containers may run.
	InitDone bool
	// Terminal: the pod is done under its restartPolicy (or its sandbox is
	// gone under Never); what still runs is killed.
	Terminal        bool
	TerminalReason  string
	TerminalMessage string
}

// probeLookup returns the latest result of a container's probe of kind, if
// it is about the container instance id.
type probeLookup func(container, kind, id string) *schemas.ProbeResult

// actionsFor is computePodActions with the prober's latest results (the
// probes bucket, as the store holds it).
func (m *Daemon) actionsFor(pod *corev1.Pod, pr *podRuntime) podActions {
	uid := string(pod.UID)
	return computePodActions(pod, pr, func(container, kind, id string) *schemas.ProbeResult {
		return m.store.probe(uid, container, kind, id)
	})
}

// toStart lists the containers of the given kinds to start, in order.
func (a *podActions) toStart(kinds ...string) []containerToStart {
	var out []containerToStart
	for _, ts := range a.Start {
		if slices.Contains(kinds, ts.Kind) {
			out = append(out, ts)
		}
	}
	return out
}

// computePodActions compares pod with what runs (pr) and decides, as the
// kubelet's computePodActions (pkg/kubelet/kuberuntime/kuberuntime_manager.go).
// Start lists ephemeral containers first, then init containers and
// sidecars, then app containers: the order of SyncPod's steps 7, 8 and 9.
func computePodActions(pod *corev1.Pod, pr *podRuntime, probe probeLookup) podActions {
	var a podActions
	sb := pr.newestSandbox()
	if sb == nil {
		a.CreateSandbox = true
		a.Start = firstContainersToStart(pod, pr)
		return a
	}
	if !sb.Ready || (!pod.Spec.HostNetwork && len(sb.IPs) == 0) {
		// The sandbox is gone (or has no IP). A pod that was done in it is
		// never started again; one that must not restart is over.
		var t podActions
		t.Sandbox = sb
		evalContainers(pod, pr, sb, probe, &t)
		if t.Terminal {
			return podActions{Sandbox: sb, Terminal: true, TerminalReason: t.TerminalReason,
				TerminalMessage: t.TerminalMessage, InitDone: t.InitDone}
		}
		if pod.Spec.RestartPolicy == corev1.RestartPolicyNever && len(pr.Containers) > 0 {
			return podActions{Sandbox: sb, Terminal: true, TerminalReason: "SandboxLost",
				TerminalMessage: "the pod sandbox is gone and restartPolicy is Never"}
		}
		a.CreateSandbox, a.Attempt = true, sb.Attempt+1
		for _, c := range pr.active() {
			a.Kill = append(a.Kill, containerToKill{C: c, Message: "Pod sandbox changed, it will be killed and re-created."})
		}
		for _, s := range pr.Sandboxes {
			if s.Ready {
				a.StopSandboxes = append(a.StopSandboxes, s)
			}
		}
		a.Start = firstContainersToStart(pod, pr)
		return a
	}
	a.Sandbox = sb
	a.Start = ephemeralToStart(pod, pr)
	for _, s := range pr.Sandboxes[1:] {
		if s.Ready {
			a.StopSandboxes = append(a.StopSandboxes, s)
		}
	}
	// Only containers of the current sandbox count; anything still alive
	// elsewhere, or not in the spec, goes.
	inSpec := map[string]bool{}
	for _, c := range pod.Spec.InitContainers {
		inSpec[c.Name] = true
	}
	for _, c := range pod.Spec.Containers {
		inSpec[c.Name] = true
	}
	for _, c := range pod.Spec.EphemeralContainers {
		inSpec[c.Name] = true
	}
	for _, c := range pr.active() {
		if c.SandboxID != sb.ID || !inSpec[c.Name] {
			a.Kill = append(a.Kill, containerToKill{C: c, Message: fmt.Sprintf("Container %s is not part of the pod's current spec or sandbox", c.Name)})
		}
	}
	evalContainers(pod, pr, sb, probe, &a)
	return a
}

// ephemeralToStart is the kubelet's computePodActions for ephemeral
// containers (pkg/kubelet/kuberuntime/kuberuntime_manager.go): in a ready
// sandbox, each one the runtime has no instance of is started, even while
// init containers run; one that exists is never started again, whatever
// its exit. A created but never started instance (nodelet-runtime killed
// between CreateContainer and StartContainer) is started rather than
// duplicated.
func ephemeralToStart(pod *corev1.Pod, pr *podRuntime) []containerToStart {
	var out []containerToStart
	for i := range pod.Spec.EphemeralContainers {
		ec := &pod.Spec.EphemeralContainers[i]
		ts := containerToStart{Spec: (*corev1.Container)(&ec.EphemeralContainerCommon),
			Kind: schemas.ContainerKindEphemeral, Target: ec.TargetContainerName}
		switch s := pr.newest(ec.Name); {
		case s == nil:
		case s.created():
			ts.Existing = s
		default:
			continue
		}
		out = append(out, ts)
	}
	return out
}

// evalContainers decides, for the containers of sandbox sb, which to
// start or kill, whether init is done and whether the pod is over.
func evalContainers(pod *corev1.Pod, pr *podRuntime, sb *sandboxInfo, probe probeLookup, a *podActions) {
	policy := pod.Spec.RestartPolicy
	current := func(name string) *containerInfo {
		for _, c := range pr.Containers {
			if c.Name == name && c.SandboxID == sb.ID {
				return c
			}
		}
		return nil
	}
	// history is the newest instance in any sandbox: restarts and back-off
	// continue across sandboxes.
	history := func(name string) *containerInfo { return pr.newest(name) }

	appStarted := false
	for i := range pod.Spec.Containers {
		if current(pod.Spec.Containers[i].Name) != nil {
			appStarted = true
		}
	}

	// Init containers and sidecars, in order.
	a.InitDone = true
initLoop:
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		s := current(c.Name)
		if podutil.IsRestartableInit(c) {
			kind := schemas.ContainerKindSidecar
			switch {
			case s == nil:
				a.Start = append(a.Start, containerToStart{Spec: c, Kind: kind, Dead: deadOf(history(c.Name))})
			case s.created():
				a.Start = append(a.Start, containerToStart{Spec: c, Kind: kind, Existing: s})
			case s.exited():
				a.Start = append(a.Start, restartOf(c, kind, s))
			default: // running
				if k, ok := killRunning(c, s, probe, true); ok {
					a.Kill = append(a.Kill, k)
				} else if appStarted || sidecarStarted(c, s, probe) {
					continue
				}
			}
			if !appStarted {
				a.InitDone = false
				break initLoop
			}
			continue
		}
		if appStarted {
			continue // app containers ran: init is over, even if GC removed the init containers
		}
		a.InitDone = false
		switch {
		case s == nil:
			a.Start = append(a.Start, containerToStart{Spec: c, Kind: schemas.ContainerKindInit, Dead: deadOf(history(c.Name))})
		case s.created():
			a.Start = append(a.Start, containerToStart{Spec: c, Kind: schemas.ContainerKindInit, Existing: s})
		case s.running():
			if k, ok := killRunning(c, s, probe, policy != corev1.RestartPolicyNever); ok {
				a.Kill = append(a.Kill, k)
			}
		case interruptedStart(s):
			a.Start = append(a.Start, restartOf(c, schemas.ContainerKindInit, s))
		case s.ExitCode == 0:
			a.InitDone = true
			continue
		case policy == corev1.RestartPolicyNever:
			a.Terminal = true
			a.TerminalReason = "InitContainerFailed"
			a.TerminalMessage = fmt.Sprintf("init container %q exited with code %d and restartPolicy is Never", c.Name, s.ExitCode)
		default:
			a.Start = append(a.Start, containerToStart{Spec: c, Kind: schemas.ContainerKindInit, Dead: s})
		}
		break initLoop
	}
	if a.Terminal || !a.InitDone {
		return
	}

	// App containers.
	done := 0
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		s := current(c.Name)
		switch {
		case s == nil:
			a.Start = append(a.Start, containerToStart{Spec: c, Kind: schemas.ContainerKindApp, Dead: deadOf(history(c.Name))})
		case s.created():
			a.Start = append(a.Start, containerToStart{Spec: c, Kind: schemas.ContainerKindApp, Existing: s})
		case s.running():
			if k, ok := killRunning(c, s, probe, policy != corev1.RestartPolicyNever); ok {
				a.Kill = append(a.Kill, k)
			}
		case interruptedStart(s) || podutil.ContainerShouldRestart(c, &pod.Spec, s.ExitCode):
			// The container's own restart policy and rules first, then
			// the pod's (kubelet computePodActions, ContainerRestartRules).
			a.Start = append(a.Start, restartOf(c, schemas.ContainerKindApp, s))
		default:
			done++
		}
	}
	if len(pod.Spec.Containers) > 0 && done == len(pod.Spec.Containers) {
		a.Terminal = true
		a.TerminalReason = "Completed"
		a.TerminalMessage = fmt.Sprintf("all containers exited and restartPolicy is %s", policy)
	}
}

// firstContainersToStart is what a fresh sandbox starts with: the first
// init container (or sidecar), else the app containers.
func firstContainersToStart(pod *corev1.Pod, pr *podRuntime) []containerToStart {
	if len(pod.Spec.InitContainers) > 0 {
		c := &pod.Spec.InitContainers[0]
		kind := schemas.ContainerKindInit
		if podutil.IsRestartableInit(c) {
			kind = schemas.ContainerKindSidecar
		}
		return []containerToStart{{Spec: c, Kind: kind}}
	}
	var out []containerToStart
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		if last := pr.newest(c.Name); last != nil && last.exited() &&
			pod.Spec.RestartPolicy == corev1.RestartPolicyOnFailure && last.ExitCode == 0 {
			continue // succeeded once: OnFailure does not run it again
		}
		out = append(out, containerToStart{Spec: c, Kind: schemas.ContainerKindApp})
	}
	return out
}

// killRunning says whether running container s of spec c must be killed:
// its spec changed, or the prober reports its liveness or startup probe
// failed. restart tells the event message whether it comes back.
func killRunning(c *corev1.Container, s *containerInfo, probe probeLookup, restart bool) (containerToKill, bool) {
	k := containerToKill{C: s}
	if s.Hash != "" && s.Hash != hashContainer(c) {
		k.Message = fmt.Sprintf("Container %s definition changed, will be restarted", c.Name)
		return k, true
	}
	for _, kind := range []string{schemas.ProbeLiveness, schemas.ProbeStartup} {
		r := probe(c.Name, kind, s.ID)
		if r == nil || r.Result != schemas.ProbeFailure {
			continue
		}
		k.Reason = "Unhealthy"
		k.Message = fmt.Sprintf("Container %s failed %s probe", c.Name, kind)
		if restart {
			k.Message += ", will be restarted"
		}
		k.Grace = r.TerminationGracePeriodSeconds
		return k, true
	}
	return containerToKill{}, false
}

// sidecarStarted: a running sidecar counts as started once its startup
// probe (if any) succeeded, as the kubelet's Started field.
func sidecarStarted(c *corev1.Container, s *containerInfo, probe probeLookup) bool {
	if c.StartupProbe == nil {
		return true
	}
	r := probe(c.Name, schemas.ProbeStartup, s.ID)
	return r != nil && r.Result == schemas.ProbeSuccess
}

// restartOf starts c again after its exited instance s.
func restartOf(c *corev1.Container, kind string, s *containerInfo) containerToStart {
	if interruptedStart(s) {
		return containerToStart{Spec: c, Kind: kind, Replace: s}
	}
	return containerToStart{Spec: c, Kind: kind, Dead: s}
}

// interruptedStart: the container never ran because its StartContainer
// was cancelled by the caller (containerd reports StartError with the
// cancellation), not because of anything in the container.
func interruptedStart(c *containerInfo) bool {
	if !c.exited() || !c.StartedAt.IsZero() || c.Reason != "StartError" {
		return false
	}
	for _, s := range []string{"context canceled", "signal: killed"} {
		if strings.Contains(c.Message, s) {
			return true
		}
	}
	return false
}

func deadOf(c *containerInfo) *containerInfo {
	if c != nil && c.exited() {
		return c
	}
	return nil
}

// trimContainerID drops the runtime prefix of a status container ID.
func trimContainerID(id string) string { return podutil.RawContainerID(id) }
