package volumes

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
)

// csiMount is a CSI volume published for a pod, remembered (by its host
// path) for what later syncs do with it: publish again
// (requiresRepublish) and expand it when its claim is resized.
type csiMount struct {
	cv             csiVolume
	paths          csiPaths
	publishContext map[string]string
	// republish: the CSIDriver's requiresRepublish.
	republish bool
	// inUseExpansionError: the driver cannot expand it while it is in use
	// (the kubelet's MarkForInUseExpansionError).
	inUseExpansionError bool
}

// rememberCSI records a published volume; obj is its CSIDriver (nil: read
// it, as after a restart).
func (m *Manager) rememberCSI(ctx context.Context, cv csiVolume, paths csiPaths, obj *storagev1.CSIDriver, publishContext map[string]string) *csiMount {
	m.csiMountsMu.Lock()
	cm := m.csiMounts[paths.host]
	m.csiMountsMu.Unlock()
	if cm != nil {
		return cm
	}
	if obj == nil && m.csi != nil {
		obj, _ = m.csiDriverObject(ctx, cv.driver)
	}
	if publishContext == nil && !cv.inline {
		// After a restart: the attachment's metadata, if there is one.
		publishContext, _ = m.attached(ctx, attachmentName(cv.handle, cv.driver, m.nodeName))
	}
	cm = &csiMount{cv: cv, paths: paths, publishContext: publishContext,
		republish: obj != nil && obj.Spec.RequiresRepublish != nil && *obj.Spec.RequiresRepublish}
	m.csiMountsMu.Lock()
	defer m.csiMountsMu.Unlock()
	if cur := m.csiMounts[paths.host]; cur != nil {
		return cur
	}
	m.csiMounts[paths.host] = cm
	return cm
}

// csiMountAt is the published volume whose host path is path.
func (m *Manager) csiMountAt(path string) *csiMount {
	m.csiMountsMu.Lock()
	defer m.csiMountsMu.Unlock()
	return m.csiMounts[path]
}

// forgetCSIMounts drops the pod's published volumes.
func (m *Manager) forgetCSIMounts(uid string) {
	dir := PodDir(m.stateDir, uid) + "/"
	m.csiMountsMu.Lock()
	defer m.csiMountsMu.Unlock()
	for path := range m.csiMounts {
		if strings.HasPrefix(path, dir) {
			delete(m.csiMounts, path)
		}
	}
}

// resync is what each sync of a running pod does to a CSI volume set up
// before, as the kubelet's volume manager does on each reprocessing of the
// pod: publish it again when its CSIDriver has requiresRepublish (the
// remount of MarkRemountRequired: NodePublishVolume with fresh service
// account tokens) and expand it when its claim was resized
// (GenerateExpandInUseVolumeFunc). A failure is logged and posted once
// (FailedMount, VolumeResizeFailed); the pod keeps the volume as it is.
func (m *Manager) resync(ctx context.Context, pod *corev1.Pod, p *podVolumes, name string, cm *csiMount) {
	if cm.republish {
		err := m.republish(ctx, pod, cm)
		if err != nil {
			err = fmt.Errorf("MountVolume.SetUp failed for volume %q : %w", name, err)
		}
		m.reportOnce(pod, p, name+"\x00republish", "FailedMount", err)
	}
	err := m.expandCSI(ctx, pod, cm)
	if err != nil {
		// The kubelet's doOnlineExpansion.
		err = fmt.Errorf("NodeExpandVolume.NodeExpandVolume failed for volume %q : %w", name, err)
	}
	m.reportOnce(pod, p, name+"\x00expand", "VolumeResizeFailed", err)
}

func (m *Manager) republish(ctx context.Context, pod *corev1.Pod, cm *csiMount) error {
	drv, err := m.driver(cm.cv.driver)
	if err != nil {
		return fmt.Errorf("kubernetes.io/csi: mounter.SetUpAt failed to get CSI client: %w", err)
	}
	obj, err := m.csiDriverObject(ctx, cm.cv.driver)
	if err != nil {
		return err
	}
	m.csiMu.Lock()
	defer m.csiMu.Unlock()
	return m.publish(ctx, pod, drv, obj, cm.cv, cm.paths, cm.publishContext)
}

// reportOnce logs and posts err unless it was the last error under key.
func (m *Manager) reportOnce(pod *corev1.Pod, p *podVolumes, key, reason string, err error) {
	switch {
	case err == nil:
		delete(p.lastErr, key)
	case p.lastErr[key] != err.Error():
		p.lastErr[key] = err.Error()
		m.log.Warn("Cannot resync CSI volume", "pod", pod.Namespace+"/"+pod.Name, "podUID", pod.UID, "reason", reason, "err", err)
		m.eventf(pod, corev1.EventTypeWarning, reason, "%s", err.Error())
	}
}

// serviceAccountTokenAttrs is the kubelet's podServiceAccountTokenAttrs:
// with the CSIDriver's tokenRequests, a token of the pod's service account
// bound to the pod for each audience (through the token manager: renewed
// at 80 % of its life), as the JSON of the TokenRequest statuses by
// audience in csi.storage.k8s.io/serviceAccount.tokens, for the volume's
// attributes or, with serviceAccountTokenInSecrets, its secrets.
func (m *Manager) serviceAccountTokenAttrs(ctx context.Context, pod *corev1.Pod, obj *storagev1.CSIDriver) (map[string]string, bool, error) {
	if obj == nil || len(obj.Spec.TokenRequests) == 0 {
		return nil, false, nil
	}
	if m.tokens == nil {
		return nil, false, errNoAPI("service account tokens for CSI driver " + obj.Name)
	}
	out := map[string]authenticationv1.TokenRequestStatus{}
	for _, r := range obj.Spec.TokenRequests {
		tr, err := m.tokens.get(ctx, pod.Namespace, pod.Spec.ServiceAccountName, podTokenRequest(pod.Name, pod.UID, r.Audience, r.ExpirationSeconds))
		if err != nil {
			return nil, false, err
		}
		out[r.Audience] = tr.Status
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, false, err
	}
	inSecrets := obj.Spec.ServiceAccountTokenInSecrets != nil && *obj.Spec.ServiceAccountTokenInSecrets
	return map[string]string{"csi.storage.k8s.io/serviceAccount.tokens": string(b)}, inSecrets, nil
}

// eventf posts an event about the pod, when the manager has a way to.
func (m *Manager) eventf(pod *corev1.Pod, typ, reason, format string, args ...any) {
	if m.event != nil {
		m.event(pod, typ, reason, fmt.Sprintf(format, args...))
	}
}
