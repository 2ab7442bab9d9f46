// Package runtime is nodelet-runtime, the heart of the node: the kubelet's
// pod workers, syncPod and killPod over CRI.
//
// It watches the admitted pods (desired + admission buckets), probe
// results, evictions and sources readiness on the bus, and for each pod
// runs one worker that brings the runtime to the pod's spec: sandbox
// (generatePodSandboxConfig, RunPodSandbox), images (pull policies,
// secrets, back-off, one pull per image), init containers in order,
// sidecars, app containers (generateContainerConfig), lifecycle hooks,
// restarts with CrashLoopBackOff, and the graceful kill. A relist of CRI
// every runtime.relistPeriod (the PLEG) wakes the workers of pods whose
// containers changed.
//
// # Ephemeral containers and active deadlines
//
// Ephemeral containers (spec.ephemeralContainers, added through the
// pods/ephemeralcontainers subresource as kubectl debug does) are started
// once each in the pod's ready sandbox, before init containers, as the
// kubelet's computePodActions and SyncPod do: a targetContainerName puts
// the container in that container's PID namespace (CRI NamespaceMode
// TARGET); whatever its exit it is never started again; it is killed with
// the pod. They are published as PodObserved.ephemeralContainers (kind
// ephemeral).
//
// A pod with spec.activeDeadlineSeconds is killed once it has been active
// that long since its status.startTime (read from the status bucket, else
// the API's status), as the kubelet's activeDeadlineHandler: its observed
// state says DeadlineExceeded with the kubelet's message, a
// DeadlineExceeded event is emitted, and it is never started again. Its
// worker is woken at the deadline by the injected clock, so a deadline
// lowered on a running pod takes effect at once.
//
// # Cluster objects: service variables and RuntimeClasses
//
// On a node with an API server the runtime keeps one watch of services
// (not headless ones) and one of RuntimeClasses for the whole node
// (clusterObjects). Every container gets the kubelet's service variables
// (getServiceEnvVarMap, envvars.FromServices): KUBERNETES_SERVICE_HOST,
// KUBERNETES_SERVICE_PORT, KUBERNETES_PORT... of default/kubernetes always,
// and those of the services in its namespace unless
// spec.enableServiceLinks is false; its own env wins over them and may
// refer to them. An API pod waits (CreateContainerConfigError) until the
// services were listed once. A sandbox runs with the handler of its
// RuntimeClass; a class that does not exist fails it with
// FailedCreatePodSandBox and the kubelet's message. A standalone node has
// no service variables, and takes a runtimeClassName as the handler.
//
// # Observed state
//
// Each pod's runtime state is published to the observed bucket (key = pod
// UID), written only when it changed, with Generation counting changes.
// While a pod is killed it carries Terminating; once every container and
// the sandbox are stopped, Terminated. The key is deleted only after the
// pod left the desired bucket and its sandboxes were removed: the last
// value a watcher sees before the deletion is therefore always the final
// Terminated state, so nodelet-status can write the final pod status and
// admission can release the pod's resources. A pod that is deleted through
// the API (deletionTimestamp) is killed but keeps its stopped sandbox and
// its Terminated state until the sources drop it.
//
// # Restart safety
//
// Everything is rebuilt from CRI labels and annotations (the kubelet's,
// plus io.nodelet.managed=true on everything nodelet creates) and the
// buckets. A running container whose hash matches its spec is never
// restarted, a created-but-never-started container is started rather than
// duplicated, and extra sandboxes are stopped. Back-off timers live in
// memory: after a restart of nodelet-runtime a crash-looping container
// starts over at 10 s.
//
// # Volumes
//
// Each sync of a running pod first asks the VolumeManager (package
// volumes: emptyDir, hostPath, configMap, secret, downwardAPI, projected
// with service account tokens, persistentVolumeClaim and generic ephemeral
// volumes over local, hostPath and CSI PVs, inline CSI volumes; CSI node
// plugins register through package csi in <stateDir>/plugins_registry)
// for its volumes' host paths; a volume that cannot be set up leaves the
// pod waiting with reason FailedMount and the kubelet's "MountVolume.SetUp
// failed for volume ..." or "Unable to attach or mount volumes: ..."
// message. Pod directories no input knows any more (the kubelet's
// cleanupOrphanedPodDirs) get a worker, which tears their volumes down. The mounts
// of each container (subPath, read-only, propagation) are made as the
// kubelet's makeMounts; configMap and secret env references read through
// the ObjectGetter, and a missing key fails the container with
// CreateContainerConfigError. Volumes are torn down once the pod's
// sandboxes are removed.
//
// # Network
//
// nodelet owns the node's CNI configuration (runtime.manageCNIConfig): the
// conflist for the pod CIDR is rendered into runtime.cniConfDir, and the
// conflist there is validated with libcni. Network readiness (with CRI's
// NetworkReady) is published in the runtime bucket; while it is false,
// pods on the pod network wait with reason NetworkNotReady, and host
// network pods still run.
//
// # Metrics
//
// The kubelet's families of the PLEG, the pod workers, sandbox, container
// and image starts, running pods and containers and volume operations
// (metrics.go), and every CRI call (kubelet_runtime_operations_*,
// internal/cri), served on the daemon's metrics socket for
// nodelet-server's /metrics (docs/metrics.md).
package runtime

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	internalapi "k8s.io/cri-api/pkg/apis"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/internal/credentialprovider"
	"github.com/nodelet/nodelet/internal/cri"
	"github.com/nodelet/nodelet/internal/daemon"
	"github.com/nodelet/nodelet/internal/podutil"
	"github.com/nodelet/nodelet/schemas"
	"github.com/nodelet/nodelet/services/runtime/csi"
	"github.com/nodelet/nodelet/services/runtime/volumes"
)

// Run serves until ctx is done.
func Run(ctx context.Context, env *daemon.Env) error {
	cfg := env.Config
	clients, err := cri.Dial(ctx, &cfg.Runtime)
	if err != nil {
		return err
	}
	opts := Options{
		Deps:    env.Deps(),
		Runtime: clients.Runtime,
		Image:   clients.Image,
	}
	if cfg.NodeKubeconfig() != "" {
		api, err := NewAPIObjects(ctx, cfg, env.Log)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		opts.Objects, opts.NodePodCIDR = api, api.PodCIDR
	}
	m, err := New(opts)
	if err != nil {
		return err
	}
	// nodelet-server federates these into the node's /metrics.
	env.SetMetrics(m.Gatherer())
	return m.Run(ctx)
}

// newVolumeManager is the node's volume manager: objects read through
// opts.Objects, watches and service account tokens through its clientset
// (when it is the API server's), contents refreshed by the configured
// strategy. Its events and wake-ups go through the daemon d will point at.
func newVolumeManager(opts Options, capacity nodeCapacity, d **Daemon) *volumes.Manager {
	cfg := opts.Config
	vo := volumes.Options{
		Event: func(pod *corev1.Pod, typ, reason, msg string) { (*d).event(pod, nil, "", typ, reason, msg) },
		ObjectEvent: func(ref corev1.ObjectReference, typ, reason, msg string) {
			opts.Bus.Emit(schemas.Event{Object: ref, Type: typ, Reason: reason, Message: msg, Time: opts.Clock.Now().UTC()})
		},
		Wake:                        func(uid types.UID) { (*d).store.wakeWorker(string(uid)) },
		StateDir:                    cfg.Node.StateDir,
		Strategy:                    cfg.Runtime.ConfigMapAndSecretChangeDetectionStrategy,
		SyncFrequency:               cfg.Runtime.SyncFrequency,
		RefuseHostPathForStaticPods: !cfg.Runtime.AllowHostPathForStaticPods,
		NodeAllocatable:             capacity.resourceList(),
		Clock:                       opts.Clock,
		Log:                         opts.Log,
	}
	if opts.Objects != nil {
		vo.Objects = opts.Objects
	}
	if c, ok := opts.Objects.(interface{ Client() kubernetes.Interface }); ok {
		vo.Client = c.Client()
	}
	vo.NodeName = cfg.Node.Name
	vo.CSI = csi.NewRegistry(csi.Options{
		Dirs: []string{cfg.PluginsRegistryDir(), csi.RegistryDir(cfg.Node.StateDir)}, NodeName: cfg.Node.Name, Client: vo.Client,
		Log: opts.Log.With("subsystem", "csi"),
	})
	return volumes.New(vo)
}

// Clock is the time source: real in the daemon, fake in unit tests.
type Clock interface {
	clock.WithTicker
	AfterFunc(d time.Duration, f func()) clock.Timer
}

// Options build a Daemon.
type Options struct {
	daemon.Deps
	Runtime internalapi.RuntimeService
	Image   internalapi.ImageManagerService
	// Clock defaults to the real clock.
	Clock Clock
	// Volumes prepares pod volumes; default: volumes.New for the node's
	// state dir, reading API objects through Objects (newVolumeManager).
	Volumes VolumeManager
	// Objects reads pull secrets, secrets and config maps; nil on a
	// standalone node without any.
	Objects ObjectGetter
	// NodePodCIDR, when set, returns the pod CIDR an API server assigned
	// to the node ("" when none yet); it wins over node.podCIDR.
	NodePodCIDR func(ctx context.Context) string
	// HostIPs are status.hostIP(s) for the downward API; default
	// node.address, else the node's first non-loopback addresses.
	HostIPs []string
	// VolumeStatsPeriod is how often the pods' persistent volume stats are
	// measured and published (the kubelet's volumeStatsAggPeriod); default
	// 1m.
	VolumeStatsPeriod time.Duration
	// ResyncPeriod is how often every pod is synced whatever happened (the
	// safety net for what a watch, an event or the relist missed); default
	// 30s.
	ResyncPeriod time.Duration
}

// Daemon runs the node's pods. It holds what the pod workers share: the
// connections (bus, CRI), the inputs as the bus delivers them, the workers
// and their per-pod memory, the outputs, and the helpers the sync steps
// use. A pod's sync is a sequence of steps over one pod (sync.go, steps.go).
type Daemon struct {
	cfg   *config.Config
	log   *slog.Logger
	bus   *bus.Conn
	clock Clock
	rs    internalapi.RuntimeService
	// runtime is CRI's runtime name and version, as Version said at start.
	runtime runtimeInfo
	health  func(bool, string)

	// Inputs, the pods' workers and what each remembers.
	store   *store
	workers *podWorkers
	pods    *podStates
	// Outputs: the observed bucket; the runtime bucket's state.
	observed *observedWriter
	network  *networkState

	// What the sync steps use: CRI's view of the pods, pulls, back-off,
	// volumes, the bound on sandbox creations, and what configs are built
	// from.
	view    *criView
	images  *imagePuller
	backoff *backOff
	// mountBackoff spaces a pod's retries of its volumes (retryMountFirst).
	mountBackoff *backOff
	volumes      VolumeManager
	// sandboxSlots bounds concurrent RunPodSandbox calls (nil: unbounded).
	sandboxSlots chan struct{}
	configSources

	// resources owns the pod cgroups and resize state (podcgroup.go,
	// resize.go).
	resources *podResources
	// hooks runs lifecycle handlers (hooks.go); killer kills and removes
	// pods (kill.go).
	hooks  *hookRunner
	killer *podKiller
	// pleg relists CRI and follows its events (pleg.go).
	pleg *pleg
	// volumeReports publishes the volumes' stats and those in use.
	volumeReports *volumeReporter
	// resyncPeriod: Options.ResyncPeriod.
	resyncPeriod time.Duration
	// metrics are the kubelet's families nodelet-runtime owns (metrics.go).
	metrics *metrics
}

// runtimeInfo names the container runtime.
type runtimeInfo struct {
	// name prefixes container IDs in observed state (containerd://).
	name    string
	version string
}

// configSources is what a pod's sandbox and container configs are built
// from besides the pod: the node, its DNS settings and the cluster's
// objects. Daemon embeds it: the config builders (sandbox.go,
// containers.go, cluster.go) read these fields through it.
type configSources struct {
	hostIPs  []string
	capacity nodeCapacity
	dns      dnsSettings
	// stopSignals remembers runtimes that ignore stop signals (stopsignal.go).
	stopSignals stopSignals
	// handlers caches the runtime handlers CRI Status lists (rro.go).
	handlers runtimeHandlers
	// objects reads pull secrets, secrets and config maps (nil: none).
	objects ObjectGetter
	// cluster watches services and RuntimeClasses; nil on a standalone
	// node.
	cluster *clusterObjects
}

// New checks opts and builds a Daemon; Run starts it.
func New(opts Options) (*Daemon, error) {
	if opts.Config == nil || opts.Bus == nil || opts.Runtime == nil || opts.Image == nil {
		return nil, fmt.Errorf("runtime: Config, Bus, Runtime and Image are required")
	}
	cfg := opts.Config
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	capacity, err := readNodeCapacity(cfg)
	if err != nil {
		return nil, err
	}
	var sa credentialprovider.ServiceAccounts
	if a, ok := opts.Objects.(credentialprovider.ServiceAccounts); ok {
		sa = a
	}
	node, records, err := imageCredentials(cfg, opts.Image, sa, opts.Log)
	if err != nil {
		return nil, err
	}
	var m *Daemon
	if opts.Volumes == nil {
		opts.Volumes = newVolumeManager(opts, capacity, &m)
	}
	if len(opts.HostIPs) == 0 {
		opts.HostIPs = hostIPs(cfg.Node.Address)
	}
	maxBackOff := cfg.Runtime.MaxContainerRestartPeriod
	if maxBackOff <= 0 {
		maxBackOff = 300 * time.Second
	}
	m = &Daemon{
		cfg: cfg, log: opts.Log, bus: opts.Bus, rs: opts.Runtime, clock: opts.Clock,
		runtime:      runtimeInfo{name: "containerd"},
		health:       opts.SetHealth,
		store:        newStore(),
		pods:         newPodStates(),
		view:         newCRIView(opts.Runtime),
		images:       newImagePuller(opts.Image, opts.Clock, cfg.Runtime.MaxParallelImagePulls, maxBackOff, node, records),
		backoff:      newBackOff(opts.Clock, initialBackOff, maxBackOff),
		mountBackoff: newBackOff(opts.Clock, retryMountFirst, retryWaiting),
		volumes:      opts.Volumes,
		configSources: configSources{
			hostIPs: opts.HostIPs, capacity: capacity, objects: opts.Objects,
			dns: dnsSettings{ClusterDNS: cfg.Node.ClusterDNS, ClusterDomain: cfg.Node.ClusterDomain, ResolvConf: cfg.Node.ResolvConf},
		},
		volumeReports: &volumeReporter{
			volumes: opts.Volumes, bus: opts.Bus, clock: opts.Clock, log: opts.Log, statsPeriod: opts.VolumeStatsPeriod,
		},
	}
	if m.volumeReports.statsPeriod <= 0 {
		m.volumeReports.statsPeriod = time.Minute
	}
	if m.resyncPeriod = opts.ResyncPeriod; m.resyncPeriod <= 0 {
		m.resyncPeriod = 30 * time.Second
	}
	if c, ok := opts.Objects.(interface{ Client() kubernetes.Interface }); ok {
		m.cluster = newClusterObjects(c.Client())
	}
	if n := cfg.Runtime.MaxConcurrentSandboxCreations; n > 0 {
		m.sandboxSlots = make(chan struct{}, n)
	}
	// The parts, wired to what each needs of the others.
	m.observed = newObservedWriter(opts.Bus, m.log)
	m.metrics = newMetrics(m.observed)
	m.images.pulled = m.metrics.imagePulled
	if m.resources, err = newPodResources(cfg, m.log, m.clock, m.rs, capacity, m.store, m.observed, m.view, m.event); err != nil {
		return nil, fmt.Errorf("runtime.cgroupRoot: %w", err)
	}
	m.hooks = &hookRunner{rs: m.rs, clock: m.clock}
	m.killer = newPodKiller(cfg, m.log, m.clock, m.rs, m.hooks, m.volumes, m.resources, m.event)
	m.stopSignals.rs, m.stopSignals.log = m.rs, m.log
	m.pleg = newPLEG(&cfg.Runtime, m.log, m.clock, m.rs, m.view, m.store, m.observed)
	m.pleg.metrics = m.metrics
	m.store.bus, m.store.log, m.store.observed, m.store.pleg = opts.Bus, m.log, m.observed, m.pleg
	m.network = newNetworkState(m, opts.NodePodCIDR)
	return m, nil
}

// Run runs the pods until ctx is done. Pods keep running after it returns.
func (m *Daemon) Run(ctx context.Context) error {
	vctx, cancel := context.WithTimeout(ctx, m.cfg.Runtime.RuntimeRequestTimeout)
	v, err := m.rs.Version(vctx, "v1")
	cancel()
	if err != nil {
		m.health(false, fmt.Sprintf("container runtime does not answer: %v", err))
		return fmt.Errorf("container runtime: %w", err)
	}
	if v.RuntimeName != "" {
		m.runtime.name = v.RuntimeName
	}
	m.runtime.version = v.RuntimeVersion
	m.log.Info("Container runtime", "name", v.RuntimeName, "version", v.RuntimeVersion, "apiVersion", v.RuntimeApiVersion)
	m.network.setVersion(v.RuntimeName, v.RuntimeVersion)
	m.stopSignals.runtime = m.runtime
	if err := m.resources.setupCgroups(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		m.health(false, err.Error())
		return err
	}

	if err := m.observed.load(ctx); err != nil {
		if ctx.Err() != nil {
			return nil // stopped while starting: not a failure
		}
		return fmt.Errorf("load observed state: %w", err)
	}
	m.workers = newPodWorkers(ctx, m.clock, m.metrics.timedSync(m.store, m.syncPod))
	m.store.workers = m.workers

	var wg sync.WaitGroup
	run := func(f func(context.Context)) {
		wg.Add(1)
		go func() { defer wg.Done(); f(ctx) }()
	}
	if m.cluster != nil {
		m.cluster.start(ctx.Done())
		defer m.cluster.shutdown()
	}
	run(m.network.run)
	run(m.store.watch)
	if v, ok := m.volumes.(interface{ Run(context.Context) }); ok {
		run(v.Run)
	}

	// Act only on complete knowledge: every input loaded once.
	if err := m.store.waitSynced(ctx); err != nil {
		wg.Wait()
		return nil
	}
	// Pods wait for the network only when it is known not to be ready.
	select {
	case <-m.network.firstCheck:
	case <-ctx.Done():
		wg.Wait()
		return nil
	}
	m.log.Info("Inputs loaded, starting pod workers")
	m.syncOrphanedPodDirs()
	m.resources.cleanupOrphanedPodCgroups(ctx)
	m.pleg.Start(ctx, m.workers, m.runtime, run)
	run(m.resyncLoop)
	run(m.images.pruneRecordsLoop)
	run(m.volumeReports.statsLoop)
	run(m.volumeReports.inUseLoop)

	<-ctx.Done()
	wg.Wait()
	m.workers.Wait()
	return nil
}

// resyncLoop syncs every known pod now and then, as the kubelet's
// syncFrequency: a safety net for anything a watch or relist missed.
func (m *Daemon) resyncLoop(ctx context.Context) {
	t := m.clock.NewTicker(m.resyncPeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			for _, uid := range m.store.uids() {
				m.workers.Update(uid)
			}
			m.syncOrphanedPodDirs()
			m.resources.cleanupOrphanedPodCgroups(ctx)
		}
	}
}

// syncOrphanedPodDirs is the kubelet's cleanupOrphanedPodDirs: a pod
// directory (volumes mounted, CSI volumes published) of a pod that no
// input knows any more — removed from CRI while nodelet-runtime was down
// between the sandbox's removal and the volumes' teardown, or lost with a
// wiped bus store — gets a worker, which tears its volumes down once the
// sources are ready (syncOrphan).
func (m *Daemon) syncOrphanedPodDirs() {
	entries, err := os.ReadDir(filepath.Join(m.cfg.Node.StateDir, "pods"))
	if err != nil {
		return
	}
	for _, e := range entries {
		if e.IsDir() && m.store.get(e.Name()) == nil {
			m.workers.Update(e.Name())
		}
	}
}

// event emits a lifecycle event about pod (and container c, when given)
// with the kubelet's reason.
func (m *Daemon) event(pod *corev1.Pod, c *corev1.Container, kind, typ, reason, msg string) {
	if pod == nil {
		return
	}
	ref := corev1.ObjectReference{
		Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID,
	}
	if c != nil {
		// The kubelet's GenerateContainerRef (fieldPath.go).
		switch kind {
		case schemas.ContainerKindApp:
			ref.FieldPath = fmt.Sprintf("spec.containers{%s}", c.Name)
		case schemas.ContainerKindEphemeral:
			ref.FieldPath = fmt.Sprintf("spec.ephemeralContainers{%s}", c.Name)
		default:
			ref.FieldPath = fmt.Sprintf("spec.initContainers{%s}", c.Name)
		}
	}
	m.bus.Emit(schemas.Event{Object: ref, Type: typ, Reason: reason, Message: msg, Time: m.clock.Now().UTC()})
}

var podRef = podutil.PodRef

// mkdirAll is os.MkdirAll with the path in the error.
func mkdirAll(dir string, perm os.FileMode) error {
	if err := os.MkdirAll(dir, perm); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	return nil
}
