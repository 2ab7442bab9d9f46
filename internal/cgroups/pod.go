package cgroups

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"

	corev1 "k8s.io/api/core/v1"
)

// podPrefix starts every pod cgroup's last component (the kubelet's
// podCgroupNamePrefix).
const podPrefix = "pod"

// PodOptions configure the pod cgroup hierarchy.
type PodOptions struct {
	// Root is the node-allocatable cgroup, the kubelet's kubepods, in
	// cgroupfs form (runtime.cgroupRoot, e.g. /nodelet).
	Root string
	// PodPidsLimit caps the processes of each pod; 0 or -1 leaves it
	// unlimited (KubeletConfiguration podPidsLimit).
	PodPidsLimit int64
	// NodeAllocatable is what the root cgroup is given (capacity, or
	// capacity less the reservations when "pods" is enforced).
	NodeAllocatable corev1.ResourceList
	// CPUPeriod is the CFS period; default 100ms.
	CPUPeriod uint64
	// Driver names the cgroups when NewPods is given no Manager (naming
	// only); with a Manager its driver is used.
	Driver string
}

// Pods is the kubelet's QoS and pod container managers over one
// Manager: the root (kubepods), its burstable and besteffort children,
// and a cgroup per pod: Guaranteed pods directly under the root.
type Pods struct {
	m          *Manager
	opts       PodOptions
	root       Name
	burstable  Name
	besteffort Name
}

// NewPods lays out the hierarchy under opts.Root; nothing is created
// before EnsureNode.
func NewPods(m *Manager, opts PodOptions) (*Pods, error) {
	root := ParseCgroupfs(opts.Root)
	if len(root) == 0 {
		return nil, errors.New("cgroup root must not be /")
	}
	if _, err := NewName(nil, root...); err != nil {
		return nil, fmt.Errorf("cgroup root %q: %w", opts.Root, err)
	}
	if opts.CPUPeriod == 0 {
		opts.CPUPeriod = QuotaPeriod
	}
	if m != nil {
		opts.Driver = m.driver
	}
	if err := ValidateDriver(opts.Driver); err != nil {
		return nil, err
	}
	b, _ := NewName(root, "burstable")
	be, _ := NewName(root, "besteffort")
	return &Pods{m: m, opts: opts, root: root, burstable: b, besteffort: be}, nil
}

// Manager is the cgroup manager the hierarchy uses; nil when it only names.
func (p *Pods) Manager() *Manager {
	if p == nil {
		return nil
	}
	return p.m
}

// Driver is the cgroup driver of the names.
func (p *Pods) Driver() string { return p.opts.Driver }

// Root is the node-allocatable cgroup's name.
func (p *Pods) Root() Name { return p.root }

// EnsureNode creates the root with the node's allocatable resources (the
// kubelet's createNodeAllocatableCgroups and enforceNodeAllocatableCgroups)
// and the QoS cgroups (qosContainerManager.Start: besteffort gets the
// minimum CPU shares).
func (p *Pods) EnsureNode() error {
	rc := NodeAllocatableConfig(p.opts.NodeAllocatable)
	if !p.m.Exists(p.root) {
		if err := p.m.Create(p.root, rc); err != nil {
			return err
		}
	} else if err := p.m.Update(p.root, rc); err != nil {
		return fmt.Errorf("enforce node allocatable on %s: %w", p.root.Path(p.m.driver), err)
	}
	minShares := uint64(MinShares)
	for _, q := range []struct {
		n  Name
		rc *ResourceConfig
	}{{p.burstable, &ResourceConfig{}}, {p.besteffort, &ResourceConfig{CPUShares: &minShares}}} {
		if p.m.Exists(q.n) {
			continue
		}
		if err := p.m.Create(q.n, q.rc); err != nil {
			return err
		}
	}
	return nil
}

// EnforceExisting sets the limits of rl on an existing cgroup given in
// the driver's form (the kubelet's enforceExistingCgroup, for
// kubeReservedCgroup and systemReservedCgroup); compressible limits CPU
// only.
func (p *Pods) EnforceExisting(cgroup string, rl corev1.ResourceList, compressible bool) error {
	var n Name
	if p.m.driver == DriverSystemd {
		n = ParseSystemd(cgroup)
	} else {
		n = ParseCgroupfs(cgroup)
	}
	if !p.m.Exists(n) {
		return fmt.Errorf("cgroup %q does not exist", cgroup)
	}
	rc := NodeAllocatableConfig(rl)
	if compressible {
		rc = &ResourceConfig{CPUShares: rc.CPUShares}
	}
	return p.m.Update(n, rc)
}

// QOSName is the parent of the pods of class qos.
func (p *Pods) QOSName(qos corev1.PodQOSClass) Name {
	switch qos {
	case corev1.PodQOSGuaranteed:
		return p.root
	case corev1.PodQOSBurstable:
		return p.burstable
	default:
		return p.besteffort
	}
}

// PodName is the pod's cgroup (the kubelet's GetPodContainerName).
func (p *Pods) PodName(uid string, qos corev1.PodQOSClass) Name {
	return append(append(Name{}, p.QOSName(qos)...), podPrefix+uid)
}

// ForCRI is the pod's CgroupParent for CRI in the driver's form.
func (p *Pods) ForCRI(uid string, qos corev1.PodQOSClass) string {
	return p.PodName(uid, qos).ForCRI(p.opts.Driver)
}

// PodConfig is what the pod's cgroup gets: ResourceConfigForPod with the
// pod PID limit.
func (p *Pods) PodConfig(pod *corev1.Pod, qos corev1.PodQOSClass) *ResourceConfig {
	rc := ResourceConfigForPod(pod, qos, true, p.opts.CPUPeriod)
	if p.opts.PodPidsLimit > 0 {
		l := p.opts.PodPidsLimit
		rc.PidsLimit = &l
	}
	return rc
}

// Ensure creates the pod's cgroup with its limits when it does not exist
// (the kubelet's podContainerManager.EnsureExists); an existing one is
// left as it is (a resize updates it through Update).
func (p *Pods) Ensure(pod *corev1.Pod, qos corev1.PodQOSClass) error {
	n := p.PodName(string(pod.UID), qos)
	if p.m.Exists(n) {
		return nil
	}
	if err := p.m.Create(n, p.PodConfig(pod, qos)); err != nil {
		return fmt.Errorf("failed to create container for %v : %w", n.ToCgroupfs(), err)
	}
	return nil
}

// Exists reports whether the pod's cgroup exists.
func (p *Pods) Exists(uid string, qos corev1.PodQOSClass) bool {
	return p.m.Exists(p.PodName(uid, qos))
}

// Update sets rc on the pod's cgroup (the kubelet's SetPodCgroupConfig).
func (p *Pods) Update(uid string, qos corev1.PodQOSClass, rc *ResourceConfig) error {
	return p.m.Update(p.PodName(uid, qos), rc)
}

// Destroy kills what still runs in the pod's cgroup and removes it (the
// kubelet's podContainerManager.Destroy).
func (p *Pods) Destroy(n Name) error {
	var errs []error
	for range 5 {
		pids := p.m.Pids(n)
		if len(pids) == 0 {
			errs = nil
			break
		}
		errs = nil
		for _, pid := range pids {
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
				errs = append(errs, fmt.Errorf("kill %d: %w", pid, err))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("failed to kill all the processes attached to the %v cgroups : %w", n.ToCgroupfs(), err)
	}
	return p.m.Destroy(n)
}

// OnDisk lists the pod cgroups that exist, by pod UID (the kubelet's
// GetAllPodsFromCgroups).
func (p *Pods) OnDisk() map[string]Name {
	out := map[string]Name{}
	for _, parent := range []Name{p.besteffort, p.burstable, p.root} {
		for _, child := range p.m.Children(parent) {
			base := child[len(child)-1]
			uid, ok := strings.CutPrefix(base, podPrefix)
			if !ok || uid == "" {
				continue
			}
			out[uid] = child
		}
	}
	return out
}

// SetBurstableShares sets the burstable cgroup's CPU shares to the summed
// CPU requests of the burstable pods (the kubelet's qosContainerManager
// setCPUCgroupConfig).
func (p *Pods) SetBurstableShares(milliCPU int64) error {
	s := MilliCPUToShares(milliCPU)
	if !p.m.Exists(p.burstable) {
		return nil
	}
	return p.m.Update(p.burstable, &ResourceConfig{CPUShares: &s})
}

// PidMax is the node's process capacity (the kubelet's pid capacity).
func PidMax() int64 {
	b, err := os.ReadFile("/proc/sys/kernel/pid_max")
	if err != nil {
		return 0
	}
	var v int64
	_, _ = fmt.Sscan(strings.TrimSpace(string(b)), &v)
	return v
}
