package csi

import (
	"github.com/nodelet/nodelet/internal/testenv/eventually"

	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/nodelet/nodelet/services/runtime/csi/csitest"
)

func shortDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "reg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(d) })
	return d
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	eventually.True(t, 20*time.Second, what, cond)
}

func runRegistry(t *testing.T, dir string) *Registry {
	t.Helper()
	r := NewRegistry(Options{Dirs: []string{dir}, NodeName: "node-1", Rescan: 100 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return r
}

// A driver registering through its socket (the test driver, as
// node-driver-registrar) is found with what NodeGetInfo and
// NodeGetCapabilities said; when its socket goes, so does the driver.
func TestRegistryRegistersAndForgetsADriver(t *testing.T) {
	reg, data := shortDir(t), shortDir(t)
	r := runRegistry(t, reg)
	if _, err := r.Driver("unit.csi"); err == nil || err.Error() != "driver name unit.csi not found in the list of registered CSI drivers" {
		t.Fatalf("unregistered driver: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- csitest.Run(ctx, csitest.Config{Name: "unit.csi", NodeID: "n1", MaxVolumes: 3, Stage: true, DataDir: data, RegistryDir: reg})
	}()
	var d *Driver
	waitUntil(t, "driver registered", func() bool { d, _ = r.Driver("unit.csi"); return d != nil })
	if d.NodeID != "n1" || d.MaxVolumes != 3 || !d.StageUnstage || !d.VolumeStats || d.Topology[csitest.TopologyKey] != "n1" {
		t.Fatalf("driver %+v", d)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "driver deregistered", func() bool { _, err := r.Driver("unit.csi"); return err != nil })
}

// fakePlugin serves only the registration service with info.
type fakePlugin struct {
	registerapi.UnimplementedRegistrationServer
	info   *registerapi.PluginInfo
	mu     sync.Mutex
	status []*registerapi.RegistrationStatus
}

func (f *fakePlugin) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return f.info, nil
}

func (f *fakePlugin) NotifyRegistrationStatus(_ context.Context, s *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	f.mu.Lock()
	f.status = append(f.status, s)
	f.mu.Unlock()
	return &registerapi.RegistrationStatusResponse{}, nil
}

func (f *fakePlugin) last() *registerapi.RegistrationStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.status) == 0 {
		return nil
	}
	return f.status[len(f.status)-1]
}

// A plugin of another type, one offering no CSI 1.x and one whose CSI
// endpoint does not answer are told why they were refused, in the
// kubelet's words, and are not registered.
func TestRegistryRefusesBadPlugins(t *testing.T) {
	reg := shortDir(t)
	r := runRegistry(t, reg)
	for _, tc := range []struct {
		name string
		info *registerapi.PluginInfo
		want string
	}{
		{"device", &registerapi.PluginInfo{Type: registerapi.DevicePlugin, Name: "gpu", SupportedVersions: []string{"v1beta1"}},
			"RegisterPlugin error -- no handler registered for plugin type: DevicePlugin at socket "},
		{"oldcsi", &registerapi.PluginInfo{Type: registerapi.CSIPlugin, Name: "old.csi", SupportedVersions: []string{"0.3.0"}},
			`RegisterPlugin for CSI driver "old.csi" failed. None of the versions specified ["0.3.0"] are supported.`},
		{"deadcsi", &registerapi.PluginInfo{Type: registerapi.CSIPlugin, Name: "dead.csi", SupportedVersions: []string{"1.0.0"},
			Endpoint: filepath.Join(reg, ".nothing.sock")},
			`failed to get NodeGetInfo from driver "dead.csi"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakePlugin{info: tc.info}
			srv := grpc.NewServer()
			registerapi.RegisterRegistrationServer(srv, f)
			ln, err := net.Listen("unix", filepath.Join(reg, tc.name+"-reg.sock"))
			if err != nil {
				t.Fatal(err)
			}
			go func() { _ = srv.Serve(ln) }()
			t.Cleanup(srv.Stop)
			waitUntil(t, "registration status", func() bool { return f.last() != nil })
			s := f.last()
			if s.PluginRegistered || !strings.Contains(s.Error, tc.want) {
				t.Fatalf("status %+v, want refusal containing %q", s, tc.want)
			}
			if len(r.Drivers()) != 0 {
				t.Fatalf("drivers registered: %v", r.Drivers())
			}
		})
	}
}
