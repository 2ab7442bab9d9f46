package volumes

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	resourcehelper "k8s.io/component-helpers/resource"

	"github.com/nodelet/nodelet/internal/podutil"
)

// The kubelet's plugin directory names.
const (
	pluginEmptyDir    = "kubernetes.io~empty-dir"
	pluginConfigMap   = "kubernetes.io~configmap"
	pluginSecret      = "kubernetes.io~secret"
	pluginDownwardAPI = "kubernetes.io~downward-api"
	pluginProjected   = "kubernetes.io~projected"
)

// VolumeDir is <stateDir>/pods/<uid>/volumes/<plugin>/<name>.
func VolumeDir(stateDir, uid, plugin, name string) string {
	return filepath.Join(PodDir(stateDir, uid), "volumes", plugin, name)
}

// volumePlugins are the kubelet's in-tree volume plugins nodelet has
// (emptyDir, hostPath, configMap, secret, downwardAPI, projected), the
// one place that sets up a pod's volume by its type: claims go to the PV
// part (pv.go), inline CSI volumes to the CSI plugin (csi.go).
type volumePlugins struct {
	stateDir    string
	refuseHP    bool
	allocatable corev1.ResourceList
	// objects reads configMaps and secrets; nil: no way to.
	objects objectSource
	// tokens serve service account token projections; nil: they fail.
	tokens tokenGetter
	// bundles and podCerts serve clusterTrustBundle and podCertificate
	// projections (trustbundle.go, podcert.go); podCerts is nil on a
	// standalone node.
	bundles  trustAnchorSource
	podCerts podCredentialSource
	claims   claimSetter
	csi      csiSetter
}

// tokenGetter is the token manager (token.go) as its users see it: a
// service account token, cached and renewed at 80 % of its life. The CSI
// plugin asks it too, for the CSIDriver's tokenRequests.
type tokenGetter interface {
	get(ctx context.Context, namespace, name string, tr *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error)
}

// trustAnchorSource is the cluster trust bundle manager (trustbundle.go).
type trustAnchorSource interface {
	byName(ctx context.Context, name string, allowMissing bool) ([]byte, error)
	bySigner(ctx context.Context, signer string, selector *metav1.LabelSelector, allowMissing bool) ([]byte, error)
}

// podCredentialSource is the pod certificate manager (podcert.go): the
// key and chain of a podCertificate source.
type podCredentialSource interface {
	bundle(pod *corev1.Pod, volume string, index int) ([]byte, []byte, error)
}

// claimSetter sets up the PV behind a persistentVolumeClaim or ephemeral
// volume (pv.go).
type claimSetter interface {
	setupClaim(ctx context.Context, pod *corev1.Pod, v *corev1.Volume) (string, error)
}

// csiSetter publishes a CSI volume for a pod (csi.go).
type csiSetter interface {
	setup(ctx context.Context, pod *corev1.Pod, cv csiVolume) (string, error)
}

var (
	_ tokenGetter         = (*tokenManager)(nil)
	_ trustAnchorSource   = (*trustBundles)(nil)
	_ podCredentialSource = (*podCertificates)(nil)
	_ claimSetter         = (*claimPlugin)(nil)
	_ csiSetter           = (*csiPlugin)(nil)
)

// setupVolume makes one volume ready and returns its host path.
func (vp *volumePlugins) setupVolume(ctx context.Context, pod *corev1.Pod, v *corev1.Volume) (string, error) {
	switch {
	case v.HostPath != nil:
		if vp.refuseHP && podutil.IsStaticPod(pod) {
			return "", errors.New("hostPath volumes are not allowed in static pods on this node (runtime.allowHostPathForStaticPods is false)")
		}
		return v.HostPath.Path, checkHostPath(v.HostPath)
	case v.EmptyDir != nil:
		return vp.setupEmptyDir(pod, v)
	case v.ConfigMap != nil:
		return vp.project(pod, v, pluginConfigMap, false, func() (map[string]FileProjection, error) {
			return vp.configMapPayload(ctx, pod, v.ConfigMap.Name, v.ConfigMap.Items, v.ConfigMap.DefaultMode, v.ConfigMap.Optional)
		})
	case v.Secret != nil:
		return vp.project(pod, v, pluginSecret, true, func() (map[string]FileProjection, error) {
			return vp.secretPayload(ctx, pod, v.Secret.SecretName, v.Secret.Items, v.Secret.DefaultMode, v.Secret.Optional)
		})
	case v.DownwardAPI != nil:
		return vp.project(pod, v, pluginDownwardAPI, true, func() (map[string]FileProjection, error) {
			return DownwardAPIPayload(v.DownwardAPI.Items, pod, vp.allocatable, v.DownwardAPI.DefaultMode)
		})
	case v.Projected != nil:
		return vp.project(pod, v, pluginProjected, true, func() (map[string]FileProjection, error) {
			return vp.projectedPayload(ctx, pod, v.Name, v.Projected)
		})
	case v.PersistentVolumeClaim != nil, v.Ephemeral != nil:
		return vp.claims.setupClaim(ctx, pod, v)
	case v.CSI != nil:
		return vp.csi.setup(ctx, pod, csiVolumeInline(pod, v))
	}
	return "", fmt.Errorf("the %s volume type is not supported by nodelet (emptyDir, hostPath, configMap, secret, downwardAPI, projected, persistentVolumeClaim, ephemeral and csi are)", volumeType(v))
}

// setupEmptyDir: a world-writable directory on the node's disk, or a
// tmpfs for medium Memory.
func (vp *volumePlugins) setupEmptyDir(pod *corev1.Pod, v *corev1.Volume) (string, error) {
	dir := VolumeDir(vp.stateDir, string(pod.UID), pluginEmptyDir, v.Name)
	_, statErr := os.Stat(dir)
	fresh := os.IsNotExist(statErr)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return "", err
	}
	switch v.EmptyDir.Medium {
	case corev1.StorageMediumDefault:
	case corev1.StorageMediumMemory:
		if mounted, err := isMountPoint(dir); err == nil && !mounted {
			fresh = true // a new tmpfs needs its mode and group
		}
		if err := mountTmpfs(dir, vp.tmpfsSize(pod, v.EmptyDir.SizeLimit)); err != nil {
			return "", err
		}
	default:
		return "", fmt.Errorf("emptyDir medium %q is not supported by nodelet", v.EmptyDir.Medium)
	}
	if !fresh {
		// Set up at an earlier sync: a chmod now would drop the setgid
		// bit fsGroup ownership gave it (the kubelet's emptyDir SetUpAt
		// returns early once the volume is ready).
		return dir, nil
	}
	// World-writable as the kubelet makes it, for non-root containers; as
	// its emptyDir setupDir, only when the permissions differ, so that a
	// tmpfs keeps its sticky bit (1777).
	if fi, err := os.Stat(dir); err != nil {
		return "", err
	} else if fi.Mode().Perm() != 0o777 {
		if err := os.Chmod(dir, 0o777); err != nil {
			return "", err
		}
	}
	if err := setVolumeOwnership(dir, fsGroupOf(pod), false); err != nil {
		return "", err
	}
	return dir, nil
}

// project writes a volume of files with the AtomicWriter into its plugin
// directory, on tmpfs when memory (anything that may hold a secret).
func (vp *volumePlugins) project(pod *corev1.Pod, v *corev1.Volume, plugin string, memory bool,
	payload func() (map[string]FileProjection, error)) (string, error) {
	dir := VolumeDir(vp.stateDir, string(pod.UID), plugin, v.Name)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return "", err
	}
	if memory {
		if err := mountTmpfs(dir, vp.tmpfsSize(pod, nil)); err != nil {
			return "", err
		}
	} else if err := os.Chmod(dir, 0o777); err != nil {
		return "", err
	}
	files, err := payload()
	if err != nil {
		return "", err
	}
	fsGroup := fsGroupOf(pod)
	w := &AtomicWriter{TargetDir: dir}
	if err := w.Write(files, func(ts string) error { return setVolumeOwnership(filepath.Join(dir, ts), fsGroup, true) }); err != nil {
		return "", err
	}
	return dir, nil
}

// tmpfsSize is the kubelet's calculateEmptyDirMemorySize: the node's
// memory, or the pod's memory limit when every container has one, or the
// volume's sizeLimit, whichever is smallest.
func (vp *volumePlugins) tmpfsSize(pod *corev1.Pod, sizeLimit *resource.Quantity) int64 {
	size := int64(0)
	if q, ok := vp.allocatable[corev1.ResourceMemory]; ok {
		size = q.Value()
	}
	smaller := func(v int64) {
		if v > 0 && (size <= 0 || v <= size) {
			size = v
		}
	}
	if podMemoryLimited(pod) {
		q := resourcehelper.PodLimits(pod, resourcehelper.PodResourcesOptions{})[corev1.ResourceMemory]
		smaller(q.Value())
	}
	if sizeLimit != nil {
		smaller(sizeLimit.Value())
	}
	return size
}

// podMemoryLimited: every container sets a memory limit (else the pod's
// cgroup has none).
func podMemoryLimited(pod *corev1.Pod) bool {
	n := 0
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range list {
			if q, ok := c.Resources.Limits[corev1.ResourceMemory]; !ok || q.IsZero() {
				return false
			}
			n++
		}
	}
	return n > 0
}

func fsGroupOf(pod *corev1.Pod) *int64 {
	if sc := pod.Spec.SecurityContext; sc != nil {
		return sc.FSGroup
	}
	return nil
}

// fsUserOf is the kubelet's FsUserFrom: the user every container runs as,
// when they all run as the same one.
func fsUserOf(pod *corev1.Pod) *int64 {
	var user *int64
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range list {
			var u *int64
			if pod.Spec.SecurityContext != nil {
				u = pod.Spec.SecurityContext.RunAsUser
			}
			if c.SecurityContext != nil && c.SecurityContext.RunAsUser != nil {
				u = c.SecurityContext.RunAsUser
			}
			if u == nil || (user != nil && *user != *u) {
				return nil
			}
			user = u
		}
	}
	return user
}

func (vp *volumePlugins) getObject(ctx context.Context, k objectKey) (any, error) {
	if vp.objects == nil {
		return nil, errNoAPI(fmt.Sprintf("%s %q", map[string]string{kindConfigMap: "configmap", kindSecret: "secret"}[k.Kind], k.Name))
	}
	return vp.objects.get(ctx, k)
}

// configMapPayload reads a configMap and makes its files; a missing
// optional configMap is an empty one.
func (vp *volumePlugins) configMapPayload(ctx context.Context, pod *corev1.Pod, name string, items []corev1.KeyToPath, mode *int32, opt *bool) (map[string]FileProjection, error) {
	optional := opt != nil && *opt
	o, err := vp.getObject(ctx, objectKey{Kind: kindConfigMap, Namespace: pod.Namespace, Name: name})
	cm, _ := o.(*corev1.ConfigMap)
	if err != nil || cm == nil {
		if !(apierrors.IsNotFound(err) && optional) {
			if err == nil {
				err = fmt.Errorf("configmap %q not found", name)
			}
			return nil, err
		}
		cm = &corev1.ConfigMap{}
	}
	return ConfigMapPayload(items, cm, mode, optional)
}

// secretPayload reads a secret and makes its files.
func (vp *volumePlugins) secretPayload(ctx context.Context, pod *corev1.Pod, name string, items []corev1.KeyToPath, mode *int32, opt *bool) (map[string]FileProjection, error) {
	optional := opt != nil && *opt
	o, err := vp.getObject(ctx, objectKey{Kind: kindSecret, Namespace: pod.Namespace, Name: name})
	s, _ := o.(*corev1.Secret)
	if err != nil || s == nil {
		if !(apierrors.IsNotFound(err) && optional) {
			if err == nil {
				err = fmt.Errorf("secret %q not found", name)
			}
			return nil, err
		}
		s = &corev1.Secret{}
	}
	return SecretPayload(items, s, mode, optional)
}

// projectedPayload is the kubelet's projected collectData: every source's
// files in one volume.
func (vp *volumePlugins) projectedPayload(ctx context.Context, pod *corev1.Pod, volume string, src *corev1.ProjectedVolumeSource) (map[string]FileProjection, error) {
	payload := map[string]FileProjection{}
	var errs []error
	merge := func(files map[string]FileProjection, err error) {
		if err != nil {
			errs = append(errs, err)
			return
		}
		for k, v := range files {
			payload[k] = v
		}
	}
	fsUser, fsGroup := fsUserOf(pod), fsGroupOf(pod)
	// With an fsUser or fsGroup a token, trust bundle or credential is the
	// owner's alone (SetVolumeOwnership adds group read).
	privateMode := modeOr(src.DefaultMode)
	if fsUser != nil || fsGroup != nil {
		privateMode = 0o600
	}
	for i, s := range src.Sources {
		switch {
		case s.Secret != nil:
			merge(vp.secretPayload(ctx, pod, s.Secret.Name, s.Secret.Items, src.DefaultMode, s.Secret.Optional))
		case s.ConfigMap != nil:
			merge(vp.configMapPayload(ctx, pod, s.ConfigMap.Name, s.ConfigMap.Items, src.DefaultMode, s.ConfigMap.Optional))
		case s.DownwardAPI != nil:
			merge(DownwardAPIPayload(s.DownwardAPI.Items, pod, vp.allocatable, src.DefaultMode))
		case s.ServiceAccountToken != nil:
			tp := s.ServiceAccountToken
			tok, err := vp.token(ctx, pod, tp)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			payload[tp.Path] = FileProjection{Data: []byte(tok), Mode: privateMode, FsUser: fsUser}
		case s.ClusterTrustBundle != nil:
			anchors, err := vp.trustAnchors(ctx, s.ClusterTrustBundle)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			payload[s.ClusterTrustBundle.Path] = FileProjection{Data: anchors, Mode: privateMode, FsUser: fsUser}
		case s.PodCertificate != nil:
			if vp.podCerts == nil {
				errs = append(errs, errNoAPI("podCertificate projection"))
				continue
			}
			key, chain, err := vp.podCerts.bundle(pod, volume, i)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			pc := s.PodCertificate
			if pc.CredentialBundlePath != "" {
				payload[pc.CredentialBundlePath] = FileProjection{Data: append(append([]byte{}, key...), chain...), Mode: privateMode, FsUser: fsUser}
			}
			if pc.KeyPath != "" {
				payload[pc.KeyPath] = FileProjection{Data: key, Mode: privateMode, FsUser: fsUser}
			}
			if pc.CertificateChainPath != "" {
				payload[pc.CertificateChainPath] = FileProjection{Data: chain, Mode: privateMode, FsUser: fsUser}
			}
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return payload, nil
}

// trustAnchors are the PEM certificates of the bundle a projection names,
// or of those its signer and selector match (the kubelet's projected
// collectData).
func (vp *volumePlugins) trustAnchors(ctx context.Context, p *corev1.ClusterTrustBundleProjection) ([]byte, error) {
	optional := p.Optional != nil && *p.Optional
	switch {
	case p.Name != nil:
		return vp.bundles.byName(ctx, *p.Name, optional)
	case p.SignerName != nil:
		return vp.bundles.bySigner(ctx, *p.SignerName, p.LabelSelector, optional)
	}
	return nil, errors.New("ClusterTrustBundle projection requires either name or signerName to be set")
}

// token is a service account token for the pod through the TokenRequest
// API, bound to the pod.
func (vp *volumePlugins) token(ctx context.Context, pod *corev1.Pod, tp *corev1.ServiceAccountTokenProjection) (string, error) {
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	if vp.tokens == nil {
		return "", errNoAPI(fmt.Sprintf("token of service account %s/%s", pod.Namespace, sa))
	}
	tr, err := vp.tokens.get(ctx, pod.Namespace, sa, podTokenRequest(pod.Name, pod.UID, tp.Audience, tp.ExpirationSeconds))
	if err != nil {
		return "", err
	}
	return tr.Status.Token, nil
}

// volumeType names the type of an unsupported volume for messages.
func volumeType(v *corev1.Volume) string {
	s := v.VolumeSource
	switch {
	case s.PersistentVolumeClaim != nil:
		return "persistentVolumeClaim"
	case s.Ephemeral != nil:
		return "ephemeral"
	case s.CSI != nil:
		return "csi"
	case s.NFS != nil:
		return "nfs"
	case s.Image != nil:
		return "image"
	case s.ISCSI != nil:
		return "iscsi"
	case s.FC != nil:
		return "fc"
	}
	return "requested"
}
