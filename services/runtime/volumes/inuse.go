package volumes

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	storagev1 "k8s.io/api/storage/v1"
)

// csiUniqueName is the kubelet's unique volume name of a CSI volume.
func csiUniqueName(driver, handle string) string {
	return "kubernetes.io/csi/" + driver + "^" + handle
}

// VolumesInUse lists the node's persistent CSI volumes that are staged,
// published, or about to be (the kubelet's GetVolumesInUse), by unique
// name, sorted. It reads the state dir, so it holds after a restart.
func (m *Manager) VolumesInUse() []string {
	set := map[string]bool{}
	staged, _ := filepath.Glob(filepath.Join(m.stateDir, "plugins", "kubernetes.io", "csi", "*", "*", volDataFile))
	published, _ := filepath.Glob(filepath.Join(m.stateDir, "pods", "*", "volumes", pluginCSI, "*", volDataFile))
	mapped, _ := filepath.Glob(filepath.Join(volumeDevicesDir(m.stateDir), "*", "data", volDataFile))
	for _, f := range slices.Concat(staged, published, mapped) {
		d, err := loadVolData(filepath.Dir(f))
		if err == nil && d.VolumeLifecycleMode != string(storagev1.VolumeLifecycleEphemeral) {
			set[csiUniqueName(d.DriverName, d.VolumeHandle)] = true
		}
	}
	m.inUseMu.Lock()
	for _, names := range m.pending {
		for n := range names {
			set[n] = true
		}
	}
	m.inUseMu.Unlock()
	out := make([]string, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// InUseChanged is signalled when VolumesInUse may have changed.
func (m *Manager) InUseChanged() <-chan struct{} { return m.inUseKick }

func (m *Manager) signalInUse() {
	select {
	case m.inUseKick <- struct{}{}:
	default:
	}
}

// markInUse records that the pod is about to use a volume (before it is
// attached or staged, as the kubelet's desired state of world).
func (m *Manager) markInUse(uid types.UID, name string) {
	m.inUseMu.Lock()
	if m.pending[uid] == nil {
		m.pending[uid] = map[string]bool{}
	}
	added := !m.pending[uid][name]
	m.pending[uid][name] = true
	m.inUseMu.Unlock()
	if added {
		m.signalInUse()
	}
}

func (m *Manager) forgetInUse(uid types.UID) {
	m.inUseMu.Lock()
	_, had := m.pending[uid]
	delete(m.pending, uid)
	m.inUseMu.Unlock()
	if had {
		m.signalInUse()
	}
}

// reportedInUse is the kubelet's ReportedInUse gate: an attachable volume
// is staged only once the Node's status.volumesInUse lists it, so the
// attach-detach controller never detaches what is being mounted.
func (m *Manager) reportedInUse(ctx context.Context, name string) error {
	node, err := m.client.CoreV1().Nodes().Get(ctx, m.nodeName, metav1.GetOptions{})
	if err != nil {
		return &attachError{fmt.Errorf("read node %s: %w", m.nodeName, err)}
	}
	if slices.Contains(node.Status.VolumesInUse, corev1.UniqueVolumeName(name)) {
		return nil
	}
	return &attachError{fmt.Errorf("volume %s has not been added to the list of VolumesInUse in the node's volume status", name)}
}
