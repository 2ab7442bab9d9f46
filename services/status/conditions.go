package status

import (
	"fmt"
	"strings"

	"github.com/nodelet/nodelet/internal/podutil"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/schemas"
)

// The kubelet's condition reasons (pkg/kubelet/status/generate.go).
const (
	ReasonUnknownContainerStatuses = "UnknownContainerStatuses"
	ReasonPodCompleted             = "PodCompleted"
	ReasonPodFailed                = "PodFailed"
	ReasonContainersNotReady       = "ContainersNotReady"
	ReasonContainersNotInitialized = "ContainersNotInitialized"
	ReasonReadinessGatesNotReady   = "ReadinessGatesNotReady"
	ReasonPodSandboxNotReady       = "PodSandboxNotReady"
)

// conditionByKubelet lists the pod conditions the node agent owns; the
// others are kept as the API has them.
func conditionByKubelet(t corev1.PodConditionType) bool {
	switch t {
	case corev1.PodScheduled, corev1.PodReady, corev1.PodInitialized, corev1.ContainersReady,
		corev1.PodResizeInProgress, corev1.PodResizePending, corev1.PodReadyToStartContainers:
		return true
	}
	return false
}

func findCondition(cs []corev1.PodCondition, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range cs {
		if cs[i].Type == t {
			return &cs[i]
		}
	}
	return nil
}

func replaceOrAppendCondition(cs []corev1.PodCondition, c corev1.PodCondition) []corev1.PodCondition {
	for i := range cs {
		if cs[i].Type == c.Type {
			cs[i] = c
			return cs
		}
	}
	return append(cs, c)
}

// readyToStartContainersCondition is PodReadyToStartContainers: true once a
// ready sandbox with its network exists (kuberuntime's PodSandboxChanged).
func readyToStartContainersCondition(pod *corev1.Pod, obs *schemas.PodObserved) corev1.PodCondition {
	c := corev1.PodCondition{Type: corev1.PodReadyToStartContainers, Status: corev1.ConditionFalse, Reason: ReasonPodSandboxNotReady}
	switch {
	case obs == nil || obs.Sandbox == nil:
		c.Message = "no pod sandbox exists"
	case !obs.Sandbox.Ready:
		c.Message = "pod sandbox is not ready"
	case !pod.Spec.HostNetwork && len(obs.Sandbox.IPs) == 0:
		c.Message = "pod sandbox has no IP address"
	default:
		return corev1.PodCondition{Type: corev1.PodReadyToStartContainers, Status: corev1.ConditionTrue}
	}
	return c
}

// initializedCondition is GeneratePodInitializedCondition.
func initializedCondition(pod *corev1.Pod, statuses []corev1.ContainerStatus, phase corev1.PodPhase) corev1.PodCondition {
	c := corev1.PodCondition{Type: corev1.PodInitialized}
	if statuses == nil && len(pod.Spec.InitContainers) > 0 {
		c.Status, c.Reason = corev1.ConditionFalse, ReasonUnknownContainerStatuses
		return c
	}
	var unknown, incomplete []string
	for i := range pod.Spec.InitContainers {
		spec := &pod.Spec.InitContainers[i]
		cs := statusByName(statuses, spec.Name)
		if cs == nil {
			unknown = append(unknown, spec.Name)
			continue
		}
		if podutil.IsRestartableInit(spec) {
			if cs.Started == nil || !*cs.Started {
				incomplete = append(incomplete, spec.Name)
			}
		} else if !cs.Ready {
			incomplete = append(incomplete, spec.Name)
		}
	}
	if phase == corev1.PodSucceeded && len(unknown) == 0 {
		c.Status, c.Reason = corev1.ConditionTrue, ReasonPodCompleted
		return c
	}
	if anyRegularStarted(pod, statuses) {
		c.Status = corev1.ConditionTrue
		return c
	}
	var msgs []string
	if len(unknown) > 0 {
		msgs = append(msgs, fmt.Sprintf("containers with unknown status: %s", unknown))
	}
	if len(incomplete) > 0 {
		msgs = append(msgs, fmt.Sprintf("containers with incomplete status: %s", incomplete))
	}
	if len(msgs) > 0 {
		c.Status, c.Reason, c.Message = corev1.ConditionFalse, ReasonContainersNotInitialized, strings.Join(msgs, ", ")
		return c
	}
	c.Status = corev1.ConditionTrue
	return c
}

// anyRegularStarted is HasAnyRegularContainerStarted.
func anyRegularStarted(pod *corev1.Pod, statuses []corev1.ContainerStatus) bool {
	for _, spec := range pod.Spec.Containers {
		if cs := statusByName(statuses, spec.Name); cs != nil && (cs.State.Running != nil || cs.State.Terminated != nil) {
			return true
		}
	}
	return false
}

// containersReadyCondition is GenerateContainersReadyCondition.
func containersReadyCondition(pod *corev1.Pod, statuses []corev1.ContainerStatus, phase corev1.PodPhase) corev1.PodCondition {
	c := corev1.PodCondition{Type: corev1.ContainersReady}
	if statuses == nil {
		c.Status, c.Reason = corev1.ConditionFalse, ReasonUnknownContainerStatuses
		return c
	}
	var unknown, unready []string
	check := func(spec *corev1.Container) {
		cs := statusByName(statuses, spec.Name)
		switch {
		case cs == nil:
			unknown = append(unknown, spec.Name)
		case !cs.Ready:
			unready = append(unready, spec.Name)
		}
	}
	for i := range pod.Spec.InitContainers {
		if podutil.IsRestartableInit(&pod.Spec.InitContainers[i]) {
			check(&pod.Spec.InitContainers[i])
		}
	}
	for i := range pod.Spec.Containers {
		check(&pod.Spec.Containers[i])
	}
	if (phase == corev1.PodSucceeded && len(unknown) == 0) || phase == corev1.PodFailed {
		return terminalReadyCondition(corev1.ContainersReady, phase)
	}
	var msgs []string
	if len(unknown) > 0 {
		msgs = append(msgs, fmt.Sprintf("containers with unknown status: %s", unknown))
	}
	if len(unready) > 0 {
		msgs = append(msgs, fmt.Sprintf("containers with unready status: %s", unready))
	}
	if len(msgs) > 0 {
		c.Status, c.Reason, c.Message = corev1.ConditionFalse, ReasonContainersNotReady, strings.Join(msgs, ", ")
		return c
	}
	c.Status = corev1.ConditionTrue
	return c
}

// podReadyCondition is GeneratePodReadyCondition: ContainersReady and every
// readiness gate's condition True.
func podReadyCondition(pod *corev1.Pod, conditions []corev1.PodCondition, statuses []corev1.ContainerStatus, phase corev1.PodPhase) corev1.PodCondition {
	cr := containersReadyCondition(pod, statuses, phase)
	if cr.Status != corev1.ConditionTrue {
		return corev1.PodCondition{Type: corev1.PodReady, Status: cr.Status, Reason: cr.Reason, Message: cr.Message}
	}
	var msgs []string
	for _, rg := range pod.Spec.ReadinessGates {
		c := findCondition(conditions, rg.ConditionType)
		switch {
		case c == nil:
			msgs = append(msgs, fmt.Sprintf("corresponding condition of pod readiness gate %q does not exist.", string(rg.ConditionType)))
		case c.Status != corev1.ConditionTrue:
			msgs = append(msgs, fmt.Sprintf("the status of pod readiness gate %q is not \"True\", but %v", string(rg.ConditionType), c.Status))
		}
	}
	if len(msgs) > 0 {
		return corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: ReasonReadinessGatesNotReady, Message: strings.Join(msgs, ", ")}
	}
	return corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue}
}

func terminalReadyCondition(t corev1.PodConditionType, phase corev1.PodPhase) corev1.PodCondition {
	c := corev1.PodCondition{Type: t, Status: corev1.ConditionFalse}
	switch phase {
	case corev1.PodFailed:
		c.Reason = ReasonPodFailed
	case corev1.PodSucceeded:
		c.Reason = ReasonPodCompleted
	}
	return c
}
