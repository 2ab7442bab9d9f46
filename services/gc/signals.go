package gc

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/cri"
	"github.com/nodelet/nodelet/internal/hostinfo"
)

// FsStats is one filesystem as statfs sees it.
type FsStats struct {
	// Device is the st_dev of the measured path: two paths on the same
	// filesystem have the same Device.
	Device     uint64
	Path       string
	Capacity   int64 // bytes
	Available  int64 // bytes available to unprivileged users
	Inodes     int64
	InodesFree int64
}

// NodeStats are the node-level measurements the eviction signals and image
// GC are computed from. A nil or zero part was not measured.
type NodeStats struct {
	Time time.Time
	// MemoryCapacity and MemoryWorkingSet in bytes (see readMemory).
	MemoryCapacity   int64
	MemoryWorkingSet int64
	// NodeFs is the filesystem of node.stateDir (pod volumes; the pod log
	// dir is expected on it too, as /var/lib/kubelet and /var/log are).
	NodeFs *FsStats
	// ImageFs is the filesystem CRI ImageFsInfo names for images.
	ImageFs *FsStats
	// MaxPID and Processes for pid.available.
	MaxPID    int64
	Processes int64
}

// ContainerUsage is one container's use of node resources.
type ContainerUsage struct {
	Name string
	// MemoryWorkingSet in bytes; nil when the runtime gave no figure.
	MemoryWorkingSet *int64
	// Rootfs is the container's writable layer, Logs its log files.
	RootfsBytes, RootfsInodes int64
	LogsBytes, LogsInodes     int64
}

// VolumeUsage is one emptyDir volume's use of its filesystem.
type VolumeUsage struct {
	Bytes, Inodes int64
}

// PodUsage is one pod's use of node resources.
type PodUsage struct {
	Containers map[string]*ContainerUsage
	// Volumes holds the pod's emptyDir volumes by name.
	Volumes   map[string]VolumeUsage
	Processes int64
}

// Measurer measures the node and its pods. Tests replace it to fake
// pressure; the default one reads /proc, the root memory cgroup, statfs and
// CRI.
type Measurer interface {
	NodeStats(ctx context.Context) (*NodeStats, error)
	// PodUsage measures the given pods, with their process counts when
	// processes is set; a pod with no figures is left out.
	PodUsage(ctx context.Context, pods []*corev1.Pod, processes bool) (map[string]*PodUsage, error)
}

// nodeMeasurer is the real Measurer.
//
// memory.available is computed as the kubelet does: capacity (MemTotal of
// /proc/meminfo) minus the working set of the root memory cgroup (usage
// minus inactive file pages; cgroup v1 memory.usage_in_bytes and
// memory.stat total_inactive_file). On cgroup v2 the root has no usage
// file, and the working set is MemTotal − MemFree − Inactive(file) from
// /proc/meminfo, which is what the root cgroup would report.
type nodeMeasurer struct {
	procDir     string // /proc
	cgroupDir   string // /sys/fs/cgroup
	stateDir    string // node.stateDir
	podLogsDir  string // node.podLogsDir
	runtime     internalapi.RuntimeService
	images      internalapi.ImageManagerService
	clock       clock.PassiveClock
	emptyDirsOf func(uid string) string
}

func (m *nodeMeasurer) NodeStats(ctx context.Context) (*NodeStats, error) {
	ns := &NodeStats{Time: m.clock.Now()}
	var errs []error
	if capacity, ws, err := m.readMemory(); err != nil {
		errs = append(errs, fmt.Errorf("memory: %w", err))
	} else {
		ns.MemoryCapacity, ns.MemoryWorkingSet = capacity, ws
	}
	if err := os.MkdirAll(m.stateDir, 0o755); err != nil {
		errs = append(errs, err)
	}
	if fsStats, err := statFs(m.stateDir); err != nil {
		errs = append(errs, fmt.Errorf("nodefs: %w", err))
	} else {
		ns.NodeFs = fsStats
	}
	if resp, err := m.images.ImageFsInfo(ctx); err != nil {
		errs = append(errs, fmt.Errorf("imagefs: CRI ImageFsInfo: %w", err))
	} else if len(resp.GetImageFilesystems()) == 0 || resp.GetImageFilesystems()[0].GetFsId().GetMountpoint() == "" {
		errs = append(errs, errors.New("imagefs: CRI ImageFsInfo names no image filesystem"))
	} else if fsStats, err := statFs(resp.GetImageFilesystems()[0].GetFsId().GetMountpoint()); err != nil {
		errs = append(errs, fmt.Errorf("imagefs: %w", err))
	} else {
		ns.ImageFs = fsStats
	}
	if maxPID, procs, err := m.readPIDs(); err != nil {
		errs = append(errs, fmt.Errorf("pids: %w", err))
	} else {
		ns.MaxPID, ns.Processes = maxPID, procs
	}
	return ns, errors.Join(errs...)
}

// readMemory returns MemTotal and the root cgroup's working set.
func (m *nodeMeasurer) readMemory() (capacity, workingSet int64, err error) {
	info, err := readKeyValues(filepath.Join(m.procDir, "meminfo"), 1024)
	if err != nil {
		return 0, 0, err
	}
	capacity, ok := info["MemTotal"]
	if !ok {
		return 0, 0, errors.New("no MemTotal in /proc/meminfo")
	}
	v1 := filepath.Join(m.cgroupDir, "memory")
	if usage, err := readInt(filepath.Join(v1, "memory.usage_in_bytes")); err == nil {
		stat, err := readKeyValues(filepath.Join(v1, "memory.stat"), 1)
		if err != nil {
			return 0, 0, err
		}
		ws := usage - stat["total_inactive_file"]
		return capacity, max(ws, 0), nil
	}
	ws := capacity - info["MemFree"] - info["Inactive(file)"]
	return capacity, max(ws, 0), nil
}

// readPIDs returns the node's pid limit (the smaller of pid_max and
// threads-max, as the kubelet's rlimit stats) and the number of processes
// (sysinfo's procs, which counts threads, as the kubelet does).
func (m *nodeMeasurer) readPIDs() (maxPID, procs int64, err error) {
	maxPID, err = readInt(filepath.Join(m.procDir, "sys/kernel/pid_max"))
	if err != nil {
		return 0, 0, err
	}
	if tm, err := readInt(filepath.Join(m.procDir, "sys/kernel/threads-max")); err == nil && tm < maxPID {
		maxPID = tm
	}
	var si syscall.Sysinfo_t
	if err := syscall.Sysinfo(&si); err != nil {
		return 0, 0, err
	}
	return maxPID, int64(si.Procs), nil
}

// PodUsage sums CRI container stats (working set, writable layer) with the
// size of each container's log files and of the pod's emptyDir volumes.
func (m *nodeMeasurer) PodUsage(ctx context.Context, pods []*corev1.Pod, processes bool) (map[string]*PodUsage, error) {
	want := map[string]*corev1.Pod{}
	for _, p := range pods {
		want[string(p.UID)] = p
	}
	out := map[string]*PodUsage{}
	get := func(uid string) *PodUsage {
		u := out[uid]
		if u == nil {
			u = &PodUsage{Containers: map[string]*ContainerUsage{}, Volumes: map[string]VolumeUsage{}}
			out[uid] = u
		}
		return u
	}
	stats, err := m.runtime.ListContainerStats(ctx, &runtimeapi.ContainerStatsFilter{LabelSelector: cri.ManagedSelector()})
	if err != nil {
		return nil, fmt.Errorf("CRI ListContainerStats: %w", err)
	}
	for _, s := range stats {
		attrs := s.GetAttributes()
		uid := attrs.GetLabels()[cri.LabelPodUID]
		if want[uid] == nil {
			continue
		}
		name := attrs.GetMetadata().GetName()
		cu := &ContainerUsage{Name: name}
		if ws := s.GetMemory().GetWorkingSetBytes(); ws != nil {
			v := int64(ws.GetValue())
			cu.MemoryWorkingSet = &v
		}
		cu.RootfsBytes = int64(s.GetWritableLayer().GetUsedBytes().GetValue())
		cu.RootfsInodes = int64(s.GetWritableLayer().GetInodesUsed().GetValue())
		get(uid).Containers[name] = cu
	}
	if processes {
		m.addProcesses(ctx, want, get)
	}
	for uid, pod := range want {
		u := get(uid)
		logDir := podLogDir(m.podLogsDir, pod.Namespace, pod.Name, uid)
		for _, c := range append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
			b, n := du(filepath.Join(logDir, c.Name))
			if b == 0 && n == 0 {
				continue
			}
			cu := u.Containers[c.Name]
			if cu == nil {
				cu = &ContainerUsage{Name: c.Name}
				u.Containers[c.Name] = cu
			}
			cu.LogsBytes, cu.LogsInodes = b, n
		}
		for _, v := range pod.Spec.Volumes {
			if v.EmptyDir == nil {
				continue
			}
			b, n := du(filepath.Join(m.emptyDirsOf(uid), v.Name))
			u.Volumes[v.Name] = VolumeUsage{Bytes: b, Inodes: n}
		}
	}
	return out, nil
}

// addProcesses adds the pods' process counts from CRI ListPodSandboxStats.
// It is dear (on containerd 1.6 about 12 ms of CPU per pod, in containerd
// and the shims), so only pid pressure asks for it; pods it does not answer
// for keep no count.
func (m *nodeMeasurer) addProcesses(ctx context.Context, want map[string]*corev1.Pod, get func(uid string) *PodUsage) {
	sbStats, err := m.runtime.ListPodSandboxStats(ctx, &runtimeapi.PodSandboxStatsFilter{LabelSelector: cri.ManagedSelector()})
	if err != nil {
		return
	}
	for _, s := range sbStats {
		uid := s.GetAttributes().GetMetadata().GetUid()
		if want[uid] != nil {
			get(uid).Processes = int64(s.GetLinux().GetProcess().GetProcessCount().GetValue())
		}
	}
}

// statFs measures the filesystem holding path.
func statFs(path string) (*FsStats, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return nil, fmt.Errorf("statfs %s: %w", path, err)
	}
	var sst syscall.Stat_t
	if err := syscall.Stat(path, &sst); err != nil {
		return nil, fmt.Errorf("stat %s: %w", path, err)
	}
	bs := int64(st.Bsize)
	return &FsStats{
		Device:     uint64(sst.Dev),
		Path:       path,
		Capacity:   int64(st.Blocks) * bs,
		Available:  int64(st.Bavail) * bs,
		Inodes:     int64(st.Files),
		InodesFree: int64(st.Ffree),
	}, nil
}

// du returns the bytes (allocated blocks, as du and cAdvisor count) and
// inodes used under dir, measured as the kubelet measures volumes
// (hostinfo.DiskUsage); a missing dir uses nothing.
func du(dir string) (bytes, inodes int64) {
	b, n, _ := hostinfo.DiskUsage(dir)
	return int64(b), int64(n)
}

func readInt(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}

// readKeyValues reads "key value [unit]" lines (meminfo, memory.stat),
// multiplying every value by scale (1024 for meminfo's kB).
func readKeyValues(path string, scale int64) (map[string]int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		v, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			continue
		}
		out[strings.TrimSuffix(f[0], ":")] = v * scale
	}
	return out, nil
}
