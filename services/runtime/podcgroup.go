package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/cgroups"
	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/internal/podutil"
)

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
func (m *Daemon) setupCgroups(ctx context.Context) error {
	names := m.cgroups
	if err := m.checkCgroupDriver(ctx, names.Driver()); err != nil {
		return err
	}
	mgr, err := cgroups.NewManager(names.Driver())
	if err != nil {
		return fmt.Errorf("runtime.cgroupDriver: %w", err)
	}
	enforce := map[string]bool{}
	for _, k := range m.cfg.Runtime.EnforceNodeAllocatable {
		enforce[k] = true
	}
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    m.capacity.CPU,
		corev1.ResourceMemory: m.capacity.Memory,
	}
	if n := cgroups.PidMax(); n > 0 {
		capacity["pid"] = *resource.NewQuantity(n, resource.DecimalSI)
	}
	kube, err := config.ParseReserved("node.kubeReserved", m.cfg.Node.KubeReserved)
	if err != nil {
		return err
	}
	system, err := config.ParseReserved("node.systemReserved", m.cfg.Node.SystemReserved)
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
		Root: m.cfg.Runtime.CgroupRoot, PodPidsLimit: m.cfg.Runtime.PodPidsLimit, NodeAllocatable: allocatable,
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
		{"system-reserved", m.cfg.Runtime.SystemReservedCgroup, system, false},
		{"kube-reserved", m.cfg.Runtime.KubeReservedCgroup, kube, false},
		{"system-reserved-compressible", m.cfg.Runtime.SystemReservedCgroup, system, true},
		{"kube-reserved-compressible", m.cfg.Runtime.KubeReservedCgroup, kube, true},
	} {
		if !enforce[r.key] {
			continue
		}
		if err := pods.EnforceExisting(r.cgroup, r.rl, r.compressible); err != nil {
			return fmt.Errorf("runtime.enforceNodeAllocatable %s: failed to enforce limits on %q: %w", r.key, r.cgroup, err)
		}
		m.log.Info("Enforced reserved limits on cgroup", "enforcement", r.key, "cgroupName", r.cgroup)
	}
	m.cgroups = pods
	m.log.Info("Pod cgroups ready", "cgroupDriver", mgr.Driver(), "cgroupV2", mgr.V2(), "cgroupRoot", m.cfg.Runtime.CgroupRoot,
		"podPidsLimit", m.cfg.Runtime.PodPidsLimit, "enforceNodeAllocatable", m.cfg.Runtime.EnforceNodeAllocatable)
	return nil
}

// runtimeCgroupDriver asks the runtime which cgroup driver it uses: CRI's
// RuntimeConfig (the kubelet's getCgroupDriverFromCRI), else, where that
// is not implemented (containerd 1.x), the SystemdCgroup option of the
// default runtime in the CRI plugin's config (Status verbose). "" when
// the runtime tells neither.
func (m *Daemon) runtimeCgroupDriver(ctx context.Context) (driver, setting string, err error) {
	rc, err := m.rs.RuntimeConfig(ctx)
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
	st, err := m.rs.Status(ctx, true)
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
func (m *Daemon) checkCgroupDriver(ctx context.Context, driver string) error {
	ctx, cancel := context.WithTimeout(ctx, m.cfg.Runtime.RuntimeRequestTimeout)
	defer cancel()
	theirs, setting, err := m.runtimeCgroupDriver(ctx)
	if err != nil {
		return fmt.Errorf("cannot tell the container runtime's cgroup driver: %w", err)
	}
	if theirs == "" {
		m.log.Warn("Container runtime does not tell its cgroup driver, using runtime.cgroupDriver", "cgroupDriver", driver)
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
func (m *Daemon) cgroupParent(pod *corev1.Pod) string {
	pc := m.cgroups
	if pc == nil {
		// A Daemon not made by New (unit tests): names from the config.
		var err error
		if pc, err = newPodCgroupNames(m.cfg); err != nil {
			return ""
		}
	}
	return pc.ForCRI(string(pod.UID), podutil.QOSClass(pod))
}

// ensurePodCgroup makes the pod's cgroup with its limits before its
// sandbox (the kubelet's SyncPod: pcm.EnsureExists). A pod without one
// (a Daemon that was never Run) is left to the runtime's defaults.
func (m *Daemon) ensurePodCgroup(pod *corev1.Pod) error {
	if m.cgroups.Manager() == nil {
		return nil
	}
	qos := podutil.QOSClass(pod)
	if m.cgroups.Exists(string(pod.UID), qos) {
		return nil
	}
	if err := m.cgroups.Ensure(pod, qos); err != nil {
		return err
	}
	// A new burstable pod adds its CPU requests to its QoS cgroup's shares
	// (the kubelet's SyncPod: UpdateQOSCgroups after a new pod cgroup).
	if qos == corev1.PodQOSBurstable {
		m.updateQOSCgroups()
	}
	return nil
}

// removePodCgroup kills what is left in the pod's cgroup and removes it,
// whatever its QoS class was (the spec may be gone).
func (m *Daemon) removePodCgroup(uid string, _ *corev1.Pod) {
	m.forgetResize(uid)
	if m.cgroups.Manager() == nil {
		return
	}
	var errs []error
	for _, q := range []corev1.PodQOSClass{corev1.PodQOSGuaranteed, corev1.PodQOSBurstable, corev1.PodQOSBestEffort} {
		n := m.cgroups.PodName(uid, q)
		if !m.cgroups.Manager().Exists(n) && len(m.cgroups.Manager().Pids(n)) == 0 {
			// Exists needs every controller; a partial one is removed too.
			_ = m.cgroups.Manager().Destroy(n)
			continue
		}
		if err := m.cgroups.Destroy(n); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		// The orphan cleanup tries again.
		m.log.Warn("Cannot remove pod cgroup", "podUID", uid, "err", errors.Join(errs...))
		return
	}
	m.updateQOSCgroups()
}

// cleanupOrphanedPodCgroups removes the cgroups of pods that no input and
// no container of the runtime knows (the kubelet's
// cleanupOrphanedPodCgroups), e.g. left by a pod removed while
// nodelet-runtime was down.
func (m *Daemon) cleanupOrphanedPodCgroups(ctx context.Context) {
	if m.cgroups.Manager() == nil || !m.store.sourcesReady() {
		return
	}
	known := map[string]bool{}
	for _, uid := range m.store.uids() {
		known[uid] = true
	}
	for uid, n := range m.cgroups.OnDisk() {
		if known[uid] {
			continue
		}
		pr, err := m.view.pod(ctx, uid)
		if err != nil || !pr.empty() {
			continue // its worker removes it with its sandboxes
		}
		if err := m.cgroups.Destroy(n); err != nil {
			m.log.Warn("Cannot remove orphaned pod cgroup", "podUID", uid, "cgroupName", n.ToCgroupfs(), "err", err)
			continue
		}
		m.log.Info("Removed orphaned pod cgroup", "podUID", uid, "cgroupName", n.ToCgroupfs())
	}
}

// updateQOSCgroups gives the burstable cgroup the summed CPU requests of
// the burstable pods as shares (the kubelet's qosContainerManager
// UpdateCgroups, CPU part).
func (m *Daemon) updateQOSCgroups() {
	if m.cgroups.Manager() == nil {
		return
	}
	var milli int64
	for _, uid := range m.store.uids() {
		rec := m.store.get(uid)
		if rec == nil || rec.Pod == nil || rec.Gone || rec.Verdict == nil || !rec.Verdict.Admitted || podutil.QOSClass(rec.Pod) != corev1.PodQOSBurstable {
			continue
		}
		if o := m.observed.get(uid); o != nil && o.Terminated {
			continue
		}
		if ph := rec.Pod.Status.Phase; ph == corev1.PodFailed || ph == corev1.PodSucceeded {
			continue
		}
		req := resourcehelper.PodRequests(m.allocatedPod(rec.Pod), resourcehelper.PodResourcesOptions{})
		milli += req.Cpu().MilliValue()
	}
	if err := m.cgroups.SetBurstableShares(milli); err != nil {
		m.log.Warn("Cannot update burstable QoS cgroup", "err", err)
	}
}

// ensurePodCgroup is syncRunning's pod cgroup step: the pod's cgroup
// exists with its limits before its sandbox (the kubelet's SyncPod,
// pcm.EnsureExists, "unable to ensure pod container exists").
func (s *podSync) ensurePodCgroup(ctx context.Context) *syncResult {
	err := s.m.ensurePodCgroup(s.pod)
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
