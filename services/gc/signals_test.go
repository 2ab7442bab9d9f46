package gc

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	critest "k8s.io/cri-api/pkg/apis/testing"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/bus/bustest"
	"github.com/nodelet/nodelet/internal/daemon"
)

// memory.available = MemTotal − working set of the root cgroup (v1), or
// from /proc/meminfo where the root cgroup has no usage file (v2).
func TestReadMemory(t *testing.T) {
	meminfo := "MemTotal:        1000 kB\nMemFree:          200 kB\nMemAvailable:     600 kB\nInactive(file):   300 kB\nHugePages_Total:       0\n"
	for _, tc := range []struct {
		name            string
		v1usage, v1st   string
		wantCap, wantWS int64
	}{
		{"cgroup v1", "819200", "cache 1\ntotal_inactive_file 409600\n", 1000 << 10, 819200 - 409600},
		{"cgroup v2", "", "", 1000 << 10, (1000 - 200 - 300) << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			proc, cg := t.TempDir(), t.TempDir()
			write(t, filepath.Join(proc, "meminfo"), meminfo)
			if tc.v1usage != "" {
				write(t, filepath.Join(cg, "memory", "memory.usage_in_bytes"), tc.v1usage+"\n")
				write(t, filepath.Join(cg, "memory", "memory.stat"), tc.v1st)
			}
			m := &nodeMeasurer{procDir: proc, cgroupDir: cg}
			capacity, ws, err := m.readMemory()
			if err != nil || capacity != tc.wantCap || ws != tc.wantWS {
				t.Errorf("readMemory = %d, %d, %v; want %d, %d", capacity, ws, err, tc.wantCap, tc.wantWS)
			}
		})
	}
	m := &nodeMeasurer{procDir: t.TempDir(), cgroupDir: t.TempDir()}
	if _, _, err := m.readMemory(); err == nil {
		t.Error("no /proc/meminfo: want an error")
	}
}

// This machine's own figures are sane: what the real measurer reads.
func TestReadPIDsAndStatFs(t *testing.T) {
	m := &nodeMeasurer{procDir: "/proc"}
	maxPID, procs, err := m.readPIDs()
	if err != nil || maxPID <= 0 || procs <= 0 || procs >= maxPID {
		t.Errorf("readPIDs = %d, %d, %v", maxPID, procs, err)
	}
	fs, err := statFs(t.TempDir())
	if err != nil || fs.Capacity <= 0 || fs.Available <= 0 || fs.Available > fs.Capacity || fs.Inodes <= 0 {
		t.Errorf("statFs = %+v, %v", fs, err)
	}
}

func write(t *testing.T, p, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// Run's loops report gc unready while the runtime is unreachable and ready
// once it answers again, and stop with the context.
func TestRunReportsRuntimeHealth(t *testing.T) {
	b, cfg, _, fm := newUnitEnv(t)
	cfg.GC.ContainerGCPeriod = 20 * time.Millisecond
	cfg.GC.ImageGCPeriod = 20 * time.Millisecond
	cfg.GC.ContainerLogMonitorInterval = 20 * time.Millisecond
	cfg.GC.EvictionMonitoringPeriod = 20 * time.Millisecond
	rt := critest.NewFakeRuntimeService()
	for range 3 {
		rt.InjectError("ListContainers", status.Error(codes.Unavailable, "connection refused"))
	}
	var mu sync.Mutex
	var health []bool
	g, err := New(Options{
		Deps: daemon.Deps{Config: cfg, Log: bustest.Logger(), Bus: b.Connect(bus.GC), Health: func(ready bool, msg string) {
			mu.Lock()
			defer mu.Unlock()
			if len(health) == 0 || health[len(health)-1] != ready {
				health = append(health, ready)
			}
		}},
		Runtime:  rt,
		Images:   critest.NewFakeImageService(),
		Measurer: fm,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- g.Run(ctx) }()
	waitFor(t, "unready then ready", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for i := 0; i+1 < len(health); i++ {
			if !health[i] && health[i+1] {
				return true
			}
		}
		return false
	})
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run = %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

// ListPodSandboxStats, dear on containerd 1.6, is asked only for process
// counts.
func TestPodUsageAsksSandboxStatsOnlyForProcesses(t *testing.T) {
	dir := t.TempDir()
	m := &nodeMeasurer{podLogsDir: dir, emptyDirsOf: func(uid string) string { return filepath.Join(dir, uid) }}
	pod := newPod("p", corev1.Container{Name: "app"})
	for _, processes := range []bool{false, true} {
		rs := critest.NewFakeRuntimeService()
		m.runtime = rs
		if _, err := m.PodUsage(context.Background(), []*corev1.Pod{pod}, processes); err != nil {
			t.Fatal(err)
		}
		asked := slices.Contains(rs.GetCalls(), "ListPodSandboxStats")
		if asked != processes {
			t.Errorf("processes=%v: ListPodSandboxStats called %v (calls %v)", processes, asked, rs.GetCalls())
		}
	}
}
