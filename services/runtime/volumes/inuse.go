package volumes

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// csiUniqueName is the kubelet's unique volume name of a CSI volume.
func csiUniqueName(driver, handle string) string {
	return "kubernetes.io/csi/" + driver + "^" + handle
}

// inUseTracker is the node's attachable volumes in use: what the kubelet's
// volume manager reports as GetVolumesInUse (the actual state of world's
// staged and published volumes, read back from the state dir, and the
// desired state of world's volumes about to be), and its ReportedInUse
// gate.
type inUseTracker struct {
	stateDir string
	nodeName string
	client   kubernetes.Interface
	// pending: CSI volumes pods are about to use (unique names by pod),
	// reported in use before they are attached or staged.
	mu      sync.Mutex
	pending map[types.UID]map[string]bool
	kick    chan struct{}
}

func newInUseTracker(stateDir, nodeName string, client kubernetes.Interface) *inUseTracker {
	return &inUseTracker{stateDir: stateDir, nodeName: nodeName, client: client,
		pending: map[types.UID]map[string]bool{}, kick: make(chan struct{}, 1)}
}

// volumesInUse lists the node's persistent CSI volumes that are staged,
// published, or about to be (the kubelet's GetVolumesInUse), by unique
// name, sorted. It reads the state dir, so it holds after a restart.
func (t *inUseTracker) volumesInUse() []string {
	set := map[string]bool{}
	staged, _ := filepath.Glob(filepath.Join(t.stateDir, "plugins", "kubernetes.io", "csi", "*", "*", volDataFile))
	published, _ := filepath.Glob(filepath.Join(t.stateDir, "pods", "*", "volumes", pluginCSI, "*", volDataFile))
	mapped, _ := filepath.Glob(filepath.Join(volumeDevicesDir(t.stateDir), "*", "data", volDataFile))
	for _, f := range slices.Concat(staged, published, mapped) {
		d, err := loadVolData(filepath.Dir(f))
		if err == nil && d.VolumeLifecycleMode != string(storagev1.VolumeLifecycleEphemeral) {
			set[csiUniqueName(d.DriverName, d.VolumeHandle)] = true
		}
	}
	t.mu.Lock()
	for _, names := range t.pending {
		for n := range names {
			set[n] = true
		}
	}
	t.mu.Unlock()
	out := make([]string, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// changed is signalled when volumesInUse may have changed.
func (t *inUseTracker) changed() <-chan struct{} { return t.kick }

func (t *inUseTracker) signal() {
	select {
	case t.kick <- struct{}{}:
	default:
	}
}

// markInUse records that the pod is about to use a volume (before it is
// attached or staged, as the kubelet's desired state of world).
func (t *inUseTracker) markInUse(uid types.UID, name string) {
	t.mu.Lock()
	if t.pending[uid] == nil {
		t.pending[uid] = map[string]bool{}
	}
	added := !t.pending[uid][name]
	t.pending[uid][name] = true
	t.mu.Unlock()
	if added {
		t.signal()
	}
}

// forgetPod drops the volumes the pod was about to use.
func (t *inUseTracker) forgetPod(uid types.UID) {
	t.mu.Lock()
	_, had := t.pending[uid]
	delete(t.pending, uid)
	t.mu.Unlock()
	if had {
		t.signal()
	}
}

// reportedInUse is the kubelet's ReportedInUse gate: an attachable volume
// is staged only once the Node's status.volumesInUse lists it, so the
// attach-detach controller never detaches what is being mounted.
func (t *inUseTracker) reportedInUse(ctx context.Context, name string) error {
	node, err := t.client.CoreV1().Nodes().Get(ctx, t.nodeName, metav1.GetOptions{})
	if err != nil {
		return &attachError{fmt.Errorf("read node %s: %w", t.nodeName, err)}
	}
	if slices.Contains(node.Status.VolumesInUse, corev1.UniqueVolumeName(name)) {
		return nil
	}
	return &attachError{fmt.Errorf("volume %s has not been added to the list of VolumesInUse in the node's volume status", name)}
}
