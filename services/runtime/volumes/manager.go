package volumes

import (
	"context"
	"log/slog"
	"path/filepath"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/mount-utils"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/services/runtime/csi"
)

// Options build a Manager.
type Options struct {
	// StateDir is node.stateDir: volumes live under <StateDir>/pods.
	StateDir string
	// Objects reads configMaps and secrets (the runtime's APIObjects, or a
	// fixed set); nil with a nil Client: configMap and secret volumes fail.
	Objects ObjectGetter
	// Client is the node's clientset, for watches and service account
	// tokens; nil on a standalone node (tokens fail, Watch reads with Get).
	Client kubernetes.Interface
	// Strategy is Watch (default), Cache or Get.
	Strategy string
	// SyncFrequency: the longest a configMap, secret, downwardAPI or
	// projected volume goes without being rewritten from its sources, and
	// the TTL of the Cache strategy. Default 1m.
	SyncFrequency time.Duration
	// RefuseHostPathForStaticPods is !runtime.allowHostPathForStaticPods.
	RefuseHostPathForStaticPods bool
	// NodeAllocatable is what resource limits default to in the downward
	// API and sizes memory-backed volumes (cpu, memory, ephemeral-storage).
	NodeAllocatable corev1.ResourceList
	// NodeName is the node's name: local volumes' node affinity and the
	// VolumeAttachments of CSI volumes name it.
	NodeName string
	// CSI holds the registered CSI drivers; nil: CSI volumes fail. Run
	// runs it.
	CSI *csi.Registry
	// Event posts an event about a pod (podCertificate requests denied,
	// failed, overdue or expired; a CSI volume not published again or not
	// expanded); nil: none.
	Event func(pod *corev1.Pod, eventType, reason, message string)
	// ObjectEvent posts an event about another object: a claim's
	// FileSystemResizeSuccess and FileSystemResizeFailed, which the
	// kubelet records on the pod and on the claim; nil: none.
	ObjectEvent func(ref corev1.ObjectReference, eventType, reason, message string)
	// Wake asks for the pod to be synced again: a volume that could not be
	// set up can be now (a pod certificate was issued); nil: the pod
	// waits for its next retry.
	Wake func(uid types.UID)
	// Clock defaults to the real clock.
	Clock clock.WithTicker
	Log   *slog.Logger
}

// Manager prepares, refreshes and removes pod volumes. It implements the
// runtime's VolumeManager; Run keeps mounted contents current. It is the
// façade over the parts that do the work, each owning its state:
//
//   - reconciler (reconciler.go): Setup, Teardown and the refresh loop,
//     over the pods it tracks (trackedPods, pods.go);
//   - volumePlugins (plugins.go): one volume by its type, with the
//     configMap/secret sources (objects.go), tokens (token.go), trust
//     bundles (trustbundle.go) and pod certificates (podcert.go);
//   - claimPlugin (pv.go): claims resolved to their PV, local PVs;
//   - csiPlugin (csi*.go): the CSI attacher, mounter, block mapper,
//     unmounter and metrics, with its nodeExpander (csi_expand.go);
//   - inUseTracker (inuse.go): the node's volumes in use;
//   - statsCalculator (stats.go): the volume stats.
type Manager struct {
	reconciler *reconciler
	inUse      *inUseTracker
	stats      *statsCalculator
	// plugins is kept for the tests.
	plugins  *volumePlugins
	registry *csi.Registry // nil: no CSI drivers to run
	podCerts *podCertificates
	// cancel stops the watches of the Watch strategy.
	cancel context.CancelFunc
}

// New builds a Manager: its parts, wired to one another.
func New(opts Options) *Manager {
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.SyncFrequency <= 0 {
		opts.SyncFrequency = time.Minute
	}
	if opts.Strategy == "" {
		opts.Strategy = StrategyWatch
	}
	ctx, cancel := context.WithCancel(context.Background())
	pods := newTrackedPods(opts.Wake)
	bundles := newTrustBundles(opts.Client, opts.Log, func() { pods.markDirty(projectsTrustBundles) })
	getter := opts.Objects
	if getter == nil && opts.Client != nil {
		getter = clientGetter{opts.Client}
	}
	var objects objectSource // nil: no way to read API objects
	switch {
	case getter == nil:
	case opts.Strategy == StrategyWatch && opts.Client != nil:
		objects = newWatchSource(ctx, opts.Client, getter, pods.objectChanged)
	case opts.Strategy == StrategyCache:
		objects = newCacheSource(getter, opts.SyncFrequency, opts.Clock)
	default:
		objects = getSource{getter}
	}
	pods.objects = objects
	// The token and pod certificate managers need the API; each is left a
	// nil interface (not a nil pointer) in the parts without it.
	var tokens tokenGetter
	var refresher tokenRefresher
	var certs podCredentialSource
	var certTracker podCertTracker
	var podCerts *podCertificates
	if c := opts.Client; c != nil {
		tm := newTokenManager(func(ctx context.Context, ns, name string, tr *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
			return c.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, tr, metav1.CreateOptions{})
		}, opts.Clock)
		tm.issued = pods.wake
		podCerts = newPodCertificates(c, opts.NodeName, opts.Clock, opts.Log)
		podCerts.event = opts.Event
		podCerts.issued = pods.credentialsChanged
		tokens, refresher, certs, certTracker = tm, tm, podCerts, podCerts
		pods.forget = []podForgetter{tm, podCerts}
	}
	events := eventRecorder(opts.Event)
	mounts := hostMounts{mount.NewWithoutSystemd("")}
	inUse := newInUseTracker(opts.StateDir, opts.NodeName, opts.Client)
	csiPlugin := newCSIPlugin(opts.StateDir, opts.NodeName, opts.Client, opts.CSI, mounts, inUse, tokens, events, opts.Log)
	csiPlugin.expander.claimEvents = objectRecorder(opts.ObjectEvent)
	plugins := &volumePlugins{
		stateDir: opts.StateDir, refuseHP: opts.RefuseHostPathForStaticPods, allocatable: opts.NodeAllocatable,
		objects: objects, tokens: tokens, bundles: bundles, podCerts: certs, csi: csiPlugin,
		claims: &claimPlugin{stateDir: opts.StateDir, nodeName: opts.NodeName, client: opts.Client, mounts: mounts, csi: csiPlugin},
	}
	return &Manager{
		reconciler: &reconciler{
			stateDir: opts.StateDir, syncFreq: opts.SyncFrequency, clock: opts.Clock, log: opts.Log, events: events,
			pods: pods, plugins: plugins, csi: csiPlugin, inUse: inUse, tokens: refresher, certs: certTracker,
		},
		inUse:    inUse,
		stats:    &statsCalculator{stateDir: opts.StateDir, clock: opts.Clock, pods: pods, csi: csiPlugin},
		plugins:  plugins,
		registry: opts.CSI,
		podCerts: podCerts,
		cancel:   cancel,
	}
}

// PodDir is <stateDir>/pods/<uid>, the kubelet's pod directory.
func PodDir(stateDir, uid string) string { return filepath.Join(stateDir, "pods", uid) }

// Setup makes the pod's volumes ready and returns the host path of each by
// volume name. It is idempotent and called on every sync of the pod: the
// contents of configMap, secret, downwardAPI and projected volumes are
// rewritten when they changed. An error names each volume that failed, as
// the kubelet's FailedMount event does.
func (m *Manager) Setup(ctx context.Context, pod *corev1.Pod) (map[string]string, error) {
	return m.reconciler.setup(ctx, pod)
}

// Unmount unpublishes the pod's CSI volumes, unmounts everything under
// the pod's directory (tmpfs volumes, subPath bind mounts), checks that
// nothing is mounted there any more and removes the volumes' directories
// (an emptyDir's data goes with them); the rest of the pod's directory
// (termination-message files, etc-hosts) stays. The kubelet's volume
// manager does this once the pod worker has terminated the pod, and its
// SyncTerminatedPod waits for it (WaitForUnmount, podVolumesExist). The
// pod's containers must not be running.
func (m *Manager) Unmount(ctx context.Context, uid string) error {
	return m.reconciler.unmount(ctx, uid)
}

// Teardown is Unmount, then the removal of the whole pod directory: for a
// pod that left the node. The pod's containers must be gone.
func (m *Manager) Teardown(ctx context.Context, uid string) error {
	return m.reconciler.teardown(ctx, uid)
}

// Run rewrites the contents of running pods' configMap, secret,
// downwardAPI and projected volumes: at once for a watched object that
// changed, every SyncFrequency for all, and when a token needs renewing.
// It also runs the CSI plugin registry and the pod certificate manager.
// It stops the watches when ctx ends.
func (m *Manager) Run(ctx context.Context) {
	defer m.cancel()
	if m.registry != nil {
		done := make(chan struct{})
		go func() { defer close(done); m.registry.Run(ctx) }()
		defer func() { <-done }()
	}
	if m.podCerts != nil {
		done := make(chan struct{})
		go func() { defer close(done); m.podCerts.run(ctx) }()
		defer func() { <-done }()
	}
	m.reconciler.run(ctx)
}

// VolumesInUse lists the node's persistent CSI volumes that are staged,
// published, or about to be (the kubelet's GetVolumesInUse), by unique
// name, sorted. It reads the state dir, so it holds after a restart.
func (m *Manager) VolumesInUse() []string { return m.inUse.volumesInUse() }

// InUseChanged is signalled when VolumesInUse may have changed.
func (m *Manager) InUseChanged() <-chan struct{} { return m.inUse.changed() }

// VolumeStats measures the volumes set up for the pods, by pod UID, as the
// kubelet's volume stats calculator: emptyDir, configMap, secret,
// downwardAPI and projected volumes by walking them (du) and statfs of
// their filesystem (its MetricsDu), a CSI volume through its driver's
// NodeGetVolumeStats (when the driver has GET_VOLUME_STATS), a local
// volume by statfs. hostPath volumes (and hostPath PVs) have no stats, as
// with the kubelet. A volume that cannot be measured is left out.
func (m *Manager) VolumeStats(ctx context.Context) map[string]PodStats {
	return m.stats.podStats(ctx)
}

// ReadOnly: the volume is always mounted read-only into containers, as
// the kubelet mounts configMap, secret, downwardAPI and projected volumes.
// A claim or inline CSI volume the pod marks readOnly is mounted read-only
// too.
func ReadOnly(v *corev1.Volume) bool {
	switch {
	case v.PersistentVolumeClaim != nil:
		return v.PersistentVolumeClaim.ReadOnly
	case v.CSI != nil:
		return v.CSI.ReadOnly != nil && *v.CSI.ReadOnly
	}
	return refreshable(v)
}
