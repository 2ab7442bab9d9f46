package schemas

import (
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Pod sources, as the kubelet names them in kubernetes.io/config.source.
const (
	SourceFile = "file"
	SourceHTTP = "http"
	SourceAPI  = "api"
)

// PodDesired is one pod the node should run: the desired-pods bucket, key =
// pod UID, written by nodelet-sources only.
type PodDesired struct {
	// Pod is the full pod, API defaults applied. Static pods carry the
	// kubelet's config.source/config.hash/config.seen annotations.
	Pod *corev1.Pod `json:"pod"`
	// Source is file, http or api.
	Source string `json:"source"`
	// FirstSeen is when a source first delivered this UID.
	FirstSeen time.Time `json:"firstSeen"`
}

func (PodDesired) SchemaName() string { return "nodelet.v1.PodDesired" }

// SourcesReady says which configured sources have delivered their first full
// list: the sources bucket, key "ready". The runtime kills pods it does not
// know only once AllReady is true.
type SourcesReady struct {
	Configured []string `json:"configured"`
	Ready      []string `json:"ready"`
	AllReady   bool     `json:"allReady"`
}

func (SourcesReady) SchemaName() string { return "nodelet.v1.SourcesReady" }

// AdmissionVerdict is admission's decision on one pod: the admission bucket,
// key = pod UID, written by nodelet-admission only. The verdict of a pod
// that left the desired bucket is deleted.
type AdmissionVerdict struct {
	UID       string `json:"uid"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Admitted  bool   `json:"admitted"`
	// Preempted: the pod had been admitted and was then preempted to make
	// room for a critical pod (the kubelet's CriticalPodAdmissionHandler);
	// Admitted is false, Reason "Preempting". The runtime kills it and its
	// status is Failed with a DisruptionTarget condition, as an eviction.
	Preempted bool `json:"preempted,omitempty"`
	// Reason and Message use the kubelet's wording (OutOfcpu, NodeAffinity,
	// Taint, ...). Empty when admitted.
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	// DesiredRevision is the desired-bucket revision the verdict was made on.
	DesiredRevision uint64 `json:"desiredRevision"`
	// PressureRevision is the pressure-bucket revision seen at the time.
	PressureRevision uint64    `json:"pressureRevision,omitempty"`
	DecidedAt        time.Time `json:"decidedAt"`
}

func (AdmissionVerdict) SchemaName() string { return "nodelet.v1.AdmissionVerdict" }

// A preempted pod's wording, the kubelet's (pkg/kubelet/preemption): the
// reason and message of its status and event, and the message of its
// DisruptionTarget condition.
const (
	ReasonPreempting          = "Preempting"
	MessagePreempted          = "Preempted in order to admit critical pod"
	MessagePreemptedCondition = "Pod was preempted by Kubelet to accommodate a critical pod."
)

// Container kinds in observed state.
const (
	ContainerKindInit    = "init"
	ContainerKindSidecar = "sidecar"
	ContainerKindApp     = "app"
	// ContainerKindEphemeral: a container of spec.ephemeralContainers
	// (kubectl debug), started once in the running pod, never restarted.
	ContainerKindEphemeral = "ephemeral"
)

// PodObserved is what the runtime sees of one pod: the observed bucket, key
// = pod UID, written by nodelet-runtime only, and only when it changed.
type PodObserved struct {
	UID       string `json:"uid"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Sandbox is the newest sandbox of the pod, nil before the first one.
	Sandbox *SandboxObserved `json:"sandbox,omitempty"`
	// InitContainers holds init containers and sidecars in spec order;
	// Containers the app containers in spec order. A container not yet
	// created is listed with a Waiting state and its reason.
	InitContainers []ContainerObserved `json:"initContainers,omitempty"`
	Containers     []ContainerObserved `json:"containers,omitempty"`
	// EphemeralContainers holds the ephemeral containers in spec order.
	EphemeralContainers []ContainerObserved `json:"ephemeralContainers,omitempty"`
	// Reason/Message explain a pod-level wait or failure, e.g.
	// NetworkNotReady, why init containers stopped the pod, or
	// DeadlineExceeded (killed past spec.activeDeadlineSeconds).
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	// Terminating: the runtime is killing the pod. Terminated: every
	// container and the sandbox are stopped; the state is final.
	// Finished: terminated, and the pod's volumes are unmounted and its
	// cgroup removed (the kubelet's SyncTerminatedPod done): only then
	// may nodelet-status finish the pod's deletion in the API, as the
	// status manager's canBeDeleted waits for podIsFinished.
	Terminating bool `json:"terminating,omitempty"`
	Terminated  bool `json:"terminated,omitempty"`
	Finished    bool `json:"finished,omitempty"`
	// ResizeConditions are the pod's PodResizePending and
	// PodResizeInProgress conditions as the kubelet's allocation and status
	// managers set them (in-place resize); none when no resize is under way.
	ResizeConditions []corev1.PodCondition `json:"resizeConditions,omitempty"`
	// RecursiveReadOnlyMounts: the pod's runtime handler supports recursive
	// read-only mounts (CRI RuntimeHandlerFeatures), set only for a pod
	// that asks for one; status resolves volumeMounts[].recursiveReadOnly
	// with it, as the kubelet's convertToAPIContainerStatuses.
	RecursiveReadOnlyMounts bool `json:"recursiveReadOnlyMounts,omitempty"`
	// PodGeneration is the metadata.generation of the pod spec the
	// runtime synced last (0 when the spec has none): nodelet-status
	// reports it as the status's observedGeneration, so a spec change the
	// runtime has not acted on (a resize not yet admitted) is not observed.
	PodGeneration int64 `json:"podGeneration,omitempty"`
	// Generation counts the changes the runtime published for this pod.
	Generation uint64 `json:"generation"`
}

func (PodObserved) SchemaName() string { return "nodelet.v1.PodObserved" }

// SandboxObserved is the pod sandbox as CRI reports it.
type SandboxObserved struct {
	ID        string    `json:"id"`
	Attempt   uint32    `json:"attempt"`
	Ready     bool      `json:"ready"`
	IPs       []string  `json:"ips,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
}

// ContainerObserved is one container of a pod as the runtime sees it.
type ContainerObserved struct {
	Name string `json:"name"`
	// Kind is init, sidecar, app or ephemeral.
	Kind        string `json:"kind"`
	ContainerID string `json:"containerID,omitempty"` // containerd://<id>
	Image       string `json:"image,omitempty"`
	ImageID     string `json:"imageID,omitempty"`
	// Hash is the io.kubernetes.container.hash of the spec it runs.
	Hash                 string                       `json:"hash,omitempty"`
	State                corev1.ContainerState        `json:"state"`
	LastTerminationState corev1.ContainerState        `json:"lastState"`
	RestartCount         int32                        `json:"restartCount"`
	Resources            *corev1.ResourceRequirements `json:"resources,omitempty"`
	// Allocated is what the node accepted for the container (the spec's
	// resources, or the previous ones while a resize is pending): the
	// kubelet's allocated resources, status.containerStatuses[].allocatedResources.
	Allocated *corev1.ResourceRequirements `json:"allocated,omitempty"`
}

// RuntimeState is the container's state as the kubelet's
// kubelet_running_containers labels it (container_state: running, exited,
// created, unknown), "" for a container not created yet. One home for
// the rule: nodelet-runtime and nodelet-status both count by it.
func (c ContainerObserved) RuntimeState() string {
	switch {
	case c.ContainerID == "":
		return ""
	case c.State.Running != nil:
		return "running"
	case c.State.Terminated != nil:
		return "exited"
	case c.State.Waiting != nil:
		return "created"
	}
	return "unknown"
}
