package schemas

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// Probe kinds and results.
const (
	ProbeLiveness  = "liveness"
	ProbeReadiness = "readiness"
	ProbeStartup   = "startup"

	ProbeSuccess = "success"
	ProbeFailure = "failure"
	ProbeUnknown = "unknown"
)

// ProbeResult is the latest result of one probe of one container: the probes
// bucket, key = <podUID>.<container>.<kind>, written by nodelet-prober only
// when the result changes.
type ProbeResult struct {
	UID         string `json:"uid"`
	Namespace   string `json:"namespace"`
	Name        string `json:"name"`
	Container   string `json:"container"`
	ContainerID string `json:"containerID"`
	Probe       string `json:"probe"`
	Result      string `json:"result"`
	// Message is the kubelet's wording, e.g. "Liveness probe failed: HTTP
	// probe failed with statuscode: 500".
	Message string    `json:"message,omitempty"`
	Since   time.Time `json:"since"`
	// TerminationGracePeriodSeconds is the probe-level grace period the
	// runtime uses when it kills the container for this failure.
	TerminationGracePeriodSeconds *int64 `json:"terminationGracePeriodSeconds,omitempty"`
}

func (ProbeResult) SchemaName() string { return "nodelet.v1.ProbeResult" }

// PodStatusRecord is the pod's computed v1.PodStatus: the status bucket, key
// = pod UID, written by nodelet-status only. It never goes backwards.
type PodStatusRecord struct {
	UID       string           `json:"uid"`
	Namespace string           `json:"namespace"`
	Name      string           `json:"name"`
	Static    bool             `json:"static,omitempty"`
	Status    corev1.PodStatus `json:"status"`
}

func (PodStatusRecord) SchemaName() string { return "nodelet.v1.PodStatusRecord" }

// RuntimeState is the container runtime's and the pod network's readiness:
// the runtime bucket, key "state", written by nodelet-runtime.
type RuntimeState struct {
	RuntimeReady   bool   `json:"runtimeReady"`
	NetworkReady   bool   `json:"networkReady"`
	Reason         string `json:"reason,omitempty"`
	Message        string `json:"message,omitempty"`
	RuntimeName    string `json:"runtimeName,omitempty"`
	RuntimeVersion string `json:"runtimeVersion,omitempty"`
	// ImageVolumes: the runtime mounts OCI images as volumes (CRI
	// Mount.image, containerd 2.1 and later), so pods with image volumes
	// are admitted.
	ImageVolumes bool `json:"imageVolumes,omitempty"`
	// PodCIDR is the range the CNI configuration was rendered for (the
	// first of PodCIDRs).
	PodCIDR string `json:"podCIDR,omitempty"`
	// PodCIDRs are all the ranges it was rendered for: two when the node
	// is dual stack (the Node's spec.podCIDRs).
	PodCIDRs []string `json:"podCIDRs,omitempty"`
}

func (RuntimeState) SchemaName() string { return "nodelet.v1.RuntimeState" }

// PodVolumeStats are the stats of the pods' volumes, by pod UID, in the
// kubelet's summary API form (emptyDir, configMap, secret, downwardAPI and
// projected volumes by du and statfs, CSI volumes through the driver's
// NodeGetVolumeStats, local volumes by statfs, as the kubelet's volume
// stats calculator): the runtime bucket, key "volumestats", written by
// nodelet-runtime every minute; nodelet-server serves them in
// /stats/summary.
type PodVolumeStats struct {
	Time time.Time                         `json:"time"`
	Pods map[string][]statsapi.VolumeStats `json:"pods,omitempty"`
	// Ephemeral, by pod UID, is what the pod's local ephemeral volumes
	// (emptyDir on disk, configMap) and its /etc/hosts use (usedBytes,
	// inodesUsed): part of its ephemeralStorage.
	Ephemeral map[string]statsapi.FsStats `json:"ephemeral,omitempty"`
}

func (PodVolumeStats) SchemaName() string { return "nodelet.v1.PodVolumeStats" }

// VolumesInUse are the node's attachable volumes that are mounted or about
// to be (the kubelet's GetVolumesInUse, unique names such as
// kubernetes.io/csi/<driver>^<handle>): the runtime bucket, key
// "volumesinuse", written by nodelet-runtime; nodelet-status reports them
// as the Node's status.volumesInUse, which keeps the attach-detach
// controller from detaching them.
type VolumesInUse struct {
	Names []string `json:"names,omitempty"`
}

func (VolumesInUse) SchemaName() string { return "nodelet.v1.VolumesInUse" }

// NodePressure carries the node conditions the eviction manager owns
// (MemoryPressure, DiskPressure, PIDPressure): the pressure bucket, key
// "node", written by nodelet-gc.
type NodePressure struct {
	Conditions []corev1.NodeCondition `json:"conditions"`
	// ShuttingDown: the node shutdown manager (nodelet-gc) handles a node
	// shutdown signalled by systemd-logind: admission refuses new pods and
	// the node is not Ready ("node is shutting down").
	ShuttingDown bool `json:"shuttingDown,omitempty"`
}

func (NodePressure) SchemaName() string { return "nodelet.v1.NodePressure" }

// PodEviction asks the runtime to kill a pod and status to fail it: the
// evictions bucket, key = pod UID, written by nodelet-gc.
type PodEviction struct {
	UID       string    `json:"uid"`
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	Reason    string    `json:"reason"` // Evicted
	Message   string    `json:"message"`
	Time      time.Time `json:"time"`
	// GracePeriodSeconds overrides the pod's termination grace period for
	// the kill, as the kubelet's eviction manager does: 1 for a hard
	// threshold, 0 (the runtime's minimum) for a local storage limit, nil
	// for a soft threshold (the pod's own grace period).
	GracePeriodSeconds *int64 `json:"gracePeriodSeconds,omitempty"`
}

func (PodEviction) SchemaName() string { return "nodelet.v1.PodEviction" }

// ImageRecord remembers when an image was first seen and last used, so image
// GC's least-recently-used order survives restarts: the images bucket, key =
// sanitised image ID, written by nodelet-gc.
type ImageRecord struct {
	ID        string    `json:"id"`
	RepoTags  []string  `json:"repoTags,omitempty"`
	FirstSeen time.Time `json:"firstSeen"`
	LastUsed  time.Time `json:"lastUsed"`
}

func (ImageRecord) SchemaName() string { return "nodelet.v1.ImageRecord" }

// NodeRecord is the node object as nodelet-status last computed it: the node
// bucket, key "node", written by nodelet-status (also in standalone mode).
type NodeRecord struct {
	Node *corev1.Node `json:"node"`
}

func (NodeRecord) SchemaName() string { return "nodelet.v1.NodeRecord" }

// Event is a lifecycle event on the events stream, subject
// nodelet.v1.events.<component>.<podUID|node>. Reasons are the kubelet's.
type Event struct {
	Component string                 `json:"component"`
	Object    corev1.ObjectReference `json:"object"`
	Type      string                 `json:"type"` // Normal or Warning
	Reason    string                 `json:"reason"`
	Message   string                 `json:"message"`
	Time      time.Time              `json:"time"`
}

func (Event) SchemaName() string { return "nodelet.v1.Event" }

// Heartbeat is published by every daemon on nodelet.v1.health.<component>
// every bus.heartbeatInterval.
type Heartbeat struct {
	Component string    `json:"component"`
	Version   string    `json:"version"`
	PID       int       `json:"pid"`
	StartTime time.Time `json:"startTime"`
	// Ready is false while the daemon cannot do its job (e.g. runtime down);
	// Message says why.
	Ready   bool   `json:"ready"`
	Message string `json:"message,omitempty"`
}

func (Heartbeat) SchemaName() string { return "nodelet.v1.Heartbeat" }

// All lists one zero value of every message type, for schema generation and
// round-trip tests.
func All() []Message {
	return []Message{
		PodDesired{}, SourcesReady{}, AdmissionVerdict{}, PodObserved{},
		ProbeResult{}, PodStatusRecord{}, RuntimeState{}, NodePressure{},
		PodEviction{}, ImageRecord{}, NodeRecord{}, Event{}, Heartbeat{},
		PodVolumeStats{}, VolumesInUse{}, DeviceResources{}, PodDevices{}, PodClaims{},
		DRAHealth{},
	}
}
