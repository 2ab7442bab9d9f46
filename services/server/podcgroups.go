package server

import (
	"log/slog"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodelet/nodelet/internal/cgroups"
	"github.com/nodelet/nodelet/internal/config"
)

// podCgroupsOf finds the pod cgroups nodelet-runtime makes under
// runtime.cgroupRoot, to read the pods' stats from (nil, with a warning,
// when this host's cgroups cannot be read: the stats then come from
// ListPodSandboxStats).
func podCgroupsOf(cfg *config.Config, log *slog.Logger) *cgroups.Pods {
	m, err := cgroups.NewManager(cfg.Runtime.CgroupDriver)
	if err == nil {
		var p *cgroups.Pods
		if p, err = cgroups.NewPods(m, cgroups.PodOptions{Root: cfg.Runtime.CgroupRoot}); err == nil {
			return p
		}
	}
	log.Warn("Cannot read pod cgroups: pod stats come from CRI ListPodSandboxStats", "err", err)
	return nil
}

// addCgroupStats sets the pod's CPU, memory and process count from its pod
// cgroup n, and with full its network from a process in it; a cgroup that
// cannot be read leaves them to the other sources.
func (p *statsProvider) addCgroupStats(ps *statsapi.PodStats, sandboxID string, n cgroups.Name, full bool, now metav1.Time) {
	m := p.cgroups.Manager()
	u, err := m.Usage(n)
	if err != nil {
		return
	}
	ps.CPU = &statsapi.CPUStats{Time: now, UsageCoreNanoSeconds: u64(u.CPUNanos), UsageNanoCores: p.rate("pod/"+sandboxID, now.Time, u.CPUNanos)}
	if u.HasMemory {
		ps.Memory = &statsapi.MemoryStats{Time: now, UsageBytes: u64(u.MemoryUsage), WorkingSetBytes: u64(u.WorkingSet),
			RSSBytes: u64(u.RSS), PageFaults: u64(u.PageFaults), MajorPageFaults: u64(u.MajorPageFaults)}
	}
	if u.HasProcesses {
		ps.ProcessStats = &statsapi.ProcessStats{ProcessCount: u64(u.Processes)}
	}
	if full {
		if pid := m.FirstPid(n); pid > 0 {
			ps.Network = netDevOf(pid, now)
		}
	}
}
