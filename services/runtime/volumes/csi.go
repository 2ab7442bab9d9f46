package volumes

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/nodelet/nodelet/services/runtime/csi"
)

const (
	pluginCSI = "kubernetes.io~csi"
	// volDataFile is the kubelet's vol_data.json: what a CSI volume's
	// teardown needs, kept beside its target (and staging) path so that it
	// survives a restart.
	volDataFile = "vol_data.json"
)

// csiPlugin is the kubelet's CSI volume plugin (pkg/volume/csi): its
// attacher and mounter (this file), block mapper (csi_block.go), unmounter
// (csi_teardown.go), the remount of requiresRepublish (csi_republish.go)
// and, through its nodeExpander, node expansion (csi_expand.go). It holds
// the registered drivers and the API client it calls them with, and
// remembers what it published.
type csiPlugin struct {
	stateDir string
	nodeName string
	// client reads CSIDriver objects, VolumeAttachments and secrets; nil
	// on a standalone node.
	client kubernetes.Interface
	// registry holds the registered CSI drivers; nil: CSI volumes fail.
	registry *csi.Registry
	mounts   mountChecker
	inUse    inUseRecorder
	// tokens serve the CSIDriver's tokenRequests; nil: they fail.
	tokens tokenGetter
	events eventRecorder
	log    *slog.Logger
	// mu serialises staging, publishing and their reverse, so that a
	// volume is never unstaged while another pod publishes it.
	mu sync.Mutex
	// published are the CSI volumes published for pods (csi_republish.go).
	published *publications
	expander  *nodeExpander
}

// mountChecker says whether something is mounted at a path (hostMounts).
type mountChecker interface {
	isMounted(path string) (bool, error)
}

// inUseRecorder is what the CSI plugin tells the in-use tracker
// (inuse.go), and the kubelet's ReportedInUse gate it waits at.
type inUseRecorder interface {
	markInUse(uid types.UID, name string)
	reportedInUse(ctx context.Context, name string) error
	signal()
}

var (
	_ mountChecker  = hostMounts{}
	_ inUseRecorder = (*inUseTracker)(nil)
)

func newCSIPlugin(stateDir, nodeName string, client kubernetes.Interface, registry *csi.Registry, mounts mountChecker,
	inUse inUseRecorder, tokens tokenGetter, events eventRecorder, log *slog.Logger) *csiPlugin {
	c := &csiPlugin{stateDir: stateDir, nodeName: nodeName, client: client, registry: registry, mounts: mounts,
		inUse: inUse, tokens: tokens, events: events, log: log, published: newPublications(stateDir)}
	c.expander = &nodeExpander{client: client, nodeName: nodeName, csi: c, events: events, log: log}
	return c
}

// csiVolume is a CSI volume to set up: from a PV or inline in the pod.
type csiVolume struct {
	// specName names the volume's directory: the PV's name, or the pod
	// volume's for an inline volume.
	specName     string
	driver       string
	handle       string
	readOnly     bool
	fsType       string
	attributes   map[string]string
	mountOptions []string
	// accessModes are the PV's (nil inline: ReadWriteOnce).
	accessModes   []corev1.PersistentVolumeAccessMode
	stageSecret   *corev1.SecretReference
	publishSecret *corev1.SecretReference
	expandSecret  *corev1.SecretReference
	inline        bool
	// block: a raw block volume (volumeMode Block, volumeDevices).
	block bool
	// pvName and the claim (namespace/name) of a PV's volume, which a
	// resize expands.
	pvName, claimNamespace, claimName string
}

func csiVolumeFromPV(pv *corev1.PersistentVolume, claimReadOnly bool) csiVolume {
	s := pv.Spec.CSI
	cv := csiVolume{
		specName: pv.Name, driver: s.Driver, handle: s.VolumeHandle,
		readOnly: claimReadOnly || s.ReadOnly, fsType: s.FSType, attributes: s.VolumeAttributes,
		mountOptions: pv.Spec.MountOptions, accessModes: pv.Spec.AccessModes,
		stageSecret: s.NodeStageSecretRef, publishSecret: s.NodePublishSecretRef, expandSecret: s.NodeExpandSecretRef,
		block: pv.Spec.VolumeMode != nil && *pv.Spec.VolumeMode == corev1.PersistentVolumeBlock, pvName: pv.Name,
	}
	if ref := pv.Spec.ClaimRef; ref != nil {
		cv.claimNamespace, cv.claimName = ref.Namespace, ref.Name
	}
	return cv
}

func csiVolumeInline(pod *corev1.Pod, v *corev1.Volume) csiVolume {
	s := v.CSI
	cv := csiVolume{
		specName: v.Name, driver: s.Driver, handle: makeVolumeHandle(string(pod.UID), v.Name),
		readOnly: s.ReadOnly != nil && *s.ReadOnly, attributes: s.VolumeAttributes, inline: true,
	}
	if s.FSType != nil {
		cv.fsType = *s.FSType
	}
	if s.NodePublishSecretRef != nil {
		cv.publishSecret = &corev1.SecretReference{Name: s.NodePublishSecretRef.Name, Namespace: pod.Namespace}
	}
	return cv
}

// volData is vol_data.json, with the kubelet's keys.
type volData struct {
	SpecVolID           string `json:"specVolID,omitempty"`
	VolumeHandle        string `json:"volumeHandle"`
	DriverName          string `json:"driverName"`
	NodeName            string `json:"nodeName,omitempty"`
	AttachmentID        string `json:"attachmentID,omitempty"`
	VolumeLifecycleMode string `json:"volumeLifecycleMode,omitempty"`
}

func saveVolData(dir string, d volData) error {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	b, err := json.Marshal(d)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, volDataFile), b, 0o640)
}

func loadVolData(dir string) (volData, error) {
	var d volData
	b, err := os.ReadFile(filepath.Join(dir, volDataFile))
	if err != nil {
		return d, err
	}
	return d, json.Unmarshal(b, &d)
}

// makeVolumeHandle is the kubelet's handle of an inline CSI volume.
func makeVolumeHandle(podUID, specName string) string {
	return fmt.Sprintf("csi-%x", sha256.Sum256([]byte(podUID+specName)))
}

// attachmentName is the kubelet's getAttachmentName: the VolumeAttachment
// of a volume on a node.
func attachmentName(handle, driver, node string) string {
	return fmt.Sprintf("csi-%x", sha256.Sum256([]byte(handle+driver+node)))
}

// stagingPath is the kubelet's makeDeviceMountPath: the volume's global
// mount, <stateDir>/plugins/kubernetes.io/csi/<driver>/<sha256(handle)>/globalmount.
func stagingPath(stateDir, driver, handle string) string {
	return filepath.Join(stateDir, "plugins", "kubernetes.io", "csi", driver,
		fmt.Sprintf("%x", sha256.Sum256([]byte(handle))), "globalmount")
}

// setup is the kubelet's CSI attacher (WaitForAttach, MountDevice →
// NodeStageVolume once per volume on the node) and mounter (SetUpAt →
// NodePublishVolume into the pod's volume directory, then fsGroup), or for
// a raw block volume its block mapper (csi_block.go). A volume already
// published (after a restart too) is left alone. A resized claim is
// expanded once published (csi_expand.go). It returns the host path the
// containers get: the mount, or the device.
func (c *csiPlugin) setup(ctx context.Context, pod *corev1.Pod, cv csiVolume) (string, error) {
	paths := c.pathsFor(pod, cv)
	if mounted, err := c.mounts.isMounted(paths.target); err != nil {
		return "", err
	} else if mounted {
		// The kubelet's SetUpAt: "volume already mounted, skipping".
		if err := paths.link(); err != nil {
			return "", err
		}
		cm := c.remember(ctx, cv, paths, nil, nil)
		if err := c.expander.expand(ctx, pod, cm); err != nil {
			return "", fmt.Errorf("MountVolume.Setup failed while expanding volume: %w", err)
		}
		return paths.host, nil
	}
	if c.registry == nil {
		return "", errors.New("kubernetes.io/csi: CSI volumes need nodelet-runtime's plugin registry")
	}
	drv, err := c.registry.Driver(cv.driver)
	if err != nil {
		return "", fmt.Errorf("kubernetes.io/csi: mounter.SetUpAt failed to get CSI client: %w", err)
	}
	obj, err := c.driverObject(ctx, cv.driver)
	if err != nil {
		return "", err
	}
	mode := storagev1.VolumeLifecyclePersistent
	if cv.inline {
		mode = storagev1.VolumeLifecycleEphemeral
	}
	if modes := lifecycleModes(obj); !slices.Contains(modes, mode) {
		return "", fmt.Errorf("kubernetes.io/csi: mounter.SetupAt failed to check volume lifecycle mode: volume mode %q not supported by driver %s (only supports %q)", mode, cv.driver, modes)
	}
	var publishContext map[string]string
	attachID := ""
	if !cv.inline {
		c.inUse.markInUse(pod.UID, csiUniqueName(cv.driver, cv.handle))
	}
	if !cv.inline && (obj == nil || obj.Spec.AttachRequired == nil || *obj.Spec.AttachRequired) {
		attachID = attachmentName(cv.handle, cv.driver, c.nodeName)
		if publishContext, err = c.attached(ctx, attachID); err != nil {
			return "", err
		}
		if err := c.inUse.reportedInUse(ctx, csiUniqueName(cv.driver, cv.handle)); err != nil {
			return "", err
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !drv.StageUnstage || cv.inline {
		paths.staging = ""
	}
	if paths.staging != "" {
		if err := c.stage(ctx, pod, drv.Node, cv, paths, publishContext); err != nil {
			return "", err
		}
	}
	// The kubelet saves vol_data.json before NodePublishVolume so that a
	// volume of uncertain state can be torn down.
	if err := saveVolData(paths.dataDir, volData{SpecVolID: cv.specName, VolumeHandle: cv.handle, DriverName: cv.driver,
		NodeName: c.nodeName, AttachmentID: attachID, VolumeLifecycleMode: string(mode)}); err != nil {
		return "", err
	}
	if err := paths.prepare(); err != nil {
		return "", err
	}
	if err := c.publish(ctx, pod, drv, obj, cv, paths, publishContext); err != nil {
		return "", err
	}
	c.log.Info("Published CSI volume", "pod", pod.Namespace+"/"+pod.Name, "podUID", pod.UID, "driver", cv.driver,
		"volumeHandle", cv.handle, "targetPath", paths.target)
	if err := paths.link(); err != nil {
		return "", err
	}
	cm := c.remember(ctx, cv, paths, obj, publishContext)
	if err := c.expander.expand(ctx, pod, cm); err != nil {
		return "", fmt.Errorf("MountVolume.Setup failed while expanding volume: %w", err)
	}
	if !cv.block && csiFSGroup(obj, cv) {
		if err := applyFSGroup(paths.target, pod, cv.readOnly); err != nil {
			return "", fmt.Errorf("applyFSGroup failed for vol %s: %w", cv.handle, err)
		}
	}
	return paths.host, nil
}

// publish is NodePublishVolume as the kubelet's SetUpAt (or its block
// mapper's publishVolumeForBlock) makes it: the volume's attributes with
// the pod's (podInfoOnMount) and, for a filesystem only (the block mapper
// passes none), its service account tokens (the CSIDriver's
// tokenRequests), the publish secret.
func (c *csiPlugin) publish(ctx context.Context, pod *corev1.Pod, drv *csi.Driver, obj *storagev1.CSIDriver, cv csiVolume,
	paths csiPaths, publishContext map[string]string) error {
	secrets, err := c.secrets(ctx, cv.publishSecret)
	if err != nil {
		return err
	}
	attrs := map[string]string{}
	for k, v := range cv.attributes {
		attrs[k] = v
	}
	if obj != nil && obj.Spec.PodInfoOnMount != nil && *obj.Spec.PodInfoOnMount {
		// The kubelet's getPodInfoAttrs.
		attrs["csi.storage.k8s.io/pod.name"] = pod.Name
		attrs["csi.storage.k8s.io/pod.namespace"] = pod.Namespace
		attrs["csi.storage.k8s.io/pod.uid"] = string(pod.UID)
		attrs["csi.storage.k8s.io/serviceAccount.name"] = pod.Spec.ServiceAccountName
		attrs["csi.storage.k8s.io/ephemeral"] = strconv.FormatBool(cv.inline)
	}
	var tokens map[string]string
	var inSecrets bool
	if !cv.block {
		tokens, inSecrets, err = c.serviceAccountTokenAttrs(ctx, pod, obj)
	}
	if err != nil {
		return fmt.Errorf("kubernetes.io/csi: mounter.SetUpAt failed to get service accoount token attributes: %w", err)
	}
	if inSecrets {
		if secrets == nil {
			secrets = map[string]string{}
		}
		maps.Copy(secrets, tokens)
	} else {
		maps.Copy(attrs, tokens)
	}
	_, err = drv.Node.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{
		VolumeId: cv.handle, PublishContext: publishContext, StagingTargetPath: paths.staging, TargetPath: paths.target,
		VolumeCapability: cv.capability(), Readonly: cv.readOnly, Secrets: secrets, VolumeContext: attrs,
	})
	if err != nil {
		// The kubelet's csiMountMgr.SetUpAt.
		return fmt.Errorf("kubernetes.io/csi: mounter.SetupAt failed: %w", err)
	}
	return nil
}

// stage is the kubelet's MountDevice: vol_data.json beside the global
// mount, then NodeStageVolume unless the volume is staged already.
func (c *csiPlugin) stage(ctx context.Context, pod *corev1.Pod, node csipb.NodeClient, cv csiVolume, paths csiPaths,
	publishContext map[string]string) error {
	staging := paths.staging
	if staged, err := paths.staged(c.mounts); err != nil {
		return err
	} else if staged {
		return nil
	}
	if err := saveVolData(paths.stageDataDir, volData{VolumeHandle: cv.handle, DriverName: cv.driver}); err != nil {
		return err
	}
	if err := os.MkdirAll(staging, 0o750); err != nil {
		return err
	}
	secrets, err := c.secrets(ctx, cv.stageSecret)
	if err != nil {
		return err
	}
	_, err = node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{
		VolumeId: cv.handle, PublishContext: publishContext, StagingTargetPath: staging,
		VolumeCapability: cv.capability(), Secrets: secrets, VolumeContext: cv.attributes,
	})
	if err != nil {
		// The kubelet's csiAttacher.MountDevice.
		return fmt.Errorf("kubernetes.io/csi: attacher.MountDevice failed: %w", err)
	}
	c.log.Info("Staged CSI volume", "pod", pod.Namespace+"/"+pod.Name, "podUID", pod.UID, "driver", cv.driver,
		"volumeHandle", cv.handle, "stagingTargetPath", staging)
	return nil
}

// capability is the volume's CSI capability (the kubelet's: a mount with
// the fs type and mount options, or a block device, and the PV's first
// access mode).
func (cv csiVolume) capability() *csipb.VolumeCapability {
	mode := csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER
	if len(cv.accessModes) > 0 {
		switch cv.accessModes[0] {
		case corev1.ReadOnlyMany:
			mode = csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY
		case corev1.ReadWriteMany:
			mode = csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER
		case corev1.ReadWriteOncePod:
			mode = csipb.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER
		}
	}
	if cv.block {
		return &csipb.VolumeCapability{
			AccessType: &csipb.VolumeCapability_Block{Block: &csipb.VolumeCapability_BlockVolume{}},
			AccessMode: &csipb.VolumeCapability_AccessMode{Mode: mode},
		}
	}
	return &csipb.VolumeCapability{
		AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{FsType: cv.fsType, MountFlags: cv.mountOptions}},
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: mode},
	}
}

// csiFSGroup is the kubelet's supportsFSGroup.
func csiFSGroup(obj *storagev1.CSIDriver, cv csiVolume) bool {
	policy := storagev1.ReadWriteOnceWithFSTypeFSGroupPolicy
	if obj != nil && obj.Spec.FSGroupPolicy != nil {
		policy = *obj.Spec.FSGroupPolicy
	}
	switch {
	case cv.readOnly || policy == storagev1.NoneFSGroupPolicy:
		return false
	case policy == storagev1.FileFSGroupPolicy:
		return true
	case cv.fsType == "":
		return false
	case cv.inline:
		return true
	}
	return slices.Contains(cv.accessModes, corev1.ReadWriteOnce)
}

// driverObject reads the CSIDriver object (nil when there is none: its
// defaults apply).
func (c *csiPlugin) driverObject(ctx context.Context, name string) (*storagev1.CSIDriver, error) {
	if c.client == nil {
		return nil, nil
	}
	obj, err := notFoundIsNil(c.client.StorageV1().CSIDrivers().Get(ctx, name, metav1.GetOptions{}))
	if err != nil {
		return nil, fmt.Errorf("kubernetes.io/csi: failed to get CSIDriver %s: %w", name, err)
	}
	return obj, nil
}

func lifecycleModes(obj *storagev1.CSIDriver) []storagev1.VolumeLifecycleMode {
	if obj == nil || len(obj.Spec.VolumeLifecycleModes) == 0 {
		return []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent}
	}
	return obj.Spec.VolumeLifecycleModes
}

// attached is the kubelet's WaitForAttach: the VolumeAttachment the
// attach-detach controller made for this node is attached; its metadata is
// the publish context.
func (c *csiPlugin) attached(ctx context.Context, name string) (map[string]string, error) {
	if c.client == nil {
		return nil, &attachError{errNoAPI("VolumeAttachment " + name)}
	}
	va, err := notFoundIsNil(c.client.StorageV1().VolumeAttachments().Get(ctx, name, metav1.GetOptions{}))
	switch {
	case err != nil:
		return nil, &attachError{fmt.Errorf("volume attachment %s: %w", name, err)}
	case va == nil:
		return nil, &attachError{fmt.Errorf("volume attachment %s does not exist yet", name)}
	case va.Status.AttachError != nil:
		return nil, &attachError{fmt.Errorf("volume attachment %s: attachment failed: %s", name, va.Status.AttachError.Message)}
	case !va.Status.Attached:
		return nil, &attachError{fmt.Errorf("volume attachment %s is not attached yet", name)}
	}
	return va.Status.AttachmentMetadata, nil
}

// secrets reads a secret the driver wants with a call.
func (c *csiPlugin) secrets(ctx context.Context, ref *corev1.SecretReference) (map[string]string, error) {
	if ref == nil || ref.Name == "" {
		return nil, nil
	}
	if c.client == nil {
		return nil, errNoAPI(fmt.Sprintf("secret %s/%s", ref.Namespace, ref.Name))
	}
	s, err := c.client.CoreV1().Secrets(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("fetching NodePublishSecretRef %s/%s failed: %w", ref.Namespace, ref.Name, err)
	}
	out := map[string]string{}
	for k, v := range s.Data {
		out[k] = string(v)
	}
	return out, nil
}

// driver is the registered CSI driver called name.
func (c *csiPlugin) driver(name string) (*csi.Driver, error) {
	if c.registry == nil {
		return nil, fmt.Errorf("driver name %s not found in the list of registered CSI drivers", name)
	}
	return c.registry.Driver(name)
}
