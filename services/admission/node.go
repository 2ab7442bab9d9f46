package admission

import (
	"runtime"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/internal/hostinfo"
	"github.com/nodelet/nodelet/internal/nodestatus"
)

// Capacity reports what the machine has before anything is reserved: cpu,
// memory, hugepages-<size> and ephemeral-storage, as the kubelet's node
// status reports them from cAdvisor's MachineInfo.
type Capacity interface {
	Capacity() (corev1.ResourceList, error)
}

// StaticCapacity is a fixed capacity: tests use it to stand for a node of a
// given size.
type StaticCapacity corev1.ResourceList

// Capacity returns a copy of c.
func (c StaticCapacity) Capacity() (corev1.ResourceList, error) {
	return corev1.ResourceList(c).DeepCopy(), nil
}

// MachineCapacity reads the machine as nodelet-status does
// (nodestatus.ReadCapacity: cAdvisor's MachineInfo and the filesystem of
// the state dir), so that admission decides on the capacity the Node
// reports.
type MachineCapacity struct {
	// Dir is the state dir; its filesystem's size is ephemeral-storage.
	Dir string
}

// Capacity reads the machine. A filesystem that cannot be read leaves
// ephemeral-storage out with a *nodestatus.FsError, as the kubelet does
// when cAdvisor has no root fs info; cpu and memory are required.
func (m MachineCapacity) Capacity() (corev1.ResourceList, error) {
	return nodestatus.ReadCapacity(&hostinfo.Machine{}, m.Dir)
}

// NodeFromConfig builds the node object admission checks pods against: the
// node's name, labels (kubernetes.io/hostname, os and arch, then
// node.labels, which win as the kubelet's --node-labels do), taints
// (node.taints), capacity (capacity plus pods = node.maxPods) and
// allocatable (nodestatus.Resources, as nodelet-status reports them).
func NodeFromConfig(cfg *config.Config, capacity corev1.ResourceList) (*corev1.Node, error) {
	capacity, allocatable, err := nodestatus.Resources(cfg, capacity)
	if err != nil {
		return nil, err
	}
	labels := map[string]string{
		corev1.LabelHostname:   cfg.Node.Name,
		corev1.LabelOSStable:   runtime.GOOS,
		corev1.LabelArchStable: runtime.GOARCH,
	}
	for k, v := range cfg.Node.Labels {
		labels[k] = v
	}
	var taints []corev1.Taint
	for _, t := range cfg.Node.Taints {
		taints = append(taints, corev1.Taint{Key: t.Key, Value: t.Value, Effect: corev1.TaintEffect(t.Effect)})
	}
	no := false
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: cfg.Node.Name, Labels: labels},
		Spec:       corev1.NodeSpec{Taints: taints},
		Status: corev1.NodeStatus{
			Capacity:    capacity,
			Allocatable: allocatable,
			// containerd 1.6 reports no supplemental-groups-policy support
			// through CRI, and admission does not talk to CRI: a pod asking
			// for SupplementalGroupsPolicy=Strict is refused, as the kubelet
			// refuses it on such a runtime.
			Features: &corev1.NodeFeatures{SupplementalGroupsPolicy: &no},
			NodeInfo: corev1.NodeSystemInfo{OperatingSystem: runtime.GOOS, Architecture: runtime.GOARCH},
		},
	}, nil
}
