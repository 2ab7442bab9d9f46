package volumes

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/component-helpers/storage/ephemeral"
	volumehelpers "k8s.io/component-helpers/storage/volume"
)

const (
	pluginLocal = "kubernetes.io~local-volume"
	// pvcProtectionFinalizer is the kubelet's util.PVCProtectionFinalizer.
	pvcProtectionFinalizer = "kubernetes.io/pvc-protection"
)

// MountWaitError is why a pod's volumes are not ready yet, worded as the
// kubelet's WaitForAttachAndMount error; the runtime emits it as the
// FailedMount event "Unable to attach or mount volumes: ...".
type MountWaitError struct {
	// Unmounted: the volumes the pod's containers use that are not set up.
	Unmounted []string
	// Unattached: volumes that wait for their VolumeAttachment.
	Unattached []string
	// NotProcessed: volumes that could not be resolved (an unbound claim, a
	// missing PV, ...).
	NotProcessed []string
	Err          error
}

func (e *MountWaitError) Error() string {
	return fmt.Sprintf("Unable to attach or mount volumes: unmounted volumes=%v, unattached volumes=%v, failed to process volumes=%v: %v",
		e.Unmounted, e.Unattached, e.NotProcessed, e.Err)
}

func (e *MountWaitError) Unwrap() error { return e.Err }

// processError: the volume cannot be turned into something to mount yet
// (the kubelet's desired-state-of-world populator errors).
type processError struct{ err error }

func (e *processError) Error() string { return e.err.Error() }
func (e *processError) Unwrap() error { return e.err }

// attachError: the volume waits for its VolumeAttachment to be attached.
type attachError struct{ err error }

func (e *attachError) Error() string { return e.err.Error() }
func (e *attachError) Unwrap() error { return e.err }

// claimPlugin resolves persistentVolumeClaim and generic ephemeral
// volumes as the kubelet's desired-state-of-world populator does
// (createVolumeSpec), and sets up the PV behind them: hostPath, local (the
// kubelet's local volume plugin) or CSI (the CSI plugin, csi.go).
type claimPlugin struct {
	stateDir string
	nodeName string
	// client reads claims, PVs and the Node; nil on a standalone node
	// (claims fail).
	client kubernetes.Interface
	mounts hostMounts
	csi    csiSetter
}

// podVolumeUse lists the volumes the pod's containers mount and those they
// use as raw devices (the kubelet's GetPodVolumeNames).
func podVolumeUse(pod *corev1.Pod) (mounts, devices map[string]bool) {
	mounts, devices = map[string]bool{}, map[string]bool{}
	add := func(vms []corev1.VolumeMount, vds []corev1.VolumeDevice) {
		for _, vm := range vms {
			mounts[vm.Name] = true
		}
		for _, vd := range vds {
			devices[vd.Name] = true
		}
	}
	for _, c := range pod.Spec.InitContainers {
		add(c.VolumeMounts, c.VolumeDevices)
	}
	for _, c := range pod.Spec.Containers {
		add(c.VolumeMounts, c.VolumeDevices)
	}
	for _, c := range pod.Spec.EphemeralContainers {
		add(c.VolumeMounts, c.VolumeDevices)
	}
	return mounts, devices
}

// claimOf is the claim a PVC or generic ephemeral volume refers to, with
// whether the pod mounts it read-only.
func claimOf(pod *corev1.Pod, v *corev1.Volume) (name string, readOnly, isEphemeral bool) {
	if v.PersistentVolumeClaim != nil {
		return v.PersistentVolumeClaim.ClaimName, v.PersistentVolumeClaim.ReadOnly, false
	}
	return ephemeral.VolumeClaimName(pod, v), false, true
}

// resolveClaim is the kubelet's createVolumeSpec for a claim: the bound,
// not deleted PVC of the pod's namespace (owned by the pod for a generic
// ephemeral volume) and the PV bound to it, in a volume mode the pod can
// use. Errors are processErrors worded as the kubelet's.
func (c *claimPlugin) resolveClaim(ctx context.Context, pod *corev1.Pod, v *corev1.Volume) (*corev1.PersistentVolumeClaim, *corev1.PersistentVolume, error) {
	claimName, _, isEphemeral := claimOf(pod, v)
	if c.client == nil {
		return nil, nil, &processError{errNoAPI(fmt.Sprintf("PVC %s/%s", pod.Namespace, claimName))}
	}
	wrap := func(err error) error {
		return &processError{fmt.Errorf("error processing PVC %s/%s: %v", pod.Namespace, claimName, err)}
	}
	pvc, err := c.client.CoreV1().PersistentVolumeClaims(pod.Namespace).Get(ctx, claimName, metav1.GetOptions{})
	if err != nil {
		return nil, nil, wrap(fmt.Errorf("failed to fetch PVC from API server: %v", err))
	}
	switch {
	case pvc.DeletionTimestamp != nil && !slices.Contains(pvc.Finalizers, pvcProtectionFinalizer):
		return nil, nil, wrap(errors.New("PVC is being deleted"))
	case pvc.Status.Phase != corev1.ClaimBound:
		return nil, nil, wrap(errors.New("PVC is not bound"))
	case pvc.Spec.VolumeName == "":
		return nil, nil, wrap(errors.New("PVC has empty pvc.Spec.VolumeName"))
	}
	if isEphemeral {
		if err := ephemeral.VolumeIsForPod(pod, pvc); err != nil {
			return nil, nil, &processError{err}
		}
	}
	pv, err := c.client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		return nil, nil, wrap(fmt.Errorf("failed to fetch PV %s from API server: %v", pvc.Spec.VolumeName, err))
	}
	switch {
	case pv.Spec.ClaimRef == nil:
		return nil, nil, wrap(fmt.Errorf("found PV object %s but it has a nil pv.Spec.ClaimRef indicating it is not yet bound to the claim", pv.Name))
	case pv.Spec.ClaimRef.UID != pvc.UID:
		return nil, nil, wrap(fmt.Errorf("found PV object %s but its pv.Spec.ClaimRef.UID %s does not point to claim.UID %s", pv.Name, pv.Spec.ClaimRef.UID, pvc.UID))
	case !volumehelpers.CheckAccessModes(pvc, pv):
		return nil, nil, wrap(fmt.Errorf("PV %s offers access modes %v, not the claim's %v", pv.Name, pv.Spec.AccessModes, pvc.Spec.AccessModes))
	}
	mode := corev1.PersistentVolumeFilesystem
	if pv.Spec.VolumeMode != nil {
		mode = *pv.Spec.VolumeMode
	}
	mounts, devices := podVolumeUse(pod)
	switch {
	case mounts[v.Name] && mode != corev1.PersistentVolumeFilesystem:
		return nil, nil, &processError{fmt.Errorf("volume %s has volumeMode %s, but is specified in volumeMounts", v.Name, mode)}
	case devices[v.Name] && mode != corev1.PersistentVolumeBlock:
		return nil, nil, &processError{fmt.Errorf("volume %s has volumeMode %s, but is specified in volumeDevices", v.Name, mode)}
	case devices[v.Name] && pv.Spec.CSI == nil:
		return nil, nil, &processError{fmt.Errorf("volume %s has volumeMode Block: raw block volumes (volumeDevices) are supported for CSI persistent volumes only", v.Name)}
	}
	return pvc, pv, nil
}

// setupClaim sets up the PV behind a PVC or generic ephemeral volume.
func (c *claimPlugin) setupClaim(ctx context.Context, pod *corev1.Pod, v *corev1.Volume) (string, error) {
	_, pv, err := c.resolveClaim(ctx, pod, v)
	if err != nil {
		return "", err
	}
	_, readOnly, _ := claimOf(pod, v)
	s := &pv.Spec
	switch {
	case s.HostPath != nil:
		return s.HostPath.Path, checkHostPath(&corev1.HostPathVolumeSource{Path: s.HostPath.Path, Type: s.HostPath.Type})
	case s.Local != nil:
		return c.setupLocal(ctx, pod, pv, readOnly)
	case s.CSI != nil:
		return c.csi.setup(ctx, pod, csiVolumeFromPV(pv, readOnly))
	}
	return "", fmt.Errorf("persistent volume %s: its volume type is not supported by nodelet (local, hostPath and csi are)", pv.Name)
}

// setupLocal is the kubelet's local volume plugin: the PV's path (on this
// node, by its node affinity) bind-mounted into the pod's volume
// directory, given to fsGroup unless read-only.
func (c *claimPlugin) setupLocal(ctx context.Context, pod *corev1.Pod, pv *corev1.PersistentVolume, readOnly bool) (string, error) {
	node, err := c.client.CoreV1().Nodes().Get(ctx, c.nodeName, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("read node %s for the node affinity of local volume %s: %w", c.nodeName, pv.Name, err)
	}
	if err := volumehelpers.CheckNodeAffinity(pv, node.Labels); err != nil {
		return "", fmt.Errorf("local volume %s is not on node %s: %v", pv.Name, c.nodeName, err)
	}
	src := pv.Spec.Local.Path
	fi, err := os.Stat(src)
	if err != nil {
		return "", fmt.Errorf("local volume %s: %w", pv.Name, err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("local volume %s: %s is not a directory (block device local volumes are not supported by nodelet)", pv.Name, src)
	}
	dir := VolumeDir(c.stateDir, string(pod.UID), pluginLocal, pv.Name)
	if mounted, err := c.mounts.isMounted(dir); err != nil || mounted {
		return dir, err
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return "", err
	}
	opts := []string{"bind"}
	if readOnly {
		opts = append(opts, "ro")
	}
	if err := c.mounts.Mount(src, dir, "", opts); err != nil {
		return "", fmt.Errorf("bind-mount local volume %s: %w", pv.Name, err)
	}
	if !readOnly {
		if err := applyFSGroup(dir, pod, false); err != nil {
			return "", err
		}
	}
	return dir, nil
}

// applyFSGroup is the kubelet's SetVolumeOwnership with the pod's
// fsGroupChangePolicy: OnRootMismatch skips a volume whose root already
// has the group and permissions (requiresPermissionChange).
func applyFSGroup(dir string, pod *corev1.Pod, readOnly bool) error {
	fsGroup := fsGroupOf(pod)
	if fsGroup == nil {
		return nil
	}
	sc := pod.Spec.SecurityContext
	if sc.FSGroupChangePolicy != nil && *sc.FSGroupChangePolicy == corev1.FSGroupChangeOnRootMismatch &&
		!requiresPermissionChange(dir, *fsGroup, readOnly) {
		return nil
	}
	return setVolumeOwnership(dir, fsGroup, readOnly)
}

// requiresPermissionChange is the kubelet's: the root's group differs, or
// its mode lacks group rw(x) or setgid.
func requiresPermissionChange(dir string, fsGroup int64, readOnly bool) bool {
	fi, err := os.Stat(dir)
	if err != nil || !fi.IsDir() {
		return true
	}
	if gid, ok := fileGID(fi); !ok || gid != fsGroup {
		return true
	}
	perms := rwMask
	if readOnly {
		perms = roMask
	}
	perms |= execMask
	return fi.Mode().Perm()&perms != perms || fi.Mode()&os.ModeSetgid == 0
}

// notFoundIsNil turns a NotFound API error into nil, nil.
func notFoundIsNil[T any](obj *T, err error) (*T, error) {
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return obj, err
}

// joinErrs joins error strings as the kubelet's PopPodErrors ("; ").
func joinErrs(errs []error) error {
	s := make([]string, len(errs))
	for i, e := range errs {
		s[i] = e.Error()
	}
	return errors.New(strings.Join(s, "; "))
}

// fileGID is the group owning fi.
func fileGID(fi os.FileInfo) (int64, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || st == nil {
		return 0, false
	}
	return int64(st.Gid), true
}
