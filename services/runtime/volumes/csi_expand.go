package volumes

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/client-go/kubernetes"

	"github.com/nodelet/nodelet/services/runtime/csi"
)

// nodeExpander is the kubelet's NodeExpander (pkg/volume/util/
// operationexecutor/node_expander.go) for CSI volumes: NodeExpandVolume
// through the driver, then the claim's status patched.
type nodeExpander struct {
	client   kubernetes.Interface
	nodeName string
	csi      csiCaller
	events   eventRecorder
	// claimEvents records the same events on the claim, as the kubelet.
	claimEvents objectRecorder
	log         *slog.Logger
}

// objectRecorder posts an event about an object other than a pod
// (Options.ObjectEvent); nil: none.
type objectRecorder func(ref corev1.ObjectReference, eventType, reason, message string)

// claimf records an event on claim pvc.
func (r objectRecorder) claimf(pvc *corev1.PersistentVolumeClaim, typ, reason, format string, args ...any) {
	if r == nil || pvc == nil {
		return
	}
	r(corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: pvc.Namespace, Name: pvc.Name,
		UID: pvc.UID, ResourceVersion: pvc.ResourceVersion}, typ, reason, fmt.Sprintf(format, args...))
}

// csiCaller is what the expander needs of the CSI plugin: a driver to
// call and the secrets a call carries.
type csiCaller interface {
	driver(name string) (*csi.Driver, error)
	secrets(ctx context.Context, ref *corev1.SecretReference) (map[string]string, error)
}

var _ csiCaller = (*csiPlugin)(nil)

// expand is the kubelet's node expansion of a resized claim
// (expandVolumeDuringMount when a volume is published, and
// GenerateExpandInUseVolumeFunc while pods use it): when the PV's capacity
// is above the claim's status and the driver has EXPAND_VOLUME,
// NodeExpandVolume grows the volume on the node, then the claim's status
// says so. With the claim's allocatedResourceStatuses (an external-resizer
// that supports recovery) the size is its allocatedResources and the node
// expands only while it is NodeResizePending or NodeResizeInProgress, as
// the kubelet's NodeExpander: marked NodeResizeInProgress, then on success
// capacity set and the status and resize conditions cleared; a final
// failure is NodeResizeError (NodeResizeInfeasible for an invalid size). A
// driver that cannot expand a volume in use (FailedPrecondition) is asked
// again when the volume is next published.
func (e *nodeExpander) expand(ctx context.Context, pod *corev1.Pod, cm *csiMount) error {
	cv := cm.cv
	if cv.inline || cv.claimName == "" || e.client == nil || cm.inUseExpansionError {
		return nil
	}
	drv, err := e.csi.driver(cv.driver)
	if err != nil || !drv.Expand {
		return nil
	}
	pvc, err := e.client.CoreV1().PersistentVolumeClaims(cv.claimNamespace).Get(ctx, cv.claimName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("mountVolume.NodeExpandVolume get PVC failed : %w", err)
	}
	pv, err := e.client.CoreV1().PersistentVolumes().Get(ctx, cv.pvName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("mountVolume.NodeExpandVolume get PV failed : %w", err)
	}
	oldSize, newSize := pvc.Status.Capacity[corev1.ResourceStorage], pv.Spec.Capacity[corev1.ResourceStorage]
	if oldSize.Cmp(newSize) >= 0 {
		return nil
	}
	if cv.readOnly {
		e.events.eventf(pod, corev1.EventTypeWarning, "FileSystemResizeFailed", "MountVolume.NodeExpandVolume failed for volume %q requested read-only file system", cv.pvName)
		e.claimEvents.claimf(pvc, corev1.EventTypeWarning, "FileSystemResizeFailed", "MountVolume.NodeExpandVolume failed for volume %q requested read-only file system", cv.pvName)
		return nil
	}
	resizeStatus := pvc.Status.AllocatedResourceStatuses[corev1.ResourceStorage]
	recovery := resizeStatus != "" || pvc.Status.AllocatedResources != nil
	if recovery {
		// The kubelet's checkForRecoveryFromExpansion and runPreCheck.
		newSize = pvc.Status.AllocatedResources[corev1.ResourceStorage]
		if resizeStatus != corev1.PersistentVolumeClaimNodeResizePending && resizeStatus != corev1.PersistentVolumeClaimNodeResizeInProgress {
			return nil
		}
		if pvc, err = e.patchClaimStatus(ctx, pvc, true, func(c *corev1.PersistentVolumeClaim) {
			setResizeStatus(c, corev1.PersistentVolumeClaimNodeResizeInProgress)
		}); err != nil {
			return fmt.Errorf("MountVolume.NodeExpandVolume failed to mark node expansion in progress: %w", err)
		}
	}
	secrets, err := e.csi.secrets(ctx, cv.expandSecret)
	if err != nil {
		return fmt.Errorf("expander.NodeExpand failed to get NodeExpandSecretRef: %w", err)
	}
	_, err = drv.Node.NodeExpandVolume(ctx, &csipb.NodeExpandVolumeRequest{
		VolumeId: cv.handle, VolumePath: cm.paths.target, StagingTargetPath: cm.paths.staging,
		CapacityRange: &csipb.CapacityRange{RequiredBytes: newSize.Value()}, VolumeCapability: cv.capability(), Secrets: secrets,
	})
	if err != nil {
		return e.expansionFailed(ctx, cm, pvc, recovery, err)
	}
	e.events.eventf(pod, corev1.EventTypeNormal, "FileSystemResizeSuccess", "MountVolume.NodeExpandVolume succeeded for volume %q %s", cv.pvName, e.nodeName)
	e.claimEvents.claimf(pvc, corev1.EventTypeNormal, "FileSystemResizeSuccess", "MountVolume.NodeExpandVolume succeeded for volume %q %s", cv.pvName, e.nodeName)
	e.log.Info("Expanded CSI volume", "pod", pod.Namespace+"/"+pod.Name, "podUID", pod.UID, "volume", cv.pvName, "size", newSize.String())
	// The kubelet's MarkNodeExpansionFinishedWithRecovery (and, without
	// recovery, MarkFSResizeFinished).
	if _, err := e.patchClaimStatus(ctx, pvc, true, func(c *corev1.PersistentVolumeClaim) {
		if c.Status.Capacity == nil {
			c.Status.Capacity = corev1.ResourceList{}
		}
		c.Status.Capacity[corev1.ResourceStorage] = newSize
		delete(c.Status.AllocatedResourceStatuses, corev1.ResourceStorage)
		if len(c.Status.AllocatedResourceStatuses) == 0 {
			c.Status.AllocatedResourceStatuses = nil
		}
		mergeResizeConditions(c, nil, false)
	}); err != nil {
		return fmt.Errorf("mountVolume.NodeExpandVolume update pvc status failed: %w", err)
	}
	return nil
}

// expansionFailed is the kubelet's NodeExpander on an error of the driver
// (errors worded as its csi expander's): with recovery, the claim gets
// condition NodeResizeError, and NodeResizeInfeasible for a size the
// driver calls invalid. A driver that cannot expand the volume while it
// is in use (FailedPrecondition) is not asked again until the volume is
// next published, and the pod goes on.
func (e *nodeExpander) expansionFailed(ctx context.Context, cm *csiMount, pvc *corev1.PersistentVolumeClaim, recovery bool, err error) error {
	code := status.Code(err)
	infeasible := code == codes.InvalidArgument || code == codes.OutOfRange || code == codes.NotFound
	switch {
	case code == codes.FailedPrecondition:
		err = fmt.Errorf("Expander.NodeExpand failed to expand the volume : %s", err)
	case infeasible:
		err = fmt.Errorf("Expander.NodeExpand failed to expand the volume %s", err)
	default:
		err = fmt.Errorf("Expander.NodeExpand failed to expand the volume : %w", err)
	}
	if recovery {
		cond := corev1.PersistentVolumeClaimCondition{Type: corev1.PersistentVolumeClaimNodeResizeError, Status: corev1.ConditionTrue,
			LastTransitionTime: metav1.Now(), Message: fmt.Sprintf("failed to expand pvc with %v", err)}
		// MarkNodeExpansionInfeasible and MarkNodeExpansionFailedCondition
		// patch without a resourceVersion.
		if _, perr := e.patchClaimStatus(ctx, pvc, false, func(c *corev1.PersistentVolumeClaim) {
			if infeasible {
				setResizeStatus(c, corev1.PersistentVolumeClaimNodeResizeInfeasible)
			}
			mergeResizeConditions(c, []corev1.PersistentVolumeClaimCondition{cond}, true)
		}); perr != nil {
			e.log.Warn("Cannot mark the claim's node expansion failed", "claim", pvc.Namespace+"/"+pvc.Name, "err", perr)
		}
	}
	if code == codes.FailedPrecondition {
		// MarkForInUseExpansionError.
		cm.inUseExpansionError = true
		e.log.Warn("NodeExpandVolume of a volume in use failed: expanded when next published", "volume", cm.cv.pvName, "err", err)
		return nil
	}
	return err
}

func setResizeStatus(c *corev1.PersistentVolumeClaim, s corev1.ClaimResourceStatus) {
	if c.Status.AllocatedResourceStatuses == nil {
		c.Status.AllocatedResourceStatuses = map[corev1.ResourceName]corev1.ClaimResourceStatus{}
	}
	c.Status.AllocatedResourceStatuses[corev1.ResourceStorage] = s
}

// resizeConditions are the kubelet's knownResizeConditions.
var resizeConditions = map[corev1.PersistentVolumeClaimConditionType]bool{
	corev1.PersistentVolumeClaimFileSystemResizePending: true,
	corev1.PersistentVolumeClaimResizing:                true,
	corev1.PersistentVolumeClaimControllerResizeError:   true,
	corev1.PersistentVolumeClaimNodeResizeError:         true,
}

// mergeResizeConditions is the kubelet's MergeResizeConditionOnPVC: the
// claim's other conditions kept, its resize conditions replaced by add
// (or, with keep, kept where add has none of the type).
func mergeResizeConditions(c *corev1.PersistentVolumeClaim, add []corev1.PersistentVolumeClaimCondition, keep bool) {
	byType := map[corev1.PersistentVolumeClaimConditionType]*corev1.PersistentVolumeClaimCondition{}
	for i := range add {
		byType[add[i].Type] = &add[i]
	}
	out := []corev1.PersistentVolumeClaimCondition{}
	done := map[corev1.PersistentVolumeClaimConditionType]bool{}
	for _, old := range c.Status.Conditions {
		switch n, ok := byType[old.Type]; {
		case !resizeConditions[old.Type]:
			out = append(out, old)
		case ok:
			if n.Status != old.Status {
				out = append(out, *n)
			} else {
				out = append(out, old)
			}
			done[old.Type] = true
		case keep:
			out = append(out, old)
		}
	}
	for _, n := range add {
		if !done[n.Type] {
			out = append(out, n)
		}
	}
	c.Status.Conditions = out
}

// patchClaimStatus is the kubelet's PatchPVCStatus: a strategic merge
// patch of the claim's status from change, with checkVersion refused if
// the claim changed since it was read (its resourceVersion in the patch).
func (e *nodeExpander) patchClaimStatus(ctx context.Context, pvc *corev1.PersistentVolumeClaim, checkVersion bool, change func(*corev1.PersistentVolumeClaim)) (*corev1.PersistentVolumeClaim, error) {
	next := pvc.DeepCopy()
	next.Status.AllocatedResourceStatuses = maps.Clone(pvc.Status.AllocatedResourceStatuses)
	next.Status.Capacity = pvc.Status.Capacity.DeepCopy()
	change(next)
	oldData, err := json.Marshal(pvc)
	if err != nil {
		return nil, err
	}
	newData, err := json.Marshal(next)
	if err != nil {
		return nil, err
	}
	patch, err := strategicpatch.CreateTwoWayMergePatch(oldData, newData, pvc)
	if err != nil {
		return nil, fmt.Errorf("patchPVCStatus failed to patch PVC %q: %w", pvc.Name, err)
	}
	if checkVersion {
		var p map[string]any
		if err := json.Unmarshal(patch, &p); err != nil {
			return nil, err
		}
		meta, _ := p["metadata"].(map[string]any)
		if meta == nil {
			meta = map[string]any{}
		}
		meta["resourceVersion"] = pvc.ResourceVersion
		p["metadata"] = meta
		if patch, err = json.Marshal(p); err != nil {
			return nil, err
		}
	}
	out, err := e.client.CoreV1().PersistentVolumeClaims(pvc.Namespace).Patch(ctx, pvc.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil {
		return nil, fmt.Errorf("patchPVCStatus failed to patch PVC %q: %w", pvc.Name, err)
	}
	return out, nil
}
