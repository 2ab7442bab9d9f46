package nodestatus

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	cadvisorapi "github.com/google/cadvisor/lib/model"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/internal/hostinfo"
)

// MachineCapacity is the kubelet's cadvisor.CapacityFromMachineInfo (cpu,
// memory and huge pages) plus ephemeral-storage from the filesystem of the
// state dir (rootfs; nil leaves it out). Without MachineInfo cpu and
// memory are zero, as the kubelet's MachineInfo setter reports them.
func MachineCapacity(info *cadvisorapi.MachineInfo, rootfs *hostinfo.FsStats) corev1.ResourceList {
	c := corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewMilliQuantity(0, resource.DecimalSI),
		corev1.ResourceMemory: resource.MustParse("0Gi"),
	}
	if info != nil {
		c[corev1.ResourceCPU] = *resource.NewMilliQuantity(int64(info.NumCores)*1000, resource.DecimalSI)
		c[corev1.ResourceMemory] = *resource.NewQuantity(int64(info.MemoryCapacity), resource.BinarySI)
		for _, hp := range info.HugePages {
			size := int64(hp.PageSize) * 1024
			q := resource.NewQuantity(size, resource.BinarySI)
			c[corev1.ResourceName(corev1.ResourceHugePagesPrefix+q.String())] = *resource.NewQuantity(size*int64(hp.NumPages), resource.BinarySI)
		}
	}
	if rootfs != nil {
		c[corev1.ResourceEphemeralStorage] = *resource.NewQuantity(int64(rootfs.Capacity), resource.BinarySI)
	}
	return c
}

// FsError says the state dir's filesystem could not be measured: the
// capacity returned with it has cpu and memory but no ephemeral-storage.
type FsError struct {
	Dir string
	Err error
}

func (e *FsError) Error() string {
	return fmt.Sprintf("ephemeral-storage: filesystem of %s (node.stateDir): %v", e.Dir, e.Err)
}

func (e *FsError) Unwrap() error { return e.Err }

// ReadCapacity reads the machine through m (cAdvisor's MachineInfo, read
// once) and the filesystem of stateDir: MachineCapacity of what it finds.
// Without MachineInfo it fails; a filesystem it cannot measure gives the
// rest of the capacity and a *FsError.
func ReadCapacity(m *hostinfo.Machine, stateDir string) (corev1.ResourceList, error) {
	info, err := m.Info()
	if err != nil {
		return nil, err
	}
	if info.NumCores <= 0 {
		return nil, errors.New("cAdvisor machine info: found no cpus")
	}
	fs, err := m.DirFs(stateDir)
	if err != nil {
		return MachineCapacity(info, nil), &FsError{Dir: stateDir, Err: err}
	}
	return MachineCapacity(info, &fs), nil
}

// Resources is the node's capacity and allocatable from what the machine
// has: capacity is machine plus pods = node.maxPods; allocatable is
// capacity less Reservation, never below zero, and memory less the huge
// pages (the kubelet's nodestatus.MachineInfo setter). A reservation that
// is not a quantity is an error, for every caller alike.
func Resources(cfg *config.Config, machine corev1.ResourceList) (capacity, allocatable corev1.ResourceList, err error) {
	capacity = machine.DeepCopy()
	if capacity == nil {
		capacity = corev1.ResourceList{}
	}
	capacity[corev1.ResourcePods] = *resource.NewQuantity(int64(cfg.Node.MaxPods), resource.DecimalSI)
	allocatable, err = Allocatable(cfg, capacity)
	if err != nil {
		return nil, nil, err
	}
	return capacity, allocatable, nil
}

// Allocatable is capacity less Reservation, never below zero, and memory
// less the huge pages: the kubelet's nodestatus.MachineInfo setter over
// GetNodeAllocatableReservation. A reservation that is not a quantity is
// an error, for every caller alike.
func Allocatable(cfg *config.Config, capacity corev1.ResourceList) (corev1.ResourceList, error) {
	reserved, err := Reservation(cfg, capacity)
	if err != nil {
		return nil, err
	}
	allocatable := corev1.ResourceList{}
	for name, c := range capacity {
		v := c.DeepCopy()
		if r, ok := reserved[name]; ok {
			v.Sub(r)
		}
		if v.Sign() < 0 {
			v.Set(0)
		}
		allocatable[name] = v
	}
	if mem, ok := allocatable[corev1.ResourceMemory]; ok {
		for name, c := range capacity {
			if strings.HasPrefix(string(name), corev1.ResourceHugePagesPrefix) {
				mem.Sub(c)
			}
		}
		if mem.Sign() < 0 {
			mem.Set(0)
		}
		allocatable[corev1.ResourceMemory] = mem
	}
	return allocatable, nil
}

// Reservation is node.kubeReserved + node.systemReserved + what the hard
// eviction thresholds on memory.available and nodefs.available keep free
// (a percentage of capacity), for the resources capacity has: the
// kubelet's GetNodeAllocatableReservation with hardEvictionReservation.
func Reservation(cfg *config.Config, capacity corev1.ResourceList) (corev1.ResourceList, error) {
	kube, err := config.ParseReserved("node.kubeReserved", cfg.Node.KubeReserved)
	if err != nil {
		return nil, err
	}
	system, err := config.ParseReserved("node.systemReserved", cfg.Node.SystemReserved)
	if err != nil {
		return nil, err
	}
	eviction, err := hardEvictionReservation(cfg.GC.EvictionHard, capacity)
	if err != nil {
		return nil, err
	}
	out := corev1.ResourceList{}
	for name := range capacity {
		v := resource.NewQuantity(0, resource.DecimalSI)
		for _, l := range []corev1.ResourceList{system, kube, eviction} {
			if q, ok := l[name]; ok {
				v.Add(q)
			}
		}
		if !v.IsZero() {
			out[name] = *v
		}
	}
	return out, nil
}

// evictionSignals are the hard eviction signals that reserve a resource.
var evictionSignals = map[string]corev1.ResourceName{
	"memory.available": corev1.ResourceMemory,
	"nodefs.available": corev1.ResourceEphemeralStorage,
}

// hardEvictionReservation is the kubelet's cm.hardEvictionReservation: the
// part of memory and ephemeral storage the hard eviction thresholds keep
// free.
func hardEvictionReservation(thresholds map[string]string, capacity corev1.ResourceList) (corev1.ResourceList, error) {
	signals := make([]string, 0, len(thresholds))
	for s := range thresholds {
		signals = append(signals, s)
	}
	sort.Strings(signals)
	out := corev1.ResourceList{}
	for _, signal := range signals {
		name, ok := evictionSignals[signal]
		if !ok {
			continue
		}
		q, fraction, err := config.ParseThreshold(thresholds[signal])
		if err != nil {
			return nil, &config.Error{Key: "gc.evictionHard", Problem: fmt.Sprintf("%s: %v", signal, err)}
		}
		if q == nil {
			c := capacity[name]
			q = resource.NewQuantity(int64(float64(c.Value())*fraction), resource.BinarySI)
		}
		out[name] = *q
	}
	return out, nil
}
