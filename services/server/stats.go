package server

import (
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/cgroups"
	"github.com/nodelet/nodelet/internal/cri"
	"github.com/nodelet/nodelet/internal/hostinfo"
	"github.com/nodelet/nodelet/schemas"
)

// criCall is one CRI call with a timeout of its own.
func criCall[T any](ctx context.Context, f func(context.Context) (T, error)) (T, error) {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return f(cctx)
}

// statsProvider builds the kubelet's Summary: the node from procfs and
// cAdvisor's filesystem view, pods and containers from CRI stats (as the
// kubelet's CRI stats provider does).
type statsProvider struct {
	nodeName   string
	stateDir   string // node.stateDir: the node's filesystem
	podLogsDir string
	hostIPs    []string
	cri        *cri.Clients
	machine    *hostinfo.Machine
	clock      clock.PassiveClock
	// volumes returns the pods' volume stats (nil: none).
	volumes func() *schemas.PodVolumeStats
	// cgroups finds and reads the pod cgroups (runtime.cgroupRoot); nil
	// when this host's cgroups cannot be read: ListPodSandboxStats then.
	cgroups *cgroups.Pods

	mu sync.Mutex
	// cpu remembers the last cumulative CPU reading per container (and ""
	// for the node) to derive usageNanoCores when the runtime gives none.
	cpu map[string]cpuSample
}

type cpuSample struct {
	at    time.Time
	total uint64
}

func u64(v uint64) *uint64 { return &v }

// rate returns the usage in nanocores between the last reading of id and
// this one.
func (p *statsProvider) rate(id string, at time.Time, total uint64) *uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cpu == nil {
		p.cpu = map[string]cpuSample{}
	}
	prev, ok := p.cpu[id]
	if !ok || !at.After(prev.at) || total < prev.total {
		p.cpu[id] = cpuSample{at, total}
		return nil
	}
	if at.Sub(prev.at) < time.Second {
		// Too close for a meaningful rate: keep the older reading.
		return nil
	}
	p.cpu[id] = cpuSample{at, total}
	return u64(uint64(float64(total-prev.total) / at.Sub(prev.at).Seconds()))
}

// Summary returns the node's and its pods' stats.
func (p *statsProvider) Summary(ctx context.Context, onlyCPUAndMemory bool) (*statsapi.Summary, error) {
	node := p.nodeStats(ctx)
	pods, err := p.podStats(ctx, node, !onlyCPUAndMemory)
	if err != nil {
		return nil, err
	}
	if onlyCPUAndMemory {
		node = statsapi.NodeStats{NodeName: node.NodeName, StartTime: node.StartTime, CPU: node.CPU, Memory: node.Memory}
		for i := range pods {
			ps := &pods[i]
			*ps = statsapi.PodStats{PodRef: ps.PodRef, StartTime: ps.StartTime, Containers: ps.Containers, CPU: ps.CPU, Memory: ps.Memory}
			for j := range ps.Containers {
				c := ps.Containers[j]
				ps.Containers[j] = statsapi.ContainerStats{Name: c.Name, StartTime: c.StartTime, CPU: c.CPU, Memory: c.Memory}
			}
		}
	}
	return &statsapi.Summary{Node: node, Pods: pods}, nil
}

func (p *statsProvider) nodeStats(ctx context.Context) statsapi.NodeStats {
	now := metav1.NewTime(p.clock.Now())
	ns := statsapi.NodeStats{NodeName: p.nodeName}
	pfs, err := procfs.NewDefaultFS()
	if err == nil {
		if st, err := pfs.Stat(); err == nil {
			ns.StartTime = metav1.NewTime(time.Unix(int64(st.BootTime), 0))
			c := st.CPUTotal
			total := uint64((c.User + c.Nice + c.System + c.IRQ + c.SoftIRQ + c.Steal) * 1e9)
			ns.CPU = &statsapi.CPUStats{Time: now, UsageCoreNanoSeconds: u64(total), UsageNanoCores: p.rate("", now.Time, total)}
		}
		if mi, err := pfs.Meminfo(); err == nil && mi.MemTotalBytes != nil && mi.MemFreeBytes != nil {
			total, usage := *mi.MemTotalBytes, *mi.MemTotalBytes-*mi.MemFreeBytes
			ws := usage
			if mi.InactiveFileBytes != nil && *mi.InactiveFileBytes < ws {
				ws -= *mi.InactiveFileBytes
			}
			m := &statsapi.MemoryStats{Time: now, UsageBytes: u64(usage), WorkingSetBytes: u64(ws), AvailableBytes: u64(total - ws)}
			if mi.AnonPagesBytes != nil {
				m.RSSBytes = u64(*mi.AnonPagesBytes)
			}
			ns.Memory = m
		}
		if nd, err := pfs.NetDev(); err == nil {
			ns.Network = p.nodeNetwork(nd, now)
		}
	}
	if f, err := p.machine.DirFs(p.stateDir); err == nil {
		ns.Fs = fsStatsOf(f, now)
	}
	if rt := p.runtimeFs(ctx, now); rt != nil {
		ns.Runtime = rt
	}
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) == nil {
		rl := &statsapi.RlimitStats{Time: now, NumOfRunningProcesses: ptrI64(int64(si.Procs))}
		if b, err := os.ReadFile("/proc/sys/kernel/pid_max"); err == nil {
			if v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil {
				rl.MaxPID = &v
			}
		}
		ns.Rlimit = rl
	}
	return ns
}

func ptrI64(v int64) *int64 { return &v }

// nodeNetwork reports every interface but loopback and the pods' veths;
// the default one is the interface holding the node's address.
func (p *statsProvider) nodeNetwork(nd procfs.NetDev, now metav1.Time) *statsapi.NetworkStats {
	var names []string
	for name := range nd {
		if name == "lo" || strings.HasPrefix(name, "veth") {
			continue
		}
		names = append(names, name)
	}
	if len(names) == 0 {
		return nil
	}
	sort.Strings(names)
	def := names[0]
	if iface := hostinfo.InterfaceOf(p.hostIPs); iface != "" {
		if _, ok := nd[iface]; ok {
			def = iface
		}
	}
	out := &statsapi.NetworkStats{Time: now}
	for _, n := range names {
		l := nd[n]
		is := statsapi.InterfaceStats{Name: n, RxBytes: u64(l.RxBytes), RxErrors: u64(l.RxErrors), TxBytes: u64(l.TxBytes), TxErrors: u64(l.TxErrors)}
		out.Interfaces = append(out.Interfaces, is)
		if n == def {
			out.InterfaceStats = is
		}
	}
	return out
}

// runtimeFs is the image filesystem as CRI reports it, with the capacity of
// the filesystem that holds it.
func (p *statsProvider) runtimeFs(ctx context.Context, now metav1.Time) *statsapi.RuntimeStats {
	if p.cri == nil {
		return nil
	}
	resp, err := criCall(ctx, func(ctx context.Context) (*runtimeapi.ImageFsInfoResponse, error) {
		return p.cri.Image.ImageFsInfo(ctx)
	})
	if err != nil || len(resp.GetImageFilesystems()) == 0 {
		return nil
	}
	fsu := resp.GetImageFilesystems()[0]
	out := &statsapi.FsStats{Time: now, UsedBytes: u64(fsu.GetUsedBytes().GetValue())}
	if fsu.GetInodesUsed() != nil {
		out.InodesUsed = u64(fsu.GetInodesUsed().GetValue())
	}
	if mp := fsu.GetFsId().GetMountpoint(); mp != "" {
		if f, err := p.machine.DirFs(mp); err == nil {
			out.CapacityBytes, out.AvailableBytes = u64(f.Capacity), u64(f.Available)
			out.Inodes, out.InodesFree = u64(f.Inodes), u64(f.InodesFree)
		}
	}
	containerFs := *out
	return &statsapi.RuntimeStats{ImageFs: out, ContainerFs: &containerFs}
}

func fsStatsOf(f hostinfo.FsStats, now metav1.Time) *statsapi.FsStats {
	return &statsapi.FsStats{
		Time: now, CapacityBytes: u64(f.Capacity), AvailableBytes: u64(f.Available), UsedBytes: u64(f.Used),
		Inodes: u64(f.Inodes), InodesFree: u64(f.InodesFree), InodesUsed: u64(f.Inodes - f.InodesFree),
	}
}

// podStats lists the pods of the ready sandboxes with their running
// containers, from ListPodSandbox, ListContainers and ListContainerStats.
// A pod's CPU, memory and process count come from its pod cgroup and its
// network from /proc/<pid>/net/dev of a process in it, as the kubelet's
// CRI stats provider takes them from cAdvisor (cri_stats_provider.go
// addPodCPUMemoryStats, addProcessStats, addPodNetworkStats). Only a pod
// without a pod cgroup under runtime.cgroupRoot (or a host whose cgroups
// cannot be read) needs ListPodSandboxStats, which on containerd 1.6 costs
// containerd about 12 ms of CPU per pod: at 110 pods it made a full
// summary take 3 s (issue 37, the 110-pod bench); the kubelet calls it
// only with the PodAndContainerStatsFromCRI feature gate. Without full
// (/metrics/resource, the summary's only_cpu_and_memory) it skips
// ListPodSandboxStats, the pods' network and the log sizes: a pod without
// a cgroup then has its containers' sums.
func (p *statsProvider) podStats(ctx context.Context, node statsapi.NodeStats, full bool) ([]statsapi.PodStats, error) {
	out := []statsapi.PodStats{}
	if p.cri == nil {
		return out, nil
	}
	sandboxes, err := criCall(ctx, func(ctx context.Context) ([]*runtimeapi.PodSandbox, error) {
		return p.cri.Runtime.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY}})
	})
	if err != nil {
		return nil, err
	}
	containers, err := criCall(ctx, func(ctx context.Context) ([]*runtimeapi.Container, error) {
		return p.cri.Runtime.ListContainers(ctx, &runtimeapi.ContainerFilter{State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING}})
	})
	if err != nil {
		return nil, err
	}
	cstats, err := criCall(ctx, func(ctx context.Context) ([]*runtimeapi.ContainerStats, error) {
		return p.cri.Runtime.ListContainerStats(ctx, &runtimeapi.ContainerStatsFilter{})
	})
	if err != nil {
		return nil, err
	}
	byID := map[string]*runtimeapi.ContainerStats{}
	for _, c := range cstats {
		byID[c.GetAttributes().GetId()] = c
	}
	var imageFs *statsapi.FsStats
	if node.Runtime != nil {
		imageFs = node.Runtime.ImageFs
	}
	// The newest ready sandbox of each pod.
	latest := map[string]*runtimeapi.PodSandbox{}
	for _, sb := range sandboxes {
		uid := sb.GetMetadata().GetUid()
		if cur, ok := latest[uid]; !ok || sb.CreatedAt > cur.CreatedAt {
			latest[uid] = sb
		}
	}
	var podCgroups map[string]cgroups.Name
	if p.cgroups != nil {
		podCgroups = p.cgroups.OnDisk()
	}
	psByID := map[string]*runtimeapi.PodSandboxStats{}
	if full {
		for uid := range latest {
			if _, ok := podCgroups[uid]; !ok {
				psByID = p.sandboxStats(ctx)
				break
			}
		}
	}
	now := metav1.NewTime(p.clock.Now())
	var volumeStats *schemas.PodVolumeStats
	if p.volumes != nil {
		volumeStats = p.volumes()
	}
	for _, sb := range latest {
		md := sb.GetMetadata()
		ps := statsapi.PodStats{
			PodRef:     statsapi.PodReference{Name: md.GetName(), Namespace: md.GetNamespace(), UID: md.GetUid()},
			StartTime:  metav1.NewTime(time.Unix(0, sb.CreatedAt)),
			Containers: []statsapi.ContainerStats{},
		}
		var cpuSum, memWS, memUsage, rootUsed, logsUsed, inodesUsed uint64
		haveCPU, haveMem := false, false
		for _, c := range containers {
			if c.PodSandboxId != sb.Id {
				continue
			}
			cs := statsapi.ContainerStats{Name: c.GetMetadata().GetName(), StartTime: metav1.NewTime(time.Unix(0, c.CreatedAt))}
			if st := byID[c.Id]; st != nil {
				cs.CPU, cs.Memory = p.containerCPUMem(c.Id, st, now)
				if wl := st.GetWritableLayer(); wl != nil {
					cs.Rootfs = &statsapi.FsStats{Time: now, UsedBytes: u64(wl.GetUsedBytes().GetValue())}
					if wl.GetInodesUsed() != nil {
						cs.Rootfs.InodesUsed = u64(wl.GetInodesUsed().GetValue())
					}
					if imageFs != nil {
						cs.Rootfs.CapacityBytes, cs.Rootfs.AvailableBytes = imageFs.CapacityBytes, imageFs.AvailableBytes
						cs.Rootfs.Inodes, cs.Rootfs.InodesFree = imageFs.Inodes, imageFs.InodesFree
					}
					rootUsed += *cs.Rootfs.UsedBytes
					if cs.Rootfs.InodesUsed != nil {
						inodesUsed += *cs.Rootfs.InodesUsed
					}
				}
			}
			if full {
				cs.Logs = p.logStats(md.GetNamespace(), md.GetName(), md.GetUid(), cs.Name, node.Fs, now)
			}
			if cs.Logs != nil {
				logsUsed += *cs.Logs.UsedBytes
				if cs.Logs.InodesUsed != nil {
					inodesUsed += *cs.Logs.InodesUsed
				}
			}
			if cs.CPU != nil && cs.CPU.UsageCoreNanoSeconds != nil {
				cpuSum += *cs.CPU.UsageCoreNanoSeconds
				haveCPU = true
			}
			if cs.Memory != nil && cs.Memory.WorkingSetBytes != nil {
				memWS += *cs.Memory.WorkingSetBytes
				if cs.Memory.UsageBytes != nil {
					memUsage += *cs.Memory.UsageBytes
				}
				haveMem = true
			}
			ps.Containers = append(ps.Containers, cs)
		}
		sort.Slice(ps.Containers, func(i, j int) bool { return ps.Containers[i].Name < ps.Containers[j].Name })
		if n, ok := podCgroups[md.GetUid()]; ok {
			p.addCgroupStats(&ps, sb.Id, n, full, now)
		}
		if x := psByID[sb.Id]; x != nil && x.GetLinux() != nil && ps.CPU == nil {
			l := x.GetLinux()
			ps.CPU, ps.Memory = p.containerCPUMem("pod/"+sb.Id, &runtimeapi.ContainerStats{Cpu: l.GetCpu(), Memory: l.GetMemory()}, now)
			ps.Network = criNetwork(l.GetNetwork(), now)
			if l.GetProcess() != nil && l.GetProcess().GetProcessCount() != nil {
				ps.ProcessStats = &statsapi.ProcessStats{ProcessCount: u64(l.GetProcess().GetProcessCount().GetValue())}
			}
		}
		if ps.Network == nil && full {
			ps.Network = p.sandboxNetwork(ctx, sb.Id, now)
		}
		if ps.CPU == nil && haveCPU {
			// Its own rate key: the pod cgroup's total and this sum differ,
			// and a scrape of either kind may come next.
			ps.CPU = &statsapi.CPUStats{Time: now, UsageCoreNanoSeconds: u64(cpuSum), UsageNanoCores: p.rate("containers/"+sb.Id, now.Time, cpuSum)}
		}
		if ps.Memory == nil && haveMem {
			ps.Memory = &statsapi.MemoryStats{Time: now, WorkingSetBytes: u64(memWS), UsageBytes: u64(memUsage)}
		}
		// The kubelet's calcEphemeralStorage: writable layers, logs, local
		// ephemeral volumes and /etc/hosts.
		eph := &statsapi.FsStats{Time: now, UsedBytes: u64(rootUsed + logsUsed), InodesUsed: u64(inodesUsed)}
		if node.Fs != nil {
			eph.CapacityBytes, eph.AvailableBytes = node.Fs.CapacityBytes, node.Fs.AvailableBytes
		}
		if volumeStats != nil {
			// The pod's volumes as nodelet-runtime measured them (the
			// kubelet's volume stats calculator), and what its local
			// ephemeral volumes and /etc/hosts add to its ephemeral
			// storage (calcEphemeralStorage).
			ps.VolumeStats = volumeStats.Pods[md.GetUid()]
			if e, ok := volumeStats.Ephemeral[md.GetUid()]; ok && e.UsedBytes != nil {
				*eph.UsedBytes += *e.UsedBytes
				if e.InodesUsed != nil {
					*eph.InodesUsed += *e.InodesUsed
				}
			}
		}
		ps.EphemeralStorage = eph
		out = append(out, ps)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i].PodRef, out[j].PodRef
		return a.Namespace+"/"+a.Name < b.Namespace+"/"+b.Name
	})
	p.forgetGone(sandboxes, containers)
	return out, nil
}

// forgetGone drops the CPU readings of containers and sandboxes that no
// longer run (issue 37: the map grew with every pod the node ever ran).
// A container or sandbox seen again starts without a rate, as a new one.
func (p *statsProvider) forgetGone(sandboxes []*runtimeapi.PodSandbox, containers []*runtimeapi.Container) {
	live := make(map[string]bool, len(containers)+2*len(sandboxes))
	for _, c := range containers {
		live[c.Id] = true
	}
	for _, sb := range sandboxes {
		live["pod/"+sb.Id], live["containers/"+sb.Id] = true, true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for id := range p.cpu {
		if id != "" && !live[id] {
			delete(p.cpu, id)
		}
	}
}

// sandboxStats is ListPodSandboxStats by sandbox ID; empty where the
// runtime does not answer.
func (p *statsProvider) sandboxStats(ctx context.Context) map[string]*runtimeapi.PodSandboxStats {
	out := map[string]*runtimeapi.PodSandboxStats{}
	ps, err := criCall(ctx, func(ctx context.Context) ([]*runtimeapi.PodSandboxStats, error) {
		return p.cri.Runtime.ListPodSandboxStats(ctx, &runtimeapi.PodSandboxStatsFilter{})
	})
	if err == nil {
		for _, x := range ps {
			out[x.GetAttributes().GetId()] = x
		}
	}
	return out
}

// sandboxNetwork reads the pod's network counters from its sandbox's
// network namespace (/proc/<pause pid>/net/dev), as cAdvisor does, for
// runtimes without ListPodSandboxStats (containerd 1.6).
func (p *statsProvider) sandboxNetwork(ctx context.Context, id string, now metav1.Time) *statsapi.NetworkStats {
	resp, err := criCall(ctx, func(ctx context.Context) (*runtimeapi.PodSandboxStatusResponse, error) {
		return p.cri.Runtime.PodSandboxStatus(ctx, id, true)
	})
	if err != nil || resp.GetInfo()["info"] == "" {
		return nil
	}
	var info struct {
		Pid int `json:"pid"`
	}
	if err := json.Unmarshal([]byte(resp.GetInfo()["info"]), &info); err != nil || info.Pid <= 0 {
		return nil
	}
	return netDevOf(info.Pid, now)
}

// netDevOf is the network of pid's namespace from /proc/<pid>/net/dev, as
// cAdvisor reads a container's: every interface but lo, eth0 the default.
func netDevOf(pid int, now metav1.Time) *statsapi.NetworkStats {
	proc, err := procfs.NewProc(pid)
	if err != nil {
		return nil
	}
	nd, err := proc.NetDev()
	if err != nil {
		return nil
	}
	out := &statsapi.NetworkStats{Time: now}
	var names []string
	for n := range nd {
		if n != "lo" {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	for _, n := range names {
		l := nd[n]
		is := statsapi.InterfaceStats{Name: n, RxBytes: u64(l.RxBytes), RxErrors: u64(l.RxErrors), TxBytes: u64(l.TxBytes), TxErrors: u64(l.TxErrors)}
		out.Interfaces = append(out.Interfaces, is)
		if n == "eth0" || out.Name == "" {
			out.InterfaceStats = is
		}
	}
	if len(out.Interfaces) == 0 {
		return nil
	}
	return out
}

// containerCPUMem converts CRI cpu and memory stats.
func (p *statsProvider) containerCPUMem(id string, st *runtimeapi.ContainerStats, now metav1.Time) (*statsapi.CPUStats, *statsapi.MemoryStats) {
	var cpu *statsapi.CPUStats
	if c := st.GetCpu(); c != nil {
		t := metav1.NewTime(time.Unix(0, c.Timestamp))
		if c.Timestamp == 0 {
			t = now
		}
		cpu = &statsapi.CPUStats{Time: t}
		if c.GetUsageCoreNanoSeconds() != nil {
			cpu.UsageCoreNanoSeconds = u64(c.GetUsageCoreNanoSeconds().GetValue())
		}
		if c.GetUsageNanoCores() != nil && c.GetUsageNanoCores().GetValue() > 0 {
			cpu.UsageNanoCores = u64(c.GetUsageNanoCores().GetValue())
		} else if cpu.UsageCoreNanoSeconds != nil {
			cpu.UsageNanoCores = p.rate(id, t.Time, *cpu.UsageCoreNanoSeconds)
		}
	}
	var mem *statsapi.MemoryStats
	if m := st.GetMemory(); m != nil {
		t := metav1.NewTime(time.Unix(0, m.Timestamp))
		if m.Timestamp == 0 {
			t = now
		}
		mem = &statsapi.MemoryStats{Time: t}
		if m.GetWorkingSetBytes() != nil {
			mem.WorkingSetBytes = u64(m.GetWorkingSetBytes().GetValue())
		}
		if m.GetAvailableBytes() != nil {
			mem.AvailableBytes = u64(m.GetAvailableBytes().GetValue())
		}
		if m.GetUsageBytes() != nil {
			mem.UsageBytes = u64(m.GetUsageBytes().GetValue())
		}
		if m.GetRssBytes() != nil {
			mem.RSSBytes = u64(m.GetRssBytes().GetValue())
		}
		if m.GetPageFaults() != nil {
			mem.PageFaults = u64(m.GetPageFaults().GetValue())
		}
		if m.GetMajorPageFaults() != nil {
			mem.MajorPageFaults = u64(m.GetMajorPageFaults().GetValue())
		}
	}
	return cpu, mem
}

func criNetwork(n *runtimeapi.NetworkUsage, now metav1.Time) *statsapi.NetworkStats {
	if n == nil {
		return nil
	}
	conv := func(i *runtimeapi.NetworkInterfaceUsage) statsapi.InterfaceStats {
		return statsapi.InterfaceStats{
			Name:    i.GetName(),
			RxBytes: u64(i.GetRxBytes().GetValue()), RxErrors: u64(i.GetRxErrors().GetValue()),
			TxBytes: u64(i.GetTxBytes().GetValue()), TxErrors: u64(i.GetTxErrors().GetValue()),
		}
	}
	out := &statsapi.NetworkStats{Time: now}
	if n.Timestamp != 0 {
		out.Time = metav1.NewTime(time.Unix(0, n.Timestamp))
	}
	if n.GetDefaultInterface() != nil {
		out.InterfaceStats = conv(n.GetDefaultInterface())
	}
	for _, i := range n.GetInterfaces() {
		out.Interfaces = append(out.Interfaces, conv(i))
	}
	return out
}

// logStats measures a container's log directory,
// <podLogsDir>/<namespace>_<name>_<uid>/<container>/.
func (p *statsProvider) logStats(ns, name, uid, container string, nodeFs *statsapi.FsStats, now metav1.Time) *statsapi.FsStats {
	dir := filepath.Join(p.podLogsDir, ns+"_"+name+"_"+uid, container)
	var used, inodes uint64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		inodes++
		if info, err := d.Info(); err == nil && !d.IsDir() {
			used += uint64(info.Size())
		}
		return nil
	})
	if err != nil {
		return nil
	}
	out := &statsapi.FsStats{Time: now, UsedBytes: u64(used), InodesUsed: u64(inodes)}
	if nodeFs != nil {
		out.CapacityBytes, out.AvailableBytes, out.Inodes, out.InodesFree = nodeFs.CapacityBytes, nodeFs.AvailableBytes, nodeFs.Inodes, nodeFs.InodesFree
	}
	return out
}
