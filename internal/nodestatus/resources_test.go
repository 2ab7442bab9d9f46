package nodestatus

import (
	"errors"
	"strings"
	"testing"

	cadvisorapi "github.com/google/cadvisor/lib/model"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/internal/hostinfo"
)

func machine() *cadvisorapi.MachineInfo {
	return &cadvisorapi.MachineInfo{NumCores: 2, MemoryCapacity: 4 << 30,
		HugePages: []cadvisorapi.HugePagesInfo{{PageSize: 2048, NumPages: 256}}}
}

func TestMachineCapacity(t *testing.T) {
	for _, tc := range []struct {
		name   string
		info   *cadvisorapi.MachineInfo
		rootfs *hostinfo.FsStats
		want   map[corev1.ResourceName]string
	}{
		{"machine info and rootfs", machine(), &hostinfo.FsStats{Capacity: 10 << 30},
			map[corev1.ResourceName]string{"cpu": "2", "memory": "4Gi", "hugepages-2Mi": "512Mi", "ephemeral-storage": "10Gi"}},
		{"no rootfs: no ephemeral-storage", machine(), nil,
			map[corev1.ResourceName]string{"cpu": "2", "memory": "4Gi", "hugepages-2Mi": "512Mi"}},
		{"no machine info: cpu and memory zero, as the kubelet", nil, &hostinfo.FsStats{Capacity: 1 << 30},
			map[corev1.ResourceName]string{"cpu": "0", "memory": "0", "ephemeral-storage": "1Gi"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := MachineCapacity(tc.info, tc.rootfs)
			if len(got) != len(tc.want) {
				t.Errorf("capacity %v, want %v", got, tc.want)
			}
			for name, want := range tc.want {
				if q, ok := got[name]; !ok || q.Cmp(resource.MustParse(want)) != 0 {
					t.Errorf("%s = %v, want %s", name, got[name], want)
				}
			}
		})
	}
}

func TestResources(t *testing.T) {
	base := MachineCapacity(machine(), &hostinfo.FsStats{Capacity: 10 << 30})
	for _, tc := range []struct {
		name     string
		mutate   func(*config.Config)
		alloc    map[corev1.ResourceName]string // allocatable
		errKey   string                         // non-empty: an error naming it
		errWords string
	}{
		{"nothing reserved: memory less huge pages", func(c *config.Config) {},
			map[corev1.ResourceName]string{"cpu": "2", "memory": "3584Mi", "ephemeral-storage": "10Gi", "hugepages-2Mi": "512Mi", "pods": "110"}, "", ""},
		{"kube, system and hard eviction reserved", func(c *config.Config) {
			c.Node.KubeReserved = map[string]string{"cpu": "200m", "memory": "256Mi"}
			c.Node.SystemReserved = map[string]string{"cpu": "300m", "ephemeral-storage": "1Gi", "pid": "100"}
			c.GC.EvictionHard = map[string]string{"memory.available": "100Mi", "nodefs.available": "10%", "imagefs.available": "15%"}
		}, map[corev1.ResourceName]string{"cpu": "1500m", "memory": "3228Mi", "ephemeral-storage": "8Gi", "pods": "110"}, "", ""},
		{"over-reserved: zero, never negative", func(c *config.Config) {
			c.Node.KubeReserved = map[string]string{"cpu": "3", "memory": "8Gi"}
		}, map[corev1.ResourceName]string{"cpu": "0", "memory": "0"}, "", ""},
		{"cpu rounded to the millicore", func(c *config.Config) {
			c.Node.KubeReserved = map[string]string{"cpu": "0.0004"}
			c.Node.SystemReserved = map[string]string{"cpu": "0.0006"}
		}, map[corev1.ResourceName]string{"cpu": "1999m"}, "", ""},
		{"bad quantity: an error", func(c *config.Config) {
			c.Node.KubeReserved = map[string]string{"cpu": "lots"}
		}, nil, "node.kubeReserved", `"lots" is not a quantity`},
		{"negative quantity: an error", func(c *config.Config) {
			c.Node.SystemReserved = map[string]string{"memory": "-1Gi"}
		}, nil, "node.systemReserved", "negative"},
		{"resource that cannot be reserved: an error", func(c *config.Config) {
			c.Node.SystemReserved = map[string]string{"hugepages-2Mi": "2Mi"}
		}, nil, "node.systemReserved", `cannot reserve "hugepages-2Mi"`},
		{"bad eviction threshold: an error", func(c *config.Config) {
			c.GC.EvictionHard = map[string]string{"memory.available": "lots"}
		}, nil, "gc.evictionHard", "memory.available"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config.Defaults()
			cfg.GC.EvictionHard = nil
			tc.mutate(cfg)
			capacity, alloc, err := Resources(cfg, base)
			if tc.errKey != "" {
				var cerr *config.Error
				if !errors.As(err, &cerr) || cerr.Key != tc.errKey || !strings.Contains(err.Error(), tc.errWords) {
					t.Fatalf("err = %v, want a config error on %s saying %q", err, tc.errKey, tc.errWords)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p := capacity[corev1.ResourcePods]; p.Value() != int64(cfg.Node.MaxPods) {
				t.Errorf("capacity pods = %v, want node.maxPods %d", p.String(), cfg.Node.MaxPods)
			}
			for name, want := range tc.alloc {
				if q, ok := alloc[name]; !ok || q.Cmp(resource.MustParse(want)) != 0 {
					t.Errorf("allocatable %s = %v, want %s", name, alloc[name], want)
				}
			}
		})
	}
	if _, ok := base[corev1.ResourcePods]; ok {
		t.Error("Resources changed the capacity it was given")
	}
}

// ReadCapacity reads this machine: whole cores, some memory, and the
// state dir's filesystem; a state dir that does not exist is an FsError
// with cpu and memory still there.
func TestReadCapacity(t *testing.T) {
	m := &hostinfo.Machine{}
	c, err := ReadCapacity(m, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if cpu := c[corev1.ResourceCPU]; cpu.MilliValue() < 1000 || cpu.MilliValue()%1000 != 0 {
		t.Errorf("cpu = %s, want whole cores", cpu.String())
	}
	if disk := c[corev1.ResourceEphemeralStorage]; disk.Value() <= 0 {
		t.Errorf("ephemeral-storage = %s", disk.String())
	}
	c, err = ReadCapacity(m, "/does/not/exist")
	var fsErr *FsError
	if !errors.As(err, &fsErr) || fsErr.Dir != "/does/not/exist" {
		t.Fatalf("err = %v, want an FsError naming the dir", err)
	}
	if mem := c[corev1.ResourceMemory]; mem.Value() < 64<<20 {
		t.Errorf("memory = %s with an FsError", mem.String())
	}
	if _, ok := c[corev1.ResourceEphemeralStorage]; ok {
		t.Error("ephemeral-storage reported for a filesystem that could not be read")
	}
}
