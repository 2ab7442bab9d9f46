package status

import (
	"net"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/utils/net"

	"github.com/nodelet/nodelet/internal/podutil"
	"github.com/nodelet/nodelet/schemas"
)

// The kubelet's waiting and termination reasons that status itself fills in
// (the runtime reports the others, e.g. CrashLoopBackOff or ErrImagePull).
const (
	ReasonContainerCreating      = "ContainerCreating"
	ReasonPodInitializing        = "PodInitializing"
	ReasonContainerStatusUnknown = "ContainerStatusUnknown"
	// maxPodTerminationMessageLogLength bounds all termination messages of a
	// pod together, as the kubelet does.
	maxPodTerminationMessageLogLength = 1024 * 12
)

// ProbeID names one probe of one container of a pod.
type ProbeID struct {
	Container string
	Kind      string // readiness, liveness or startup
}

// PodInputs is everything the status of one pod is computed from: what the
// other daemons published about it and the status this daemon wrote last.
type PodInputs struct {
	// Pod is the desired pod (spec, metadata, and for API pods the status
	// the API server holds).
	Pod *corev1.Pod
	// Static pods come from a file or URL; they have no terminal phase, as
	// in the kubelet.
	Static   bool
	Verdict  *schemas.AdmissionVerdict
	Observed *schemas.PodObserved
	Probes   map[ProbeID]schemas.ProbeResult
	Eviction *schemas.PodEviction
	// Old is the status last written to the status bucket; nil falls back to
	// Pod.Status, as the kubelet falls back to the API status.
	Old *corev1.PodStatus
	// HostIPs are the node's addresses, primary first.
	HostIPs []string
	Now     time.Time
	// Claims are the pod's prepared ResourceClaims (nodelet-devices).
	Claims *schemas.PodClaims
	// DRAHealth is the health of the DRA drivers' devices
	// (nodelet-devices), nil when none reported.
	DRAHealth *schemas.DRAHealth
}

// ComputePodStatus is nodelet's generateAPIPodStatus: the v1.PodStatus of
// one pod from its desired spec, admission verdict, observed runtime state,
// probe results and eviction, merged with the previous status so that it
// never goes backwards. It is pure: the same inputs give the same status.
func ComputePodStatus(in PodInputs) corev1.PodStatus {
	pod := in.Pod
	old := pod.Status.DeepCopy()
	if in.Old != nil {
		old = in.Old.DeepCopy()
	}
	now := metav1.NewTime(in.Now)

	var s corev1.PodStatus
	switch {
	case in.Verdict != nil && !in.Verdict.Admitted && !in.Verdict.Preempted:
		// The kubelet's rejectPod: Failed with admission's reason, nothing else.
		s = corev1.PodStatus{Phase: corev1.PodFailed, Reason: in.Verdict.Reason, Message: rejectMessage(in.Verdict.Message)}
		s.QOSClass = podutil.QOSClass(pod)
		// A rejected pod never ran: its phase is final at once.
		finishStatus(pod, pod.Generation, &s, old, now)
		return s
	default:
		s = generateStatus(in, old)
	}
	finishStatus(pod, syncedGeneration(in), &s, old, now)
	return s
}

// syncedGeneration is the generation of the pod's spec that the status
// describes: the one nodelet-runtime last synced (PodObserved.PodGeneration)
// when it reports one, else the spec's own. The kubelet generates a pod's
// status in the sync of one version of its spec (generateAPIPodStatus with
// podutil's observed generation), so a change the runtime has not acted on
// yet, such as a resize it has not admitted, is not reported as observed:
// clients (the e2e resize specs among them) take observedGeneration caught
// up and no resize condition as "the resize is done".
func syncedGeneration(in PodInputs) int64 {
	if o := in.Observed; o != nil && o.PodGeneration > 0 && o.PodGeneration < in.Pod.Generation {
		return o.PodGeneration
	}
	return in.Pod.Generation
}

func rejectMessage(m string) string {
	const prefix = "Pod was rejected: "
	if strings.HasPrefix(m, prefix) {
		return m
	}
	return prefix + m
}

// generateStatus follows generateAPIPodStatus and the status manager's
// TerminatePod for an admitted pod.
func generateStatus(in PodInputs, old *corev1.PodStatus) corev1.PodStatus {
	pod := in.Pod
	obs := in.Observed
	var s corev1.PodStatus
	s.QOSClass = podutil.QOSClass(pod)
	s.PodIPs = podIPs(obs, in.HostIPs, old)
	if len(s.PodIPs) > 0 {
		s.PodIP = s.PodIPs[0].IP
	}

	hasInit := len(pod.Spec.InitContainers) > 0
	var obsInit, obsApp []schemas.ContainerObserved
	if obs != nil {
		obsInit, obsApp = obs.InitContainers, obs.Containers
	}
	c := containerInputs{pod: pod, known: obs != nil, anyAppCreated: anyCreated(obsApp), rro: obs != nil && obs.RecursiveReadOnlyMounts}
	s.ContainerStatuses = c.statuses(pod.Spec.Containers, obsApp, old.ContainerStatuses, hasInit, false)
	setClaimsResourcesStatus(pod, s.ContainerStatuses, in.Claims, in.DRAHealth)
	s.InitContainerStatuses = c.statuses(pod.Spec.InitContainers, obsInit, old.InitContainerStatuses, hasInit, true)
	s.EphemeralContainerStatuses = c.ephemeralStatuses(obs, old)
	setProbeResults(pod, &s, in.Probes, old)

	podIsTerminal := obs != nil && obs.Terminated
	all := append(append([]corev1.ContainerStatus{}, s.ContainerStatuses...), s.InitContainerStatuses...)
	s.Phase = podPhase(pod, all, podIsTerminal, c.anyAppCreated)

	// Three-way merge: a terminal phase, ours or the API's, stays.
	if !podutil.IsTerminalPhase(s.Phase) {
		switch {
		case podutil.IsTerminalPhase(old.Phase):
			s.Phase = old.Phase
		case podutil.IsTerminalPhase(pod.Status.Phase):
			s.Phase = pod.Status.Phase
		}
	}
	if s.Phase == old.Phase {
		s.Reason, s.Message = old.Reason, old.Message
		if s.Reason == "" {
			s.Reason = pod.Status.Reason
		}
		if s.Message == "" {
			s.Message = pod.Status.Message
		}
	}
	if deadlineExceeded(in, old) {
		// The kubelet's PodSyncHandlers in generateAPIPodStatus: the
		// activeDeadlineHandler's ShouldEvict fails the pod.
		s.Phase = corev1.PodFailed
		s.Reason, s.Message = podutil.ReasonDeadlineExceeded, podutil.MessageDeadlineExceeded
	}
	eviction := in.Eviction
	disruption := ""
	if eviction != nil {
		disruption = eviction.Message
	}
	if eviction == nil && in.Verdict != nil && in.Verdict.Preempted {
		// The kubelet's CriticalPodAdmissionHandler kills the pod as the
		// eviction manager would, with its own condition message.
		eviction = &schemas.PodEviction{Reason: in.Verdict.Reason, Message: in.Verdict.Message}
		disruption = schemas.MessagePreemptedCondition
	}
	if eviction != nil {
		s.Phase = corev1.PodFailed
		s.Reason = eviction.Reason
		if s.Reason == "" {
			s.Reason = "Evicted"
		}
		s.Message = eviction.Message
	}
	if podIsTerminal && !in.Static {
		terminatePod(pod, &s)
	}

	// Kubelet-owned conditions are generated; the others (readiness gates
	// set by controllers, DisruptionTarget) are kept.
	s.Conditions = nil
	for _, cond := range pod.Status.Conditions {
		if !conditionByKubelet(cond.Type) {
			s.Conditions = append(s.Conditions, cond)
		}
	}
	if dt := findCondition(old.Conditions, corev1.DisruptionTarget); dt != nil {
		s.Conditions = replaceOrAppendCondition(s.Conditions, *dt)
	}
	if eviction != nil {
		s.Conditions = replaceOrAppendCondition(s.Conditions, corev1.PodCondition{
			Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue,
			Reason: corev1.PodReasonTerminationByKubelet, Message: disruption,
		})
	}
	allStatuses := append(append([]corev1.ContainerStatus{}, s.InitContainerStatuses...), s.ContainerStatuses...)
	s.Conditions = append(s.Conditions, readyToStartContainersCondition(pod, obs))
	s.Conditions = append(s.Conditions, initializedCondition(pod, allStatuses, s.Phase))
	s.Conditions = append(s.Conditions, podReadyCondition(pod, s.Conditions, allStatuses, s.Phase))
	s.Conditions = append(s.Conditions, containersReadyCondition(pod, allStatuses, s.Phase))
	s.Conditions = append(s.Conditions, corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue})
	if obs != nil {
		// PodResizePending / PodResizeInProgress as the runtime's
		// allocation decided them (the kubelet's status manager).
		for _, c := range obs.ResizeConditions {
			s.Conditions = append(s.Conditions, *c.DeepCopy())
		}
	}

	setHostIPs(pod, &s, in.HostIPs)

	// The kubelet reports a terminal phase only once no container can be
	// running (mergePodStatus); until then the pod keeps its phase.
	if podutil.IsTerminalPhase(s.Phase) && !podutil.IsTerminalPhase(old.Phase) && couldHaveRunningContainers(obs) {
		s.Phase, s.Reason, s.Message = old.Phase, old.Reason, old.Message
		if s.Phase == "" {
			s.Phase = corev1.PodPending
		}
	}
	if podutil.IsTerminalPhase(s.Phase) {
		// Never report a terminal pod as ready.
		for i := range s.Conditions {
			switch s.Conditions[i].Type {
			case corev1.PodReady, corev1.ContainersReady:
				if s.Conditions[i].Status == corev1.ConditionTrue {
					s.Conditions[i] = terminalReadyCondition(s.Conditions[i].Type, s.Phase)
				}
			}
		}
	}
	return s
}

// deadlineExceeded: the runtime killed the pod for its active deadline, or
// the pod has been active longer than spec.activeDeadlineSeconds since the
// start time of the last status (the kubelet's pastActiveDeadline, whose
// podStatusProvider falls back to the API's status as old does).
func deadlineExceeded(in PodInputs, old *corev1.PodStatus) bool {
	if in.Observed != nil && in.Observed.Reason == podutil.ReasonDeadlineExceeded {
		return true
	}
	if old.StartTime == nil {
		return false
	}
	past, _ := podutil.PastActiveDeadline(in.Pod, old.StartTime.Time, in.Now)
	return past
}

// couldHaveRunningContainers is the kubelet's PodCouldHaveRunningContainers
// seen through the runtime's report: true from the runtime's first report
// until it reports the pod terminated (its containers and sandbox
// stopped), as the kubelet's pod worker answers until syncTerminatingPod
// is done. Not "a container is reported running": a pod whose containers
// all exited is still being torn down, and admission (podutil.Inactive,
// the kubelet's filterOutInactivePods) counts it until then; a terminal
// phase in the API before that frees its place in the scheduler while the
// node still counts it, and the pod the scheduler puts there is rejected
// OutOfpods (17 % of the soak's lifecycles at 110 pods).
func couldHaveRunningContainers(obs *schemas.PodObserved) bool {
	return obs != nil && !obs.Terminated
}

// podIPs returns the sandbox's IPs, primary family (the node's) first and
// at most one per family. While the sandbox is not ready (stopped, or being
// replaced) the last known IPs stay, as the kubelet keeps them for a
// terminated pod.
func podIPs(obs *schemas.PodObserved, hostIPs []string, old *corev1.PodStatus) []corev1.PodIP {
	if obs == nil || obs.Sandbox == nil || !obs.Sandbox.Ready || len(obs.Sandbox.IPs) == 0 {
		return append([]corev1.PodIP(nil), old.PodIPs...)
	}
	primary, secondary := utilnet.IsIPv4, utilnet.IsIPv6
	if len(hostIPs) > 0 && utilnet.IsIPv6String(hostIPs[0]) {
		primary, secondary = utilnet.IsIPv6, utilnet.IsIPv4
	}
	var out []corev1.PodIP
	for _, family := range []func(net.IP) bool{primary, secondary} {
		for _, s := range obs.Sandbox.IPs {
			if ip := utilnet.ParseIPSloppy(s); ip != nil && family(ip) {
				out = append(out, corev1.PodIP{IP: ip.String()})
				break
			}
		}
	}
	return out
}

// setHostIPs sets hostIP(s), and for host-network pods the pod IPs, which
// are the node's and never change once set.
func setHostIPs(pod *corev1.Pod, s *corev1.PodStatus, hostIPs []string) {
	if len(hostIPs) == 0 {
		return
	}
	s.HostIP = hostIPs[0]
	s.HostIPs = []corev1.HostIP{{IP: hostIPs[0]}}
	if len(hostIPs) > 1 {
		s.HostIPs = append(s.HostIPs, corev1.HostIP{IP: hostIPs[1]})
	}
	if pod.Spec.HostNetwork {
		if s.PodIP == "" {
			s.PodIP = hostIPs[0]
			s.PodIPs = []corev1.PodIP{{IP: hostIPs[0]}}
		}
		if len(hostIPs) == 2 && len(s.PodIPs) == 1 && utilnet.IsIPv6String(s.PodIPs[0].IP) != utilnet.IsIPv6String(hostIPs[1]) {
			s.PodIPs = append(s.PodIPs, corev1.PodIP{IP: hostIPs[1]})
		}
	}
}

// terminatePod is the status manager's TerminatePod: once the runtime has
// stopped everything, containers without a terminated state are reported
// as failed and a pending or running phase becomes Failed.
func terminatePod(pod *corev1.Pod, s *corev1.PodStatus) {
	unknown := func() corev1.ContainerState {
		return corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			Reason: ReasonContainerStatusUnknown, ExitCode: 137,
			Message: "The container could not be located when the pod was terminated",
		}}
	}
	if hasPodInitialized(pod, s) {
		for i := range s.ContainerStatuses {
			if s.ContainerStatuses[i].State.Terminated == nil {
				s.ContainerStatuses[i].State = unknown()
			}
		}
	}
	for i := range initializedContainers(s.InitContainerStatuses) {
		if s.InitContainerStatuses[i].State.Terminated == nil {
			s.InitContainerStatuses[i].State = unknown()
		}
	}
	if !podutil.IsTerminalPhase(s.Phase) {
		s.Phase = corev1.PodFailed
	}
}

// hasPodInitialized reports whether the pod shows evidence of having run a
// regular container (kubelet's hasPodInitialized).
func hasPodInitialized(pod *corev1.Pod, s *corev1.PodStatus) bool {
	if len(pod.Spec.InitContainers) == 0 {
		return true
	}
	for _, cs := range s.ContainerStatuses {
		if cs.LastTerminationState.Terminated != nil || cs.State.Waiting == nil {
			return true
		}
	}
	if l := len(s.InitContainerStatuses); l > 0 && l <= len(pod.Spec.InitContainers) {
		last := s.InitContainerStatuses[l-1]
		spec := specByName(pod.Spec.InitContainers, last.Name)
		if podutil.IsRestartableInit(spec) {
			return last.State.Running != nil && last.Started != nil && *last.Started
		}
		if t := last.LastTerminationState.Terminated; t != nil && t.ExitCode == 0 {
			return true
		}
		if t := last.State.Terminated; t != nil && t.ExitCode == 0 {
			return true
		}
	}
	return false
}

// initializedContainers returns the statuses up to the last one that has
// tried to start (at least the first).
func initializedContainers(cs []corev1.ContainerStatus) []corev1.ContainerStatus {
	for i := len(cs) - 1; i >= 0; i-- {
		if cs[i].State.Waiting == nil || cs[i].LastTerminationState.Terminated != nil {
			return cs[:i+1]
		}
	}
	if len(cs) > 0 {
		return cs[:1]
	}
	return nil
}

// finishStatus is the status manager's updateStatusInternal: condition
// transition times, a start time that never changes, the observed
// generation, normalised timestamps and messages, and the guard that
// nothing goes backwards.
func finishStatus(pod *corev1.Pod, generation int64, s *corev1.PodStatus, old *corev1.PodStatus, now metav1.Time) {
	preventRegression(pod, s, old)
	for i := range s.Conditions {
		c := &s.Conditions[i]
		if !conditionByKubelet(c.Type) && c.Type != corev1.DisruptionTarget {
			continue
		}
		c.ObservedGeneration = generation
		c.LastTransitionTime = now
		if o := findCondition(old.Conditions, c.Type); o != nil && o.Status == c.Status && !o.LastTransitionTime.IsZero() {
			c.LastTransitionTime = o.LastTransitionTime
		}
	}
	switch {
	case old.StartTime != nil && !old.StartTime.IsZero():
		s.StartTime = old.StartTime.DeepCopy()
	case s.StartTime == nil || s.StartTime.IsZero():
		t := now
		s.StartTime = &t
	}
	s.ObservedGeneration = generation
	if old.ObservedGeneration > s.ObservedGeneration {
		s.ObservedGeneration = old.ObservedGeneration
	}
	if len(old.VolumeHealth) > 0 && len(s.VolumeHealth) == 0 {
		s.VolumeHealth = old.VolumeHealth
	}
	normalizeStatus(pod, s)
}

// preventRegression keeps a status from going backwards against the last
// one written: a terminal phase stays, a container that terminated and may
// not restart never reads running or waiting again, restart counts never
// decrease.
func preventRegression(pod *corev1.Pod, s *corev1.PodStatus, old *corev1.PodStatus) {
	if podutil.IsTerminalPhase(old.Phase) && s.Phase != old.Phase {
		s.Phase, s.Reason, s.Message = old.Phase, old.Reason, old.Message
	}
	guard := func(news, olds []corev1.ContainerStatus, specs []corev1.Container, init bool) {
		for i := range news {
			o := statusByName(olds, news[i].Name)
			if o == nil {
				continue
			}
			if o.RestartCount > news[i].RestartCount {
				news[i].RestartCount = o.RestartCount
			}
			t := o.State.Terminated
			if t == nil || news[i].State.Terminated != nil {
				continue
			}
			spec := specByName(specs, news[i].Name)
			if spec == nil || (init && podutil.IsRestartableInit(spec)) || containerShouldRestart(*spec, pod.Spec, t.ExitCode) {
				continue
			}
			news[i] = *o.DeepCopy()
		}
	}
	guard(s.ContainerStatuses, old.ContainerStatuses, pod.Spec.Containers, false)
	guard(s.InitContainerStatuses, old.InitContainerStatuses, pod.Spec.InitContainers, true)
}

// normalizeStatus truncates timestamps to seconds (the API's precision) and
// termination messages to the kubelet's budget, and sorts the statuses.
func normalizeStatus(pod *corev1.Pod, s *corev1.PodStatus) {
	budget := maxPodTerminationMessageLogLength
	if n := len(pod.Spec.Containers) + len(pod.Spec.InitContainers) + len(pod.Spec.EphemeralContainers); n > 0 {
		budget /= n
	}
	ts := func(t *metav1.Time) { *t = t.Rfc3339Copy() }
	state := func(c *corev1.ContainerState) {
		if c.Running != nil {
			ts(&c.Running.StartedAt)
		}
		if c.Terminated != nil {
			ts(&c.Terminated.StartedAt)
			ts(&c.Terminated.FinishedAt)
			if len(c.Terminated.Message) > budget {
				c.Terminated.Message = c.Terminated.Message[:budget]
			}
		}
	}
	if s.StartTime != nil {
		ts(s.StartTime)
	}
	for i := range s.Conditions {
		ts(&s.Conditions[i].LastProbeTime)
		ts(&s.Conditions[i].LastTransitionTime)
	}
	for _, list := range [][]corev1.ContainerStatus{s.ContainerStatuses, s.InitContainerStatuses, s.EphemeralContainerStatuses} {
		for i := range list {
			state(&list[i].State)
			state(&list[i].LastTerminationState)
		}
	}
	sort.SliceStable(s.ContainerStatuses, func(i, j int) bool { return s.ContainerStatuses[i].Name < s.ContainerStatuses[j].Name })
	sort.SliceStable(s.EphemeralContainerStatuses, func(i, j int) bool {
		return s.EphemeralContainerStatuses[i].Name < s.EphemeralContainerStatuses[j].Name
	})
	order := map[string]int{}
	for i, c := range pod.Spec.InitContainers {
		order[c.Name] = i
	}
	sort.SliceStable(s.InitContainerStatuses, func(i, j int) bool {
		return order[s.InitContainerStatuses[i].Name] < order[s.InitContainerStatuses[j].Name]
	})
}
