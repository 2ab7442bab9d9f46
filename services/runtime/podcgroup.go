package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/cgroups"
	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/internal/podutil"
	"github.com/nodelet/nodelet/schemas"
)

// podResources is the pod-resources part, the kubelet's cgroup manager
// (pod and QoS cgroups, podcgroup.go) and allocation manager (allocated
// resources and in-place resize, resize.go, resizerestart.go). It owns
// the pod cgroups and each pod's resize state.
type podResources struct {
	cfg      *config.Config
	log      *slog.Logger
	clock    Clock
	rs       internalapi.RuntimeService
	capacity nodeCapacity
	// cgroups is the pod cgroup hierarchy; it only names cgroups until
	// setupCgroups has checked the driver and made the node's.
	cgroups *cgroups.Pods
	// resize holds each pod's allocated resources and resize progress.
	resize resizeState

	// What it reads: the admitted pods, their observed state and CRI.
	store    admittedPods
	observed observedPods
	view     podViewer
	// event emits a pod event (Daemon.event).
	event eventFunc
}

// admittedPods are the pods the inputs know (store).
type admittedPods interface {
	uids() []string
	get(uid string) *podRecord
	sourcesReady() bool
}

// observedPods is the pods' last observed state (observedWriter).
type observedPods interface {
	get(uid string) *schemas.PodObserved
}

// podViewer is one pod as CRI has it (criView).
type podViewer interface {
	pod(ctx context.Context, uid string) (*podRuntime, error)
}

// eventFunc emits an event about pod (and container c) with the kubelet's
// reason (Daemon.event).
type eventFunc func(pod *corev1.Pod, c *corev1.Container, kind, typ, reason, msg string)

var (
	_ admittedPods = (*store)(nil)
	_ observedPods = (*observedWriter)(nil)
	_ podViewer    = (*criView)(nil)
)

// newPodResources names the pod cgroups from cfg; setupCgroups makes them.
func newPodResources(cfg *config.Config, log *slog.Logger, clk Clock, rs internalapi.RuntimeService, capacity nodeCapacity,
	store admittedPods, observed observedPods, view podViewer, event eventFunc) (*podResources, error) {
	names, err := newPodCgroupNames(cfg)
	if err != nil {
		return nil, err
	}
	return &podResources{
		cfg: cfg, log: log, clock: clk, rs: rs, capacity: capacity, cgroups: names,
		store: store, observed: observed, view: view, event: event,
	}, nil
}

// Pod cgroups, the kubelet's container manager (pkg/kubelet/cm): the node
// allocatable cgroup runtime.cgroupRoot (the kubelet's kubepods), its
// burstable and besteffort children, and one cgroup per pod with the
// pod's summed limits, made before the sandbox (which CRI puts under it,
// CgroupParent) and removed once the pod is gone: CRI never removes it.

// newPodCgroupNames lays out the pod cgroups for naming only (sandbox
// configs in unit tests); setupCgroups replaces it with a working one.
func newPodCgroupNames(cfg *config.Config) (*cgroups.Pods, error) {
	driver := cfg.Runtime.CgroupDriver
	if driver == "" {
		driver = cgroups.DriverCgroupfs
	}
	root := cfg.Runtime.CgroupRoot
	if root == "" {
		root = "/nodelet"
	}
	return cgroups.NewPods(nil, cgroups.PodOptions{Root: root, Driver: driver})
}

// setupCgroups checks that containerd uses runtime.cgroupDriver, then
// makes the node allocatable and QoS cgroups (the kubelet's
// setupNode: createNodeAllocatableCgroups, qosContainerManager.Start,
// enforceNodeAllocatableCgroups).
func (p *podResources) setupCgroups(ctx context.Context) error {
	names := p.cgroups
	if err := p.checkCgroupDriver(ctx, names.Driver()); err != nil {
		return err
	}
	mgr, err := cgroups.NewManager(names.Driver())
	if err != nil {
		return fmt.Errorf("runtime.cgroupDriver: %w", err)
	}
	enforce := map[string]bool{}
	for _, k := range p.cfg.Runtime.EnforceNodeAllocatable {
		enforce[k] = true
	}
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    p.capacity.CPU,
		corev1.ResourceMemory: p.capacity.Memory,
	}
	if n := cgroups.PidMax(); n > 0 {
		capacity["pid"] = *resource.NewQuantity(n, resource.DecimalSI)
	}
	kube, err := config.ParseReserved("node.kubeReserved", p.cfg.Node.KubeReserved)
	if err != nil {
		return err
	}
	system, err := config.ParseReserved("node.systemReserved", p.cfg.Node.SystemReserved)
	if err != nil {
		return err
	}
	allocatable := capacity
	if enforce["pods"] {
		// The kubelet's getNodeAllocatableInternalAbsolute: capacity less
		// both reservations (not the eviction threshold).
		allocatable = corev1.ResourceList{}
		for k, v := range capacity {
			v = v.DeepCopy()
			if q, ok := kube[k]; ok {
				v.Sub(q)
			}
			if q, ok := system[k]; ok {
				v.Sub(q)
			}
			if v.Sign() < 0 {
				v.Set(0)
			}
			allocatable[k] = v
		}
	}
	pods, err := cgroups.NewPods(mgr, cgroups.PodOptions{
		Root: p.cfg.Runtime.CgroupRoot, PodPidsLimit: p.cfg.Runtime.PodPidsLimit, NodeAllocatable: allocatable,
	})
	if err != nil {
		return fmt.Errorf("runtime.cgroupRoot: %w", err)
	}
	if err := pods.EnsureNode(); err != nil {
		return fmt.Errorf("create node allocatable cgroups: %w", err)
	}
	for _, r := range []struct {
		key, cgroup  string
		rl           corev1.ResourceList
		compressible bool
	}{
		{"system-reserved", p.cfg.Runtime.SystemReservedCgroup, system, false},
		{"kube-reserved", p.cfg.Runtime.KubeReservedCgroup, kube, false},
		{"system-reserved-compressible", p.cfg.Runtime.SystemReservedCgroup, system, true},
		{"kube-reserved-compressible", p.cfg.Runtime.KubeReservedCgroup, kube, true},
	} {
		if !enforce[r.key] {
			continue
		}
		if err := pods.EnforceExisting(r.cgroup, r.rl, r.compressible); err != nil {
			return fmt.Errorf("runtime.enforceNodeAllocatable %s: failed to enforce limits on %q: %w", r.key, r.cgroup, err)
		}
		p.log.Info("Enforced reserved limits on cgroup", "enforcement", r.key, "cgroupName", r.cgroup)
	}
	p.cgroups = pods
	p.log.Info("Pod cgroups ready", "cgroupDriver", mgr.Driver(), "cgroupV2", mgr.V2(), "cgroupRoot", p.cfg.Runtime.CgroupRoot,
		"podPidsLimit", p.cfg.Runtime.PodPidsLimit, "enforceNodeAllocatable", p.cfg.Runtime.EnforceNodeAllocatable)
	return nil
}

// runtimeCgroupDriver asks the runtime which cgroup driver it uses: CRI's
// RuntimeConfig (the kubelet's getCgroupDriverFromCRI), else, where that
// is not implemented (containerd 1.x), the SystemdCgroup option of the
// default runtime in the CRI plugin's config (Status verbose). "" when
// the runtime tells neither.
func (p *podResources) runtimeCgroupDriver(ctx context.Context) (driver, setting string, err error) {
	rc, err := p.rs.RuntimeConfig(ctx)
	if err == nil && rc.GetLinux() != nil {
		switch rc.GetLinux().GetCgroupDriver() {
		case runtimeapi.CgroupDriver_SYSTEMD:
			return cgroups.DriverSystemd, "the runtime's cgroup driver (CRI RuntimeConfig) is systemd", nil
		case runtimeapi.CgroupDriver_CGROUPFS:
			return cgroups.DriverCgroupfs, "the runtime's cgroup driver (CRI RuntimeConfig) is cgroupfs", nil
		}
	}
	if err != nil && status.Code(err) != codes.Unimplemented {
		return "", "", fmt.Errorf("CRI RuntimeConfig: %w", err)
	}
	st, err := p.rs.Status(ctx, true)
	if err != nil {
		return "", "", fmt.Errorf("CRI Status: %w", err)
	}
	raw, ok := st.GetInfo()["config"]
	if !ok {
		return "", "", nil
	}
	var c struct {
		Containerd struct {
			DefaultRuntimeName string `json:"defaultRuntimeName"`
			Runtimes           map[string]struct {
				Options map[string]any `json:"options"`
			} `json:"runtimes"`
		} `json:"containerd"`
	}
	if err := json.Unmarshal([]byte(raw), &c); err != nil {
		return "", "", nil
	}
	name := c.Containerd.DefaultRuntimeName
	rt, ok := c.Containerd.Runtimes[name]
	if !ok {
		return "", "", nil
	}
	systemd, _ := rt.Options["SystemdCgroup"].(bool)
	setting = fmt.Sprintf("containerd's runtime %q has SystemdCgroup = %t", name, systemd)
	if systemd {
		return cgroups.DriverSystemd, setting, nil
	}
	return cgroups.DriverCgroupfs, setting, nil
}

// checkCgroupDriver refuses to start when runtime.cgroupDriver is not the
// runtime's: pods would get cgroups the runtime does not look for.
func (p *podResources) checkCgroupDriver(ctx context.Context, driver string) error {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Runtime.RuntimeRequestTimeout)
	defer cancel()
	theirs, setting, err := p.runtimeCgroupDriver(ctx)
	if err != nil {
		return fmt.Errorf("cannot tell the container runtime's cgroup driver: %w", err)
	}
	if theirs == "" {
		p.log.Warn("Container runtime does not tell its cgroup driver, using runtime.cgroupDriver", "cgroupDriver", driver)
		return nil
	}
	if theirs != driver {
		return fmt.Errorf("runtime.cgroupDriver is %q but %s: they must match (set runtime.cgroupDriver: %s, or SystemdCgroup = %t in containerd's config)",
			driver, setting, theirs, driver == cgroups.DriverSystemd)
	}
	return nil
}

// cgroupParent is the pod's cgroup as CRI's CgroupParent names it (the
// kubelet's GetPodContainerNameForDriver).
func (p *podResources) cgroupParent(pod *corev1.Pod) string {
	pc := p.cgroups
	if pc == nil {
		// podResources not made by newPodResources (unit tests): names from the config.
		var err error
		if pc, err = newPodCgroupNames(p.cfg); err != nil {
			return ""
		}
	}
	return pc.ForCRI(string(pod.UID), podutil.QOSClass(pod))
}

// ensurePodCgroup makes the pod's cgroup with its limits before its
// sandbox (the kubelet's SyncPod: pcm.EnsureExists). A pod without one
// (a Daemon that was never Run) is left to the runtime's defaults.
func (p *podResources) ensurePodCgroup(pod *corev1.Pod) error {
	if p.cgroups.Manager() == nil {
		return nil
	}
	qos := podutil.QOSClass(pod)
	if p.cgroups.Exists(string(pod.UID), qos) {
		return nil
	}
	if err := p.cgroups.Ensure(pod, qos); err != nil {
		return err
	}
	// A new burstable pod adds its CPU requests to its QoS cgroup's shares
	// (the kubelet's SyncPod: UpdateQOSCgroups after a new pod cgroup).
	if qos == corev1.PodQOSBurstable {
		p.updateQOSCgroups()
	}
	return nil
}

// removePodCgroup kills what is left in the pod's cgroup and removes it,
// whatever its QoS class was (the spec may be gone).
func (p *podResources) removePodCgroup(uid string, _ *corev1.Pod) error {
	p.forgetResize(uid)
	if p.cgroups.Manager() == nil {
		return nil
	}
	var errs []error
	for _, q := range []corev1.PodQOSClass{corev1.PodQOSGuaranteed, corev1.PodQOSBurstable, corev1.PodQOSBestEffort} {
		n := p.cgroups.PodName(uid, q)
		if !p.cgroups.Manager().Exists(n) && len(p.cgroups.Manager().Pids(n)) == 0 {
			// Exists needs every controller; a partial one is removed too.
			_ = p.cgroups.Manager().Destroy(n)
			continue
		}
		if err := p.cgroups.Destroy(n); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		// The caller or the orphan cleanup tries again.
		p.log.Warn("Cannot remove pod cgroup", "podUID", uid, "err", err)
		return err
	}
	p.updateQOSCgroups()
	return nil
}

// cleanupOrphanedPodCgroups removes the cgroups of pods that no input and
// no container of the runtime knows (the kubelet's
// cleanupOrphanedPodCgroups), e.g. left by a pod removed while
// nodelet-runtime was down.
func (p *podResources) cleanupOrphanedPodCgroups(ctx context.Context) {
	if p.cgroups.Manager() == nil || !p.store.sourcesReady() {
		return
	}
	known := map[string]bool{}
	for _, uid := range p.store.uids() {
		known[uid] = true
	}
	for uid, n := range p.cgroups.OnDisk() {
		if known[uid] {
			continue
		}
		pr, err := p.view.pod(ctx, uid)
		if err != nil || !pr.empty() {
			continue // its worker removes it with its sandboxes
		}
		if err := p.cgroups.Destroy(n); err != nil {
			p.log.Warn("Cannot remove orphaned pod cgroup", "podUID", uid, "cgroupName", n.ToCgroupfs(), "err", err)
			continue
		}
		p.log.Info("Removed orphaned pod cgroup", "podUID", uid, "cgroupName", n.ToCgroupfs())
	}
}

// updateQOSCgroups gives the burstable cgroup the summed CPU requests of
// the burstable pods as shares (the kubelet's qosContainerManager
// UpdateCgroups, CPU part).
func (p *podResources) updateQOSCgroups() {
	if p.cgroups.Manager() == nil {
		return
	}
	var milli int64
	for _, uid := range p.store.uids() {
		rec := p.store.get(uid)
		if rec == nil || rec.Pod == nil || rec.Gone || rec.Verdict == nil || !rec.Verdict.Admitted || podutil.QOSClass(rec.Pod) != corev1.PodQOSBurstable {
			continue
		}
		if o := p.observed.get(uid); o != nil && o.Terminated {
			continue
		}
		if podutil.IsTerminalPhase(rec.Pod.Status.Phase) {
			continue
		}
		req := resourcehelper.PodRequests(p.allocatedPod(rec.Pod), resourcehelper.PodResourcesOptions{})
		milli += req.Cpu().MilliValue()
	}
	if err := p.cgroups.SetBurstableShares(milli); err != nil {
		p.log.Warn("Cannot update burstable QoS cgroup", "err", err)
	}
}

// ensurePodCgroup is syncRunning's pod cgroup step: the pod's cgroup
// exists with its limits before its sandbox (the kubelet's SyncPod,
// pcm.EnsureExists, "unable to ensure pod container exists").
func (s *podSync) ensurePodCgroup(ctx context.Context) *syncResult {
	err := s.m.resources.ensurePodCgroup(s.pod)
	if err == nil {
		return nil
	}
	msg := fmt.Sprintf("unable to ensure pod container exists: %v", err)
	s.m.log.Error("Failed to ensure that the pod cgroups exist", "pod", podRef(s.pod), "podUID", s.uid, "err", err)
	s.m.event(s.pod, nil, "", corev1.EventTypeWarning, "FailedCreatePodContainer", msg)
	s.st.setPodReason("FailedCreatePodContainer", msg)
	s.publish(ctx)
	return requeueIn(retryWaiting)
}
