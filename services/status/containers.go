package status

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/podutil"
	"github.com/nodelet/nodelet/schemas"
)

// containerInputs carries what every container of a pod needs to know
// about the pod while its status is converted.
type containerInputs struct {
	pod *corev1.Pod
	// known: the runtime has reported the pod at all.
	known bool
	// anyAppCreated: a regular container exists in the runtime, so every
	// regular init container must have completed.
	anyAppCreated bool
	// rro: the pod's runtime handler supports recursive read-only mounts
	// (PodObserved.recursiveReadOnlyMounts).
	rro bool
}

// statuses is convertToAPIContainerStatuses over the runtime's report: a
// default waiting state for containers the runtime has not reported, the
// runtime's state for the others, and the kubelet's inferences when a
// container the status saw running has disappeared.
func (c containerInputs) statuses(specs []corev1.Container, observed []schemas.ContainerObserved, old []corev1.ContainerStatus, hasInit, isInit bool) []corev1.ContainerStatus {
	if len(specs) == 0 {
		return nil
	}
	defaultReason := ReasonContainerCreating
	if hasInit {
		defaultReason = ReasonPodInitializing
	}
	out := make([]corev1.ContainerStatus, 0, len(specs))
	for i := range specs {
		spec := &specs[i]
		st := corev1.ContainerStatus{
			Name:         spec.Name,
			Image:        spec.Image,
			State:        corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: defaultReason}},
			VolumeMounts: volumeMountStatuses(spec, c.rro),
		}
		o := statusByName(old, spec.Name)
		if o != nil {
			if o.State.Terminated != nil {
				st = *o.DeepCopy()
			} else {
				st.RestartCount = o.RestartCount
				st.LastTerminationState = *o.LastTerminationState.DeepCopy()
			}
		}
		if ob := observedByName(observed, spec.Name); ob != nil {
			st = c.fromObserved(spec, ob, o, defaultReason)
		} else if c.known {
			c.inferMissing(&st, o, spec, isInit, defaultReason)
		}
		if ob := observedByName(observed, spec.Name); ob != nil && ob.Resources != nil && st.State.Running != nil {
			st.Resources = ob.Resources.DeepCopy()
		} else if len(spec.Resources.Requests) > 0 || len(spec.Resources.Limits) > 0 {
			st.Resources = spec.Resources.DeepCopy()
		}
		if ob := observedByName(observed, spec.Name); ob != nil && ob.Allocated != nil {
			// The runtime's allocation: the previous resources while a
			// resize is pending (the kubelet's allocatedResources).
			if len(ob.Allocated.Requests) > 0 {
				st.AllocatedResources = ob.Allocated.Requests.DeepCopy()
			}
			if st.State.Running == nil {
				st.Resources = ob.Allocated.DeepCopy()
			}
		} else if len(spec.Resources.Requests) > 0 {
			st.AllocatedResources = spec.Resources.Requests.DeepCopy()
		}
		out = append(out, st)
	}
	return out
}

// ephemeralStatuses is convertToAPIContainerStatuses over the pod's
// ephemeral containers, as the kubelet's convertStatusToAPIStatus calls it:
// the same rules as for app containers (waiting, running, terminated, the
// last state kept); probes never apply, so Ready stays false.
func (c containerInputs) ephemeralStatuses(obs *schemas.PodObserved, old *corev1.PodStatus) []corev1.ContainerStatus {
	eph := c.pod.Spec.EphemeralContainers
	if len(eph) == 0 {
		return nil
	}
	specs := make([]corev1.Container, 0, len(eph))
	for i := range eph {
		specs = append(specs, corev1.Container(eph[i].EphemeralContainerCommon))
	}
	var observed []schemas.ContainerObserved
	if obs != nil {
		observed = obs.EphemeralContainers
	}
	return c.statuses(specs, observed, old.EphemeralContainerStatuses, len(c.pod.Spec.InitContainers) > 0, false)
}

// fromObserved converts the runtime's view of one container.
func (c containerInputs) fromObserved(spec *corev1.Container, ob *schemas.ContainerObserved, old *corev1.ContainerStatus, defaultReason string) corev1.ContainerStatus {
	st := corev1.ContainerStatus{
		Name:                 spec.Name,
		Image:                ob.Image,
		ImageID:              ob.ImageID,
		ContainerID:          ob.ContainerID,
		RestartCount:         ob.RestartCount,
		State:                *ob.State.DeepCopy(),
		LastTerminationState: *ob.LastTerminationState.DeepCopy(),
		VolumeMounts:         volumeMountStatuses(spec, c.rro),
	}
	if st.Image == "" {
		st.Image = spec.Image
	}
	switch {
	case st.State.Running == nil && st.State.Terminated == nil && st.State.Waiting == nil:
		// An unknown state collapses to waiting, as in the kubelet.
		st.State.Waiting = &corev1.ContainerStateWaiting{}
	case st.State.Waiting != nil && st.State.Waiting.Reason == "" && st.ContainerID == "":
		// Not created yet and the runtime gave no reason: the kubelet's default.
		st.State.Waiting.Reason = defaultReason
	}
	if st.State.Terminated != nil && st.State.Terminated.ContainerID == "" {
		st.State.Terminated.ContainerID = st.ContainerID
	}
	if old != nil {
		if st.LastTerminationState.Terminated == nil && st.LastTerminationState.Running == nil &&
			st.LastTerminationState.Waiting == nil && old.ContainerID != st.ContainerID && old.State.Terminated != nil {
			// The previous instance is gone from the runtime (garbage
			// collected) but was seen terminated: it is the last state.
			st.LastTerminationState.Terminated = old.State.Terminated.DeepCopy()
		} else if st.LastTerminationState.Terminated == nil && old.LastTerminationState.Terminated != nil && old.ContainerID == st.ContainerID {
			st.LastTerminationState = *old.LastTerminationState.DeepCopy()
		}
		if st.State.Running != nil && old.Started != nil && old.ContainerID == st.ContainerID {
			st.Started = old.Started
		}
	}
	return st
}

// inferMissing handles a container the runtime no longer (or not yet)
// lists although it knows the pod.
func (c containerInputs) inferMissing(st *corev1.ContainerStatus, old *corev1.ContainerStatus, spec *corev1.Container, isInit bool, defaultReason string) {
	if isInit && c.anyAppCreated && !podutil.IsRestartableInit(spec) && st.State.Waiting != nil {
		// The regular containers exist, so this init container completed.
		st.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			Reason: "Completed", ExitCode: 0,
			Message: "Unable to get init container status from container runtime and pod has been initialized, treat it as exited normally",
		}}
		return
	}
	if old == nil || old.State.Terminated != nil || old.State.Running == nil {
		return
	}
	if st.State.Waiting == nil || st.State.Waiting.Reason != defaultReason || st.LastTerminationState.Terminated != nil {
		return
	}
	// It was running and vanished: it stopped, we do not know how.
	st.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{
		Reason: ReasonContainerStatusUnknown, ExitCode: 137,
		Message: "The container could not be located when the pod was deleted.  The container used to be Running",
	}
	if c.pod.DeletionTimestamp == nil {
		st.RestartCount++
	}
}

// volumeMountStatuses is what the kubelet's convertToAPIContainerStatuses
// reports per mount (RecursiveReadOnlyMounts, GA): read-only mounts say
// whether they are recursively read-only, by its resolveRecursiveReadOnly
// against the runtime handler's support (rro, from the runtime): Enabled
// only where the runtime applies it (a mount asking for Enabled where it
// cannot never starts), IfPossible Enabled where it can, else Disabled.
func volumeMountStatuses(spec *corev1.Container, rro bool) []corev1.VolumeMountStatus {
	var out []corev1.VolumeMountStatus
	for _, vm := range spec.VolumeMounts {
		vs := corev1.VolumeMountStatus{Name: vm.Name, MountPath: vm.MountPath, ReadOnly: vm.ReadOnly}
		if vm.ReadOnly {
			mode := corev1.RecursiveReadOnlyDisabled
			if rro && vm.RecursiveReadOnly != nil && (vm.MountPropagation == nil || *vm.MountPropagation == corev1.MountPropagationNone) &&
				(*vm.RecursiveReadOnly == corev1.RecursiveReadOnlyEnabled || *vm.RecursiveReadOnly == corev1.RecursiveReadOnlyIfPossible) {
				mode = corev1.RecursiveReadOnlyEnabled
			}
			vs.RecursiveReadOnly = &mode
		}
		out = append(out, vs)
	}
	return out
}

// setProbeResults is the probe manager's UpdatePodStatus: started from the
// startup probe, ready from the readiness probe, for the container instance
// the result was taken on.
func setProbeResults(pod *corev1.Pod, s *corev1.PodStatus, probes map[ProbeID]schemas.ProbeResult, old *corev1.PodStatus) {
	result := func(cs *corev1.ContainerStatus, kind string) (string, bool) {
		r, ok := probes[ProbeID{Container: cs.Name, Kind: kind}]
		if !ok || !sameContainerID(r.ContainerID, cs.ContainerID) {
			return "", false
		}
		return r.Result, true
	}
	started := func(cs *corev1.ContainerStatus, spec *corev1.Container) bool {
		if cs.State.Running == nil {
			return false
		}
		if r, ok := result(cs, schemas.ProbeStartup); ok {
			return r == schemas.ProbeSuccess
		}
		if cs.Started != nil && *cs.Started {
			return true
		}
		return spec == nil || spec.StartupProbe == nil
	}
	ready := func(cs *corev1.ContainerStatus, spec *corev1.Container) bool {
		if cs.State.Running == nil {
			return false
		}
		if r, ok := result(cs, schemas.ProbeReadiness); ok && r == schemas.ProbeSuccess {
			return true
		}
		return spec == nil || spec.ReadinessProbe == nil
	}
	for i := range s.ContainerStatuses {
		cs := &s.ContainerStatuses[i]
		spec := specByName(pod.Spec.Containers, cs.Name)
		st := started(cs, spec)
		cs.Started = &st
		cs.Ready = st && ready(cs, spec)
	}
	for i := range s.InitContainerStatuses {
		cs := &s.InitContainerStatuses[i]
		spec := specByName(pod.Spec.InitContainers, cs.Name)
		st := started(cs, spec)
		cs.Started = &st
		if !podutil.IsRestartableInit(spec) {
			cs.Ready = cs.State.Terminated != nil && cs.State.Terminated.ExitCode == 0
			continue
		}
		cs.Ready = st && ready(cs, spec)
	}
}

// sameContainerID compares container IDs with or without their
// "<runtime>://" prefix.
func sameContainerID(a, b string) bool {
	return a != "" && podutil.RawContainerID(a) == podutil.RawContainerID(b)
}

// podPhase is the kubelet's getPhase (with ContainerRestartRules, beta and
// on by default since 1.35).
func podPhase(pod *corev1.Pod, info []corev1.ContainerStatus, podIsTerminal, podHasInitialized bool) corev1.PodPhase {
	spec := pod.Spec
	pendingRestartableInit, pendingRegularInit, failedInitNotRestartable := 0, 0, 0
	for _, c := range spec.InitContainers {
		if podutil.IsRestartableInit(&c) {
			continue
		}
		cs := statusByName(info, c.Name)
		switch {
		case cs == nil, cs.State.Running != nil:
			pendingRegularInit++
		case cs.State.Terminated != nil:
			if code := cs.State.Terminated.ExitCode; code != 0 && !containerShouldRestart(c, spec, code) {
				failedInitNotRestartable++
			}
		case cs.State.Waiting != nil:
			if t := cs.LastTerminationState.Terminated; t != nil {
				if t.ExitCode != 0 && !containerShouldRestart(c, spec, t.ExitCode) {
					failedInitNotRestartable++
				}
			} else {
				pendingRegularInit++
			}
		default:
			pendingRegularInit++
		}
	}
	unknown, running, waiting, stopped, stoppedNotRestartable, succeeded := 0, 0, 0, 0, 0, 0
	for _, c := range spec.InitContainers {
		if !podutil.IsRestartableInit(&c) {
			continue
		}
		cs := statusByName(info, c.Name)
		switch {
		case cs == nil:
			unknown++
		case cs.State.Running != nil:
			if cs.Started == nil || !*cs.Started {
				pendingRestartableInit++
			}
			running++
		case cs.State.Terminated != nil:
		case cs.State.Waiting != nil:
			if cs.LastTerminationState.Terminated == nil {
				pendingRestartableInit++
				waiting++
			}
		default:
			pendingRestartableInit++
			unknown++
		}
	}
	for _, c := range spec.Containers {
		cs := statusByName(info, c.Name)
		switch {
		case cs == nil:
			unknown++
		case cs.State.Running != nil:
			running++
		case cs.State.Terminated != nil:
			stopped++
			code := cs.State.Terminated.ExitCode
			if !containerShouldRestart(c, spec, code) {
				stoppedNotRestartable++
			}
			if code == 0 {
				succeeded++
			}
		case cs.State.Waiting != nil:
			if t := cs.LastTerminationState.Terminated; t != nil {
				stopped++
				if !containerShouldRestart(c, spec, t.ExitCode) {
					stoppedNotRestartable++
				}
			} else {
				waiting++
			}
		default:
			unknown++
		}
	}
	if failedInitNotRestartable > 0 {
		return corev1.PodFailed
	}
	switch {
	case pendingRegularInit > 0 || (pendingRestartableInit > 0 && !podHasInitialized), waiting > 0:
		return corev1.PodPending
	case running > 0 && unknown == 0:
		return corev1.PodRunning
	case running == 0 && stopped > 0 && unknown == 0:
		if podIsTerminal && !podutil.IsStaticPod(pod) {
			if stopped == succeeded {
				return corev1.PodSucceeded
			}
			return corev1.PodFailed
		}
		if stopped != stoppedNotRestartable {
			return corev1.PodRunning
		}
		if stopped == succeeded {
			return corev1.PodSucceeded
		}
		return corev1.PodFailed
	default:
		return corev1.PodPending
	}
}

// containerShouldRestart is podutil.ContainerShouldRestart: container
// restart rules, then the container's restart policy, then the pod's.
func containerShouldRestart(c corev1.Container, spec corev1.PodSpec, exitCode int32) bool {
	return podutil.ContainerShouldRestart(&c, &spec, exitCode)
}

func specByName(specs []corev1.Container, name string) *corev1.Container {
	for i := range specs {
		if specs[i].Name == name {
			return &specs[i]
		}
	}
	return nil
}

func statusByName(st []corev1.ContainerStatus, name string) *corev1.ContainerStatus {
	for i := range st {
		if st[i].Name == name {
			return &st[i]
		}
	}
	return nil
}

func observedByName(obs []schemas.ContainerObserved, name string) *schemas.ContainerObserved {
	for i := range obs {
		if obs[i].Name == name {
			return &obs[i]
		}
	}
	return nil
}

func anyCreated(obs []schemas.ContainerObserved) bool {
	for _, c := range obs {
		if c.ContainerID != "" {
			return true
		}
	}
	return false
}
