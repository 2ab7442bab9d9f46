package cgroups

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// Usage reads a pod cgroup's files on cgroup v1 and v2, under either
// driver's names, as cAdvisor does: the working set is the usage less the
// inactive file pages; a cgroup without CPU accounting is gone.
func TestUsage(t *testing.T) {
	for _, driver := range []string{DriverCgroupfs, DriverSystemd} {
		t.Run(driver, func(t *testing.T) { testUsage(t, driver) })
	}
}

func testUsage(t *testing.T, driver string) {
	n := Name{"nodelet", "besteffort", "pod1234-5678"}
	want := Usage{CPUNanos: 4_500_000_000, HasMemory: true, MemoryUsage: 10 << 20, WorkingSet: 8 << 20, RSS: 3 << 20,
		PageFaults: 1200, MajorPageFaults: 3, HasProcesses: true, Processes: 7}
	for _, tc := range []struct {
		name string
		v2   bool
		// files: controller → the testdata files in its directory.
		files map[string][]string
	}{
		{"v1", false, map[string][]string{"cpuacct": {"cpuacct.usage"}, "memory": {"memory.usage_in_bytes", "memory.stat"}, "pids": {"pids.current"}}},
		{"v2", true, map[string][]string{"": {"cpu.stat", "memory.current", "memory.stat", "pids.current"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			m := &Manager{driver: driver, v2: tc.v2, mounts: map[string]string{}}
			for ctrl, files := range tc.files {
				mp := filepath.Join(root, ctrl)
				m.mounts[ctrl] = mp
				if tc.v2 {
					m.unified = mp
				}
				dir := filepath.Join(mp, n.Path(driver))
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				for _, f := range files {
					b, err := os.ReadFile(filepath.Join("testdata", "usage", tc.name, f))
					if err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			got, err := m.Usage(n)
			if err != nil || got != want {
				t.Fatalf("Usage = %+v, %v; want %+v", got, err, want)
			}
			// No memory or pids accounting: CPU alone.
			for _, f := range []string{"memory.current", "memory.usage_in_bytes", "pids.current"} {
				for ctrl := range tc.files {
					_ = os.Remove(filepath.Join(m.mounts[ctrl], n.Path(driver), f))
				}
			}
			if got, err := m.Usage(n); err != nil || got.HasMemory || got.HasProcesses || got.CPUNanos != want.CPUNanos {
				t.Fatalf("CPU only: %+v, %v", got, err)
			}
			if _, err := m.Usage(Name{"nodelet", "gone"}); err == nil {
				t.Fatal("a missing cgroup read as used")
			}
		})
	}
}

// OnDisk finds the pods under either driver's names (the kubelet's
// GetAllPodsFromCgroups): under systemd the slices
// kubepods-burstable-pod<uid, "-" as "_">.slice give back the pod's UID,
// and a container's scope under a pod slice is no pod.
func TestOnDiskByDriver(t *testing.T) {
	for _, tc := range []struct {
		driver string
		dirs   []string
	}{
		{DriverCgroupfs, []string{"kubepods/burstable/pod1234-5678/ctr", "kubepods/besteffort/podab-cd", "kubepods/pod99-1"}},
		{DriverSystemd, []string{
			"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_5678.slice/cri-containerd-0a.scope",
			"kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podab_cd.slice",
			"kubepods.slice/kubepods-pod99_1.slice/cri-containerd-0b.scope"}},
	} {
		t.Run(tc.driver, func(t *testing.T) {
			root := t.TempDir()
			m := &Manager{driver: tc.driver, mounts: map[string]string{"memory": filepath.Join(root, "memory"), "cpu": filepath.Join(root, "cpu")}}
			for _, d := range tc.dirs {
				if err := os.MkdirAll(filepath.Join(root, "memory", d), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			p, err := NewPods(m, PodOptions{Root: "/kubepods"})
			if err != nil {
				t.Fatal(err)
			}
			got := p.OnDisk()
			want := map[string]Name{
				"1234-5678": {"kubepods", "burstable", "pod1234-5678"},
				"ab-cd":     {"kubepods", "besteffort", "podab-cd"},
				"99-1":      {"kubepods", "pod99-1"},
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("OnDisk = %v, want %v", got, want)
			}
			// Each name leads back to its directory.
			for uid, n := range got {
				if _, err := os.Stat(m.Dir(n, "memory")); err != nil {
					t.Errorf("pod %s: %v", uid, err)
				}
			}
		})
	}
}

func TestReadStatV2(t *testing.T) {
	st, err := readStat(filepath.Join("testdata", "usage", "v2", "memory.stat"))
	if err != nil || st["inactive_file"] != 2<<20 || st["anon"] != 3<<20 || st["pgmajfault"] != 3 {
		t.Fatalf("memory.stat = %v, %v", st, err)
	}
	if ws := workingSet(10<<20, st["inactive_file"]); ws != 8<<20 {
		t.Fatalf("working set %d", ws)
	}
	if ws := workingSet(1, 2); ws != 0 {
		t.Fatalf("working set below zero: %d", ws)
	}
}
