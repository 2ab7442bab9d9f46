package admission

import (
	"fmt"
	"runtime"

	"github.com/google/cadvisor/lib/fs"
	"github.com/google/cadvisor/lib/machine"
	"github.com/google/cadvisor/lib/utils/sysfs"
	"github.com/google/cadvisor/lib/utils/sysinfo"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	// Filesystem plugins cAdvisor needs to stat the state dir's filesystem.
	_ "github.com/google/cadvisor/lib/fs/overlay/install"
	_ "github.com/google/cadvisor/lib/fs/tmpfs/install"
	_ "github.com/google/cadvisor/lib/fs/vfs/install"

	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/internal/hostinfo"
)

// Capacity reports what the machine has before anything is reserved: cpu,
// memory, hugepages-<size> and ephemeral-storage, as the kubelet's node
// status reports them from cAdvisor's MachineInfo.
type Capacity interface {
	Capacity() (corev1.ResourceList, error)
}

// StaticCapacity is a fixed capacity: tests use it to stand for a node of a
// given size.
type StaticCapacity corev1.ResourceList

// Capacity returns a copy of c.
func (c StaticCapacity) Capacity() (corev1.ResourceList, error) {
	return corev1.ResourceList(c).DeepCopy(), nil
}

// hugepagesDir is where the kernel lists the pre-allocated huge pages.
const hugepagesDir = "/sys/kernel/mm/hugepages/"

// MachineCapacity reads the machine with cAdvisor's machine-info helpers
// (the pieces of machine.Info the kubelet's capacity comes from: NumCores,
// MemoryCapacity, HugePages and the filesystem of the kubelet's root dir),
// without starting cAdvisor's manager.
type MachineCapacity struct {
	// Dir is the state dir; its filesystem's size is ephemeral-storage.
	Dir string
}

// Capacity reads the machine. A filesystem that cannot be read leaves
// ephemeral-storage out, as the kubelet does when cAdvisor has no root fs
// info; cpu and memory are required.
func (m MachineCapacity) Capacity() (corev1.ResourceList, error) {
	sysFs := sysfs.NewRealSysFs()
	// cAdvisor's machine.Info logs a topology error and keeps the core
	// count it found; only no cores at all is fatal.
	_, cores, err := machine.GetTopology(sysFs)
	if cores <= 0 {
		return nil, fmt.Errorf("read the number of cpus (cAdvisor topology): found none: %v", err)
	}
	memory, err := machine.GetMachineMemoryCapacity()
	if err != nil {
		return nil, fmt.Errorf("read the memory capacity (cAdvisor): %w", err)
	}
	out := corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewMilliQuantity(int64(cores)*1000, resource.DecimalSI),
		corev1.ResourceMemory: *resource.NewQuantity(int64(memory), resource.BinarySI),
	}
	pages, err := sysinfo.GetHugePagesInfo(sysFs, hugepagesDir)
	if err != nil {
		return nil, fmt.Errorf("read huge pages (cAdvisor): %w", err)
	}
	for _, hp := range pages {
		size := resource.NewQuantity(int64(hp.PageSize)*1024, resource.BinarySI)
		name := corev1.ResourceName(corev1.ResourceHugePagesPrefix + size.String())
		out[name] = *resource.NewQuantity(int64(hp.NumPages*hp.PageSize*1024), resource.BinarySI)
	}
	if capacity, err := dirFsCapacity(m.Dir); err == nil {
		out[corev1.ResourceEphemeralStorage] = *resource.NewQuantity(int64(capacity), resource.BinarySI)
	} else {
		return out, &fsError{dir: m.Dir, err: err}
	}
	return out, nil
}

// fsError says the state dir's filesystem could not be read; the capacity
// returned with it is still good for cpu and memory.
type fsError struct {
	dir string
	err error
}

func (e *fsError) Error() string {
	return fmt.Sprintf("ephemeral-storage: filesystem of %s (node.stateDir): %v", e.dir, e.err)
}

func (e *fsError) Unwrap() error { return e.err }

// dirFsCapacity is the size of the filesystem holding dir, found the way
// cAdvisor finds the kubelet's root filesystem.
func dirFsCapacity(dir string) (uint64, error) {
	info, err := fs.NewFsInfo(fs.Context{})
	if err != nil {
		return 0, err
	}
	dev, err := info.GetDirFsDevice(dir)
	if err != nil {
		return 0, err
	}
	mountpoint, err := info.GetMountpointForDevice(dev.Device)
	if err != nil {
		return 0, err
	}
	filesystems, err := info.GetFsInfoForPath(map[string]struct{}{mountpoint: {}})
	if err != nil {
		return 0, err
	}
	for _, f := range filesystems {
		if f.Device == dev.Device {
			return f.Capacity, nil
		}
	}
	return 0, fmt.Errorf("cAdvisor has no statistics for device %s mounted on %s", dev.Device, mountpoint)
}

// NodeFromConfig builds the node object admission checks pods against: the
// node's name, labels (kubernetes.io/hostname, os and arch, then
// node.labels, which win as the kubelet's --node-labels do), taints
// (node.taints), capacity (capacity plus pods = node.maxPods) and
// allocatable. nodelet-status publishes the same node, so it may call this
// too.
func NodeFromConfig(cfg *config.Config, capacity corev1.ResourceList) (*corev1.Node, error) {
	capacity = capacity.DeepCopy()
	capacity[corev1.ResourcePods] = *resource.NewQuantity(int64(cfg.Node.MaxPods), resource.DecimalSI)
	allocatable, err := Allocatable(cfg, capacity)
	if err != nil {
		return nil, err
	}
	labels := map[string]string{
		corev1.LabelHostname:   cfg.Node.Name,
		corev1.LabelOSStable:   runtime.GOOS,
		corev1.LabelArchStable: runtime.GOARCH,
	}
	for k, v := range cfg.Node.Labels {
		labels[k] = v
	}
	var taints []corev1.Taint
	for _, t := range cfg.Node.Taints {
		taints = append(taints, corev1.Taint{Key: t.Key, Value: t.Value, Effect: corev1.TaintEffect(t.Effect)})
	}
	no := false
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: cfg.Node.Name, Labels: labels},
		Spec:       corev1.NodeSpec{Taints: taints},
		Status: corev1.NodeStatus{
			Capacity:    capacity,
			Allocatable: allocatable,
			// containerd 1.6 reports no supplemental-groups-policy support
			// through CRI, and admission does not talk to CRI: a pod asking
			// for SupplementalGroupsPolicy=Strict is refused, as the kubelet
			// refuses it on such a runtime.
			Features: &corev1.NodeFeatures{SupplementalGroupsPolicy: &no},
			NodeInfo: corev1.NodeSystemInfo{OperatingSystem: runtime.GOOS, Architecture: runtime.GOARCH},
		},
	}, nil
}

// Allocatable is the node's allocatable resources, hostinfo.Allocatable
// (the kubelet's GetNodeAllocatableReservation and its node-status setter).
func Allocatable(cfg *config.Config, capacity corev1.ResourceList) (corev1.ResourceList, error) {
	return hostinfo.Allocatable(cfg, capacity)
}
