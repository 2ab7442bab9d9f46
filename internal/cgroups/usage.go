package cgroups

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	libcgroups "github.com/opencontainers/cgroups"
)

// Usage is what a cgroup and everything under it used, read from its
// files as cAdvisor reads them for the kubelet's pod stats
// (pkg/kubelet/stats/cri_stats_provider.go addPodCPUMemoryStats and
// addProcessStats take a pod's figures from cAdvisor's info of its pod
// cgroup; cAdvisor's libcontainer handler setMemoryStats computes the
// working set). A Has* false means the file was not there.
type Usage struct {
	// CPUNanos is the cumulative CPU time (cpuacct.usage; cpu.stat usage_usec).
	CPUNanos  uint64
	HasMemory bool
	// MemoryUsage is memory.usage_in_bytes (memory.current); WorkingSet is
	// it less the inactive file pages; RSS is total_rss (anon).
	MemoryUsage, WorkingSet, RSS uint64
	PageFaults, MajorPageFaults  uint64
	HasProcesses                 bool
	Processes                    uint64 // pids.current
}

// Usage reads n's usage. It fails when n has no CPU accounting file: the
// cgroup is gone (or was never made).
func (m *Manager) Usage(n Name) (Usage, error) {
	var u Usage
	if m.v2 {
		dir := m.Dir(n, "")
		st, err := readStat(filepath.Join(dir, "cpu.stat"))
		if err != nil {
			return u, err
		}
		u.CPUNanos = st["usage_usec"] * 1000
		if cur, err := readUint(filepath.Join(dir, "memory.current")); err == nil {
			ms, _ := readStat(filepath.Join(dir, "memory.stat"))
			u.HasMemory, u.MemoryUsage = true, cur
			u.WorkingSet = workingSet(cur, ms["inactive_file"])
			u.RSS, u.PageFaults, u.MajorPageFaults = ms["anon"], ms["pgfault"], ms["pgmajfault"]
		}
		if p, err := readUint(filepath.Join(dir, "pids.current")); err == nil {
			u.HasProcesses, u.Processes = true, p
		}
		return u, nil
	}
	cpu, err := readUint(filepath.Join(m.Dir(n, "cpuacct"), "cpuacct.usage"))
	if err != nil {
		return u, err
	}
	u.CPUNanos = cpu
	if mem := m.Dir(n, "memory"); mem != "" {
		if cur, err := readUint(filepath.Join(mem, "memory.usage_in_bytes")); err == nil {
			ms, _ := readStat(filepath.Join(mem, "memory.stat"))
			u.HasMemory, u.MemoryUsage = true, cur
			u.WorkingSet = workingSet(cur, ms["total_inactive_file"])
			u.RSS, u.PageFaults, u.MajorPageFaults = ms["total_rss"], ms["total_pgfault"], ms["total_pgmajfault"]
		}
	}
	if pids := m.Dir(n, "pids"); pids != "" {
		if p, err := readUint(filepath.Join(pids, "pids.current")); err == nil {
			u.HasProcesses, u.Processes = true, p
		}
	}
	return u, nil
}

// workingSet is cAdvisor's: usage less the inactive file pages, 0 when
// those exceed it.
func workingSet(usage, inactiveFile uint64) uint64 {
	if inactiveFile > usage {
		return 0
	}
	return usage - inactiveFile
}

// FirstPid is a process in n or a cgroup under it (0 for none): one whose
// network namespace is the pod's.
func (m *Manager) FirstPid(n Name) int {
	dir := m.Dir(n, "memory")
	if m.v2 {
		dir = m.Dir(n, "")
	}
	if dir == "" {
		return 0
	}
	pid := 0
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		if pids, _ := libcgroups.GetPids(p); len(pids) > 0 {
			pid = pids[0]
			return filepath.SkipAll
		}
		return nil
	})
	return pid
}

func readUint(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}

// readStat reads a flat keyed file ("key value" lines: cpu.stat, memory.stat).
func readStat(path string) (map[string]uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string]uint64{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		if n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64); err == nil {
			out[k] = n
		}
	}
	return out, nil
}
