package nodestatus_test

import (
	"testing"
	"time"

	cadvisorapi "github.com/google/cadvisor/lib/model"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"

	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/internal/hostinfo"
	"github.com/nodelet/nodelet/internal/nodestatus"
	"github.com/nodelet/nodelet/schemas"
	"github.com/nodelet/nodelet/services/admission"
	"github.com/nodelet/nodelet/services/status"
)

// statusNode is the Node nodelet-status reports for the machine and cfg.
func statusNode(cfg *config.Config, info *cadvisorapi.MachineInfo, rootfs *hostinfo.FsStats) (*corev1.Node, error) {
	in := status.NodeInputs{Name: cfg.Node.Name, Hostname: cfg.Node.Name, Config: cfg,
		Machine: info, RootFs: rootfs, Runtime: &schemas.RuntimeState{RuntimeReady: true, NetworkReady: true},
		Now: time.Unix(1700000000, 0)}
	node, err := status.InitialNode(in)
	if err != nil {
		return nil, err
	}
	_, err = status.SetNodeStatus(node, in)
	return node, err
}

// nodelet-admission decides on the allocatable nodelet-status reports: the
// same machine and config give the same capacity and allocatable in both,
// and a reservation that is not a quantity is an error in both (before,
// status skipped it and reported more than admission decided on).
func TestAdmissionAndStatusAgreeOnAllocatable(t *testing.T) {
	info := &cadvisorapi.MachineInfo{NumCores: 4, MemoryCapacity: 8 << 30,
		HugePages: []cadvisorapi.HugePagesInfo{{PageSize: 2048, NumPages: 128}}}
	rootfs := &hostinfo.FsStats{Capacity: 50 << 30}
	for _, tc := range []struct {
		name    string
		mutate  func(*config.Config)
		wantErr bool
	}{
		{"defaults", func(*config.Config) {}, false},
		{"reserved and hard eviction", func(c *config.Config) {
			c.Node.KubeReserved = map[string]string{"cpu": "250m", "memory": "512Mi", "pid": "1000"}
			c.Node.SystemReserved = map[string]string{"memory": "1Gi", "ephemeral-storage": "2Gi"}
			c.GC.EvictionHard = map[string]string{"memory.available": "5%", "nodefs.available": "1Gi"}
			c.Node.MaxPods = 30
		}, false},
		{"over-reserved", func(c *config.Config) { c.Node.SystemReserved = map[string]string{"cpu": "9"} }, false},
		{"bad quantity in kubeReserved", func(c *config.Config) {
			c.Node.KubeReserved = map[string]string{"cpu": "100m", "memory": "lots"}
		}, true},
		{"bad quantity in systemReserved", func(c *config.Config) {
			c.Node.SystemReserved = map[string]string{"ephemeral-storage": "1 Gi"}
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config.Defaults()
			cfg.Node.Name = "node-a"
			tc.mutate(cfg)
			adm, admErr := admission.NodeFromConfig(cfg, nodestatus.MachineCapacity(info, rootfs))
			st, stErr := statusNode(cfg, info, rootfs)
			if tc.wantErr {
				if admErr == nil || stErr == nil {
					t.Fatalf("admission err %v, status err %v: want both to refuse the reservation", admErr, stErr)
				}
				if admErr.Error() != stErr.Error() {
					t.Errorf("admission says %q, status says %q: want the same error", admErr, stErr)
				}
				return
			}
			if admErr != nil || stErr != nil {
				t.Fatalf("admission err %v, status err %v", admErr, stErr)
			}
			if !apiequality.Semantic.DeepEqual(adm.Status.Allocatable, st.Status.Allocatable) {
				t.Errorf("allocatable differs:\nadmission %v\nstatus    %v", adm.Status.Allocatable, st.Status.Allocatable)
			}
			if !apiequality.Semantic.DeepEqual(adm.Status.Capacity, st.Status.Capacity) {
				t.Errorf("capacity differs:\nadmission %v\nstatus    %v", adm.Status.Capacity, st.Status.Capacity)
			}
		})
	}
}

// On this machine, admission's capacity reader and status's (cAdvisor's
// MachineInfo and the state dir's filesystem through hostinfo) give the
// same capacity and allocatable.
func TestAdmissionAndStatusReadTheSameMachine(t *testing.T) {
	dir := t.TempDir()
	cfg := config.Defaults()
	cfg.Node.Name = "node-a"
	cfg.Node.StateDir = dir
	capacity, err := admission.MachineCapacity{Dir: dir}.Capacity()
	if err != nil {
		t.Fatal(err)
	}
	adm, err := admission.NodeFromConfig(cfg, capacity)
	if err != nil {
		t.Fatal(err)
	}
	m := &hostinfo.Machine{}
	info, err := m.Info()
	if err != nil {
		t.Fatal(err)
	}
	fs, err := m.DirFs(dir)
	if err != nil {
		t.Fatal(err)
	}
	st, err := statusNode(cfg, info, &fs)
	if err != nil {
		t.Fatal(err)
	}
	if !apiequality.Semantic.DeepEqual(adm.Status.Allocatable, st.Status.Allocatable) {
		t.Errorf("allocatable differs:\nadmission %v\nstatus    %v", adm.Status.Allocatable, st.Status.Allocatable)
	}
}
