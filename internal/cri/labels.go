package cri

import kubetypes "k8s.io/kubelet/pkg/types"

// The kubelet's CRI labels (k8s.io/kubelet/pkg/types), which nodelet-runtime
// puts on every sandbox and container so that crictl and other tools read
// nodelet's pods as they read the kubelet's, and which nodelet-gc,
// nodelet-status and nodelet-server select them by.
const (
	LabelPodName       = kubetypes.KubernetesPodNameLabel
	LabelPodNamespace  = kubetypes.KubernetesPodNamespaceLabel
	LabelPodUID        = kubetypes.KubernetesPodUIDLabel
	LabelContainerName = kubetypes.KubernetesContainerNameLabel
)

// LabelManaged marks every sandbox and container nodelet creates. Only what
// carries it is ever treated as an orphan and removed: a pod another tool
// started on the same containerd is left alone.
const LabelManaged = "io.nodelet.managed"

// ManagedSelector is the CRI label selector of nodelet's own sandboxes and
// containers (a new map each call: CRI filters are not to be shared).
func ManagedSelector() map[string]string { return map[string]string{LabelManaged: "true"} }
