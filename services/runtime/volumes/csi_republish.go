package volumes

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"

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

// publications are the CSI volumes published for pods, by host path.
type publications struct {
	stateDir string
	mu       sync.Mutex
	byPath   map[string]*csiMount
}

func newPublications(stateDir string) *publications {
	return &publications{stateDir: stateDir, byPath: map[string]*csiMount{}}
}

// at is the published volume whose host path is path.
func (p *publications) at(path string) *csiMount {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.byPath[path]
}

// add records cm unless a volume is recorded at its host path already,
// and returns the one recorded.
func (p *publications) add(cm *csiMount) *csiMount {
	p.mu.Lock()
	defer p.mu.Unlock()
	if cur := p.byPath[cm.paths.host]; cur != nil {
		return cur
	}
	p.byPath[cm.paths.host] = cm
	return cm
}

// forgetPod drops the pod's published volumes.
func (p *publications) forgetPod(uid string) {
	dir := PodDir(p.stateDir, uid) + "/"
	p.mu.Lock()
	defer p.mu.Unlock()
	for path := range p.byPath {
		if strings.HasPrefix(path, dir) {
			delete(p.byPath, path)
		}
	}
}

// remember records a published volume; obj is its CSIDriver (nil: read
// it, as after a restart).
func (c *csiPlugin) remember(ctx context.Context, cv csiVolume, paths csiPaths, obj *storagev1.CSIDriver, publishContext map[string]string) *csiMount {
	if cm := c.published.at(paths.host); cm != nil {
		return cm
	}
	if obj == nil && c.registry != nil {
		obj, _ = c.driverObject(ctx, cv.driver)
	}
	if publishContext == nil && !cv.inline {
		// After a restart: the attachment's metadata, if there is one.
		publishContext, _ = c.attached(ctx, attachmentName(cv.handle, cv.driver, c.nodeName))
	}
	return c.published.add(&csiMount{cv: cv, paths: paths, publishContext: publishContext,
		republish: obj != nil && obj.Spec.RequiresRepublish != nil && *obj.Spec.RequiresRepublish})
}

// mountAt is the published volume whose host path is path.
func (c *csiPlugin) mountAt(path string) *csiMount { return c.published.at(path) }

// forgetPod drops the pod's published volumes.
func (c *csiPlugin) forgetPod(uid string) { c.published.forgetPod(uid) }

// resync is what each sync of a running pod does to a CSI volume set up
// before, as the kubelet's volume manager does on each reprocessing of the
// pod: publish it again when its CSIDriver has requiresRepublish (the
// remount of MarkRemountRequired: NodePublishVolume with fresh service
// account tokens) and expand it when its claim was resized
// (GenerateExpandInUseVolumeFunc). A failure is logged and posted once
// (FailedMount, VolumeResizeFailed) through report, under a key of the
// volume and the step; the pod keeps the volume as it is.
func (c *csiPlugin) resync(ctx context.Context, pod *corev1.Pod, name string, cm *csiMount, report func(key, reason string, err error)) {
	if cm.republish {
		err := c.republish(ctx, pod, cm)
		if err != nil {
			err = fmt.Errorf("MountVolume.SetUp failed for volume %q : %w", name, err)
		}
		report(name+"\x00republish", "FailedMount", err)
	}
	err := c.expander.expand(ctx, pod, cm)
	if err != nil {
		// The kubelet's doOnlineExpansion.
		err = fmt.Errorf("NodeExpandVolume.NodeExpandVolume failed for volume %q : %w", name, err)
	}
	report(name+"\x00expand", "VolumeResizeFailed", err)
}

func (c *csiPlugin) republish(ctx context.Context, pod *corev1.Pod, cm *csiMount) error {
	drv, err := c.driver(cm.cv.driver)
	if err != nil {
		return fmt.Errorf("kubernetes.io/csi: mounter.SetUpAt failed to get CSI client: %w", err)
	}
	obj, err := c.driverObject(ctx, cm.cv.driver)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.publish(ctx, pod, drv, obj, cm.cv, cm.paths, cm.publishContext)
}

// serviceAccountTokenAttrs is the kubelet's podServiceAccountTokenAttrs:
// with the CSIDriver's tokenRequests, a token of the pod's service account
// bound to the pod for each audience (through the token manager: renewed
// at 80 % of its life), as the JSON of the TokenRequest statuses by
// audience in csi.storage.k8s.io/serviceAccount.tokens, for the volume's
// attributes or, with serviceAccountTokenInSecrets, its secrets.
func (c *csiPlugin) serviceAccountTokenAttrs(ctx context.Context, pod *corev1.Pod, obj *storagev1.CSIDriver) (map[string]string, bool, error) {
	if obj == nil || len(obj.Spec.TokenRequests) == 0 {
		return nil, false, nil
	}
	if c.tokens == nil {
		return nil, false, errNoAPI("service account tokens for CSI driver " + obj.Name)
	}
	out := map[string]authenticationv1.TokenRequestStatus{}
	for _, r := range obj.Spec.TokenRequests {
		tr, err := c.tokens.get(ctx, pod.Namespace, pod.Spec.ServiceAccountName, podTokenRequest(pod.Name, pod.UID, r.Audience, r.ExpirationSeconds))
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

// eventRecorder posts an event about a pod (Options.Event); nil: none.
type eventRecorder func(pod *corev1.Pod, eventType, reason, message string)

// eventf posts an event about the pod, when there is a way to.
func (e eventRecorder) eventf(pod *corev1.Pod, typ, reason, format string, args ...any) {
	if e != nil {
		e(pod, typ, reason, fmt.Sprintf(format, args...))
	}
}
