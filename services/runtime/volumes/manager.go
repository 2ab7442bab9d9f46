package volumes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
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
	// Wake asks for the pod to be synced again: a volume that could not be
	// set up can be now (a pod certificate was issued); nil: the pod
	// waits for its next retry.
	Wake func(uid types.UID)
	// Clock defaults to the real clock.
	Clock clock.WithTicker
	Log   *slog.Logger
}

// Manager prepares, refreshes and removes pod volumes. It implements the
// runtime's VolumeManager; Run keeps mounted contents current.
type Manager struct {
	stateDir    string
	strategy    string
	syncFreq    time.Duration
	refuseHP    bool
	allocatable corev1.ResourceList
	clock       clock.WithTicker
	log         *slog.Logger
	objects     objectSource // nil: no way to read API objects
	tokens      *tokenManager
	// bundles and podCerts serve clusterTrustBundle and podCertificate
	// projections (trustbundle.go, podcert.go); podCerts is nil on a
	// standalone node.
	bundles  *trustBundles
	podCerts *podCertificates
	wakePod  func(types.UID)
	event    func(pod *corev1.Pod, eventType, reason, message string)
	// csiMounts are the CSI volumes published for pods, by host path
	// (csi_republish.go).
	csiMountsMu sync.Mutex
	csiMounts   map[string]*csiMount
	ctx         context.Context
	cancel      context.CancelFunc
	client      kubernetes.Interface
	nodeName    string
	csi         *csi.Registry
	mounter     mount.Interface
	// csiMu serialises staging, publishing and their reverse, so that a
	// volume is never unstaged while another pod publishes it.
	csiMu sync.Mutex
	// pending: CSI volumes pods are about to use (unique names by pod),
	// reported in use before they are attached or staged.
	inUseMu   sync.Mutex
	pending   map[types.UID]map[string]bool
	inUseKick chan struct{}

	mu    sync.Mutex
	pods  map[types.UID]*podVolumes
	dirty map[types.UID]bool
	kick  chan struct{}
}

// podVolumes is what the manager knows of one pod.
type podVolumes struct {
	// mu serialises setup, refresh and teardown of the pod's volumes.
	mu sync.Mutex
	// pod is the newest spec Setup saw.
	pod *corev1.Pod
	// spec is the pod as first seen, readable under the manager's lock
	// (its volumes never change).
	spec *corev1.Pod
	refs []objectKey
	// ready: volumes set up at least once, which a refresh rewrites.
	ready map[string]bool
	// persistent: host paths of the PVC and CSI volumes set up, which
	// later syncs reuse (the kubelet processes a pod's volumes once).
	persistent map[string]string
	// mounted: host paths of every volume set up, which the volume stats
	// measure (the kubelet's mounted volumes).
	mounted map[string]string
	// lastErr per volume, so a failing refresh is logged once.
	lastErr map[string]string
	gone    bool
}

// New builds a Manager.
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
	m := &Manager{
		stateDir: opts.StateDir, strategy: opts.Strategy, syncFreq: opts.SyncFrequency,
		refuseHP: opts.RefuseHostPathForStaticPods, allocatable: opts.NodeAllocatable,
		clock: opts.Clock, log: opts.Log, ctx: ctx, cancel: cancel,
		client: opts.Client, nodeName: opts.NodeName, csi: opts.CSI, mounter: mount.NewWithoutSystemd(""),
		pending: map[types.UID]map[string]bool{}, inUseKick: make(chan struct{}, 1),
		pods: map[types.UID]*podVolumes{}, dirty: map[types.UID]bool{}, kick: make(chan struct{}, 1),
		wakePod: opts.Wake, event: opts.Event, csiMounts: map[string]*csiMount{},
	}
	m.bundles = newTrustBundles(opts.Client, opts.Log, func() { m.markDirty(projectsTrustBundles) })
	getter := opts.Objects
	if getter == nil && opts.Client != nil {
		getter = clientGetter{opts.Client}
	}
	switch {
	case getter == nil:
	case opts.Strategy == StrategyWatch && opts.Client != nil:
		m.objects = newWatchSource(ctx, opts.Client, getter, m.objectChanged)
	case opts.Strategy == StrategyCache:
		m.objects = newCacheSource(getter, opts.SyncFrequency, opts.Clock)
	default:
		m.objects = getSource{getter}
	}
	if c := opts.Client; c != nil {
		m.tokens = newTokenManager(func(ctx context.Context, ns, name string, tr *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
			return c.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, tr, metav1.CreateOptions{})
		}, opts.Clock)
		m.tokens.issued = m.wake
		m.podCerts = newPodCertificates(c, opts.NodeName, opts.Clock, opts.Log)
		m.podCerts.event = opts.Event
		m.podCerts.issued = m.credentialsChanged
	}
	return m
}

// PodDir is <stateDir>/pods/<uid>, the kubelet's pod directory.
func PodDir(stateDir, uid string) string { return filepath.Join(stateDir, "pods", uid) }

// Setup makes the pod's volumes ready and returns the host path of each by
// volume name. It is idempotent and called on every sync of the pod: the
// contents of configMap, secret, downwardAPI and projected volumes are
// rewritten when they changed. An error names each volume that failed, as
// the kubelet's FailedMount event does.
func (m *Manager) Setup(ctx context.Context, pod *corev1.Pod) (map[string]string, error) {
	p := m.track(pod)
	if m.podCerts != nil {
		m.podCerts.track(pod)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pod = pod
	paths := map[string]string{}
	var errs, processErrs []error
	var notProcessed, unattached []string
	mounts, devices := podVolumeUse(pod)
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		persistent := isPersistent(v)
		if persistent {
			if !mounts[v.Name] && !devices[v.Name] {
				// The kubelet's populator: "Skipping unused volume".
				continue
			}
			if path, ok := p.persistent[v.Name]; ok {
				paths[v.Name] = path
				p.mounted[v.Name] = path
				if cm := m.csiMountAt(path); cm != nil {
					m.resync(ctx, pod, p, v.Name, cm)
				}
				continue
			}
		}
		path, err := m.setupVolume(ctx, pod, v)
		var pe *processError
		var ae *attachError
		switch {
		case errors.As(err, &pe):
			notProcessed = append(notProcessed, v.Name)
			processErrs = append(processErrs, err)
			continue
		case errors.As(err, &ae):
			unattached = append(unattached, v.Name)
			processErrs = append(processErrs, err)
			continue
		case err != nil:
			errs = append(errs, fmt.Errorf("MountVolume.SetUp failed for volume %q : %w", v.Name, err))
			continue
		}
		paths[v.Name] = path
		p.mounted[v.Name] = path
		if persistent {
			p.persistent[v.Name] = path
		}
		if refreshable(v) {
			p.ready[v.Name] = true
		}
		delete(p.lastErr, v.Name)
	}
	if len(processErrs) > 0 {
		// The kubelet's WaitForAttachAndMount: volumes it could not
		// process or that wait for attachment hold the pod.
		var unmounted []string
		for name := range mounts {
			if _, ok := paths[name]; !ok {
				unmounted = append(unmounted, name)
			}
		}
		slices.Sort(unmounted)
		slices.Sort(notProcessed)
		slices.Sort(unattached)
		return paths, &MountWaitError{Unmounted: unmounted, Unattached: orEmpty(unattached),
			NotProcessed: orEmpty(notProcessed), Err: joinErrs(processErrs)}
	}
	return paths, errors.Join(errs...)
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// isPersistent: a volume backed by a PV or a CSI driver.
func isPersistent(v *corev1.Volume) bool {
	return v.PersistentVolumeClaim != nil || v.Ephemeral != nil || v.CSI != nil
}

// Teardown unmounts everything under the pod's directory (tmpfs volumes,
// subPath bind mounts), checks that nothing is mounted there any more and
// removes the directory. The pod's containers must be gone.
func (m *Manager) Teardown(ctx context.Context, uid string) error {
	if p := m.untrack(types.UID(uid)); p != nil {
		// Wait for a refresh under way.
		p.mu.Lock()
		defer p.mu.Unlock()
	}
	// CSI volumes go through their drivers first; the sweep below only
	// unmounts what nodelet mounted itself.
	if err := m.teardownCSI(ctx, uid); err != nil {
		return fmt.Errorf("tear down volumes of pod %s: %w", uid, err)
	}
	m.forgetInUse(types.UID(uid))
	m.forgetCSIMounts(uid)
	dir := PodDir(m.stateDir, uid)
	ms, err := mountsUnder(dir)
	if err != nil {
		return err
	}
	for _, mp := range ms {
		if err := unmount(mp.Path); err != nil {
			return err
		}
	}
	if left, err := mountsUnder(dir); err != nil || len(left) > 0 {
		if err == nil {
			err = fmt.Errorf("%s is still mounted", left[0].Path)
		}
		return fmt.Errorf("tear down volumes of pod %s: %w", uid, err)
	}
	if err := RemoveAll(dir); err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	return nil
}

// Run rewrites the contents of running pods' configMap, secret,
// downwardAPI and projected volumes: at once for a watched object that
// changed, every SyncFrequency for all, and when a token needs renewing.
// It stops the watches when ctx ends.
func (m *Manager) Run(ctx context.Context) {
	defer m.cancel()
	if m.csi != nil {
		done := make(chan struct{})
		go func() { defer close(done); m.csi.Run(ctx) }()
		defer func() { <-done }()
	}
	if m.podCerts != nil {
		done := make(chan struct{})
		go func() { defer close(done); m.podCerts.run(ctx) }()
		defer func() { <-done }()
	}
	for {
		wait := m.syncFreq
		if m.tokens != nil {
			if at, ok := m.tokens.nextRefresh(); ok {
				// A token whose refresh failed stays due: retry, but not
				// in a tight loop.
				wait = min(wait, max(at.Sub(m.clock.Now()), 5*time.Second))
			}
		}
		t := m.clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-m.kick:
			t.Stop()
			m.refresh(ctx, m.takeDirty())
		case <-t.C():
			m.refresh(ctx, m.allPods())
		}
	}
}

// track finds the pod's entry, registering the objects it references the
// first time it is seen.
func (m *Manager) track(pod *corev1.Pod) *podVolumes {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.pods[pod.UID]
	if p == nil {
		p = &podVolumes{spec: pod, refs: referencedObjects(pod), ready: map[string]bool{}, lastErr: map[string]string{}, persistent: map[string]string{}, mounted: map[string]string{}}
		m.pods[pod.UID] = p
		if m.objects != nil {
			for _, k := range p.refs {
				m.objects.register(k)
			}
		}
	}
	return p
}

func (m *Manager) untrack(uid types.UID) *podVolumes {
	m.mu.Lock()
	p := m.pods[uid]
	delete(m.pods, uid)
	delete(m.dirty, uid)
	m.mu.Unlock()
	if m.tokens != nil {
		m.tokens.forgetPod(uid)
	}
	if m.podCerts != nil {
		m.podCerts.forget(uid)
	}
	if p == nil {
		return nil
	}
	if m.objects != nil {
		for _, k := range p.refs {
			m.objects.unregister(k)
		}
	}
	p.mu.Lock()
	p.gone = true
	p.mu.Unlock()
	return p
}

// objectChanged marks the pods that reference k for a refresh.
func (m *Manager) objectChanged(k objectKey) {
	m.mu.Lock()
	for uid, p := range m.pods {
		for _, r := range p.refs {
			if r == k {
				m.dirty[uid] = true
			}
		}
	}
	m.mu.Unlock()
	m.wake()
}

// markDirty marks the pods whose spec matches for a refresh.
func (m *Manager) markDirty(match func(*corev1.Pod) bool) {
	m.mu.Lock()
	for uid, p := range m.pods {
		if p.spec != nil && match(p.spec) {
			m.dirty[uid] = true
		}
	}
	m.mu.Unlock()
	m.wake()
}

// credentialsChanged: a pod certificate was issued, denied or failed. Its
// volumes are rewritten, and a pod still waiting for them synced again.
func (m *Manager) credentialsChanged(uid types.UID) {
	m.mu.Lock()
	if _, ok := m.pods[uid]; ok {
		m.dirty[uid] = true
	}
	m.mu.Unlock()
	m.wake()
	if m.wakePod != nil {
		m.wakePod(uid)
	}
}

// projectsTrustBundles: a projected volume of the pod has a
// clusterTrustBundle source.
func projectsTrustBundles(pod *corev1.Pod) bool {
	for _, v := range pod.Spec.Volumes {
		if v.Projected != nil {
			for _, s := range v.Projected.Sources {
				if s.ClusterTrustBundle != nil {
					return true
				}
			}
		}
	}
	return false
}

// wake makes Run refresh the dirty pods and compute its next wait again.
func (m *Manager) wake() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

func (m *Manager) takeDirty() []types.UID {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]types.UID, 0, len(m.dirty))
	for uid := range m.dirty {
		out = append(out, uid)
	}
	m.dirty = map[types.UID]bool{}
	return out
}

func (m *Manager) allPods() []types.UID {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]types.UID, 0, len(m.pods))
	for uid := range m.pods {
		out = append(out, uid)
	}
	return out
}

// refresh rewrites the refreshable volumes of the pods.
func (m *Manager) refresh(ctx context.Context, uids []types.UID) {
	for _, uid := range uids {
		m.mu.Lock()
		p := m.pods[uid]
		m.mu.Unlock()
		if p == nil || ctx.Err() != nil {
			continue
		}
		m.refreshPod(ctx, p)
	}
}

func (m *Manager) refreshPod(ctx context.Context, p *podVolumes) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pod := p.pod
	if p.gone || pod == nil {
		return
	}
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		if !p.ready[v.Name] {
			continue
		}
		_, err := m.setupVolume(ctx, pod, v)
		switch {
		case err == nil:
			delete(p.lastErr, v.Name)
		case p.lastErr[v.Name] != err.Error():
			p.lastErr[v.Name] = err.Error()
			m.log.Warn("Cannot refresh volume", "pod", pod.Namespace+"/"+pod.Name, "podUID", pod.UID, "volume", v.Name, "err", err)
		}
	}
}

// referencedObjects lists the configMaps and secrets the pod's volumes
// read (env references are read when a container starts).
func referencedObjects(pod *corev1.Pod) []objectKey {
	seen := map[objectKey]bool{}
	var out []objectKey
	add := func(kind, name string) {
		k := objectKey{Kind: kind, Namespace: pod.Namespace, Name: name}
		if name != "" && !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	for _, v := range pod.Spec.Volumes {
		switch {
		case v.ConfigMap != nil:
			add(kindConfigMap, v.ConfigMap.Name)
		case v.Secret != nil:
			add(kindSecret, v.Secret.SecretName)
		case v.Projected != nil:
			for _, s := range v.Projected.Sources {
				if s.ConfigMap != nil {
					add(kindConfigMap, s.ConfigMap.Name)
				}
				if s.Secret != nil {
					add(kindSecret, s.Secret.Name)
				}
			}
		}
	}
	return out
}

// refreshable: the volume's contents come from the API or the pod and are
// rewritten while it runs.
func refreshable(v *corev1.Volume) bool {
	return v.ConfigMap != nil || v.Secret != nil || v.DownwardAPI != nil || v.Projected != nil
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
