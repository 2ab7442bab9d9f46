package devices

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// fakePlugin is a device plugin speaking the real v1beta1 API over a unix
// socket in the plugin directory, as the kubelet's stub does
// (devicemanager/plugin/v1beta1/stub.go).
type fakePlugin struct {
	pluginapi.UnimplementedDevicePluginServer
	t        *testing.T
	dir      string
	endpoint string
	resource string
	// preStartRequired and preferredAvailable are its DevicePluginOptions.
	preStartRequired, preferredAvailable bool
	// preferred, when set, answers GetPreferredAllocation.
	preferred func(available []string, size int) []string

	mu       sync.Mutex
	devs     []*pluginapi.Device
	update   chan struct{}
	prestart [][]string
	allocs   [][]string
	server   *grpc.Server
	stopped  chan struct{}
}

func newFakePlugin(t *testing.T, dir, resource string, ids ...string) *fakePlugin {
	p := &fakePlugin{t: t, dir: dir, resource: resource, endpoint: fmt.Sprintf("fake-%d.sock", time.Now().UnixNano()),
		update: make(chan struct{}, 1)}
	for _, id := range ids {
		p.devs = append(p.devs, &pluginapi.Device{ID: id, Health: pluginapi.Healthy})
	}
	return p
}

// serve starts the plugin's gRPC server.
func (p *fakePlugin) serve() {
	p.t.Helper()
	ln, err := net.Listen("unix", filepath.Join(p.dir, p.endpoint))
	if err != nil {
		p.t.Fatal(err)
	}
	p.server = grpc.NewServer()
	p.stopped = make(chan struct{})
	pluginapi.RegisterDevicePluginServer(p.server, p)
	go func() {
		_ = p.server.Serve(ln)
	}()
	p.t.Cleanup(p.stop)
}

// register calls the Registration service on kubelet.sock.
func (p *fakePlugin) register(version string) error {
	conn, err := grpc.NewClient("unix://"+filepath.Join(p.dir, "kubelet.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version: version, Endpoint: p.endpoint, ResourceName: p.resource, Options: p.options(),
	}, grpc.WaitForReady(true))
	return err
}

// start serves and registers, failing the test when registration fails.
func (p *fakePlugin) start() {
	p.t.Helper()
	p.serve()
	if err := p.register(pluginapi.Version); err != nil {
		p.t.Fatalf("register %s: %v", p.resource, err)
	}
}

func (p *fakePlugin) stop() {
	if p.server != nil {
		p.server.Stop()
		p.server = nil
		close(p.stopped)
	}
}

// setHealth changes a device's health and pushes the list.
func (p *fakePlugin) setHealth(id, health string) {
	p.mu.Lock()
	for _, d := range p.devs {
		if d.ID == id {
			d.Health = health
		}
	}
	p.mu.Unlock()
	select {
	case p.update <- struct{}{}:
	default:
	}
}

func (p *fakePlugin) options() *pluginapi.DevicePluginOptions {
	return &pluginapi.DevicePluginOptions{PreStartRequired: p.preStartRequired, GetPreferredAllocationAvailable: p.preferredAvailable}
}

func (p *fakePlugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return p.options(), nil
}

func (p *fakePlugin) ListAndWatch(_ *pluginapi.Empty, s pluginapi.DevicePlugin_ListAndWatchServer) error {
	stopped := p.stopped
	for {
		p.mu.Lock()
		var devs []*pluginapi.Device
		for _, d := range p.devs {
			devs = append(devs, &pluginapi.Device{ID: d.ID, Health: d.Health})
		}
		p.mu.Unlock()
		if err := s.Send(&pluginapi.ListAndWatchResponse{Devices: devs}); err != nil {
			return err
		}
		select {
		case <-p.update:
		case <-stopped:
			return nil
		case <-s.Context().Done():
			return nil
		}
	}
}

func (p *fakePlugin) GetPreferredAllocation(_ context.Context, r *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	resp := &pluginapi.PreferredAllocationResponse{}
	for _, c := range r.ContainerRequests {
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{
			DeviceIDs: p.preferred(c.AvailableDeviceIDs, int(c.AllocationSize))})
	}
	return resp, nil
}

// Allocate answers as the sample device plugin does: an env naming the
// devices, a mount and a device node per device, an annotation, a CDI name.
func (p *fakePlugin) Allocate(_ context.Context, r *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, c := range r.ContainerRequests {
		ids := slices.Clone(c.DevicesIds)
		slices.Sort(ids)
		p.mu.Lock()
		p.allocs = append(p.allocs, ids)
		p.mu.Unlock()
		cr := &pluginapi.ContainerAllocateResponse{
			Envs:        map[string]string{"FAKE_DEVICES": fmt.Sprint(ids)},
			Annotations: map[string]string{"fake.example.com/devices": fmt.Sprint(ids)},
		}
		for _, id := range ids {
			cr.Mounts = append(cr.Mounts, &pluginapi.Mount{ContainerPath: "/dev-info/" + id, HostPath: "/tmp/" + id, ReadOnly: true})
			cr.Devices = append(cr.Devices, &pluginapi.DeviceSpec{ContainerPath: "/dev/fake-" + id, HostPath: "/dev/null", Permissions: "rw"})
			cr.CdiDevices = append(cr.CdiDevices, &pluginapi.CDIDevice{Name: "fake.example.com/dev=" + id})
		}
		resp.ContainerResponses = append(resp.ContainerResponses, cr)
	}
	return resp, nil
}

func (p *fakePlugin) PreStartContainer(_ context.Context, r *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	p.mu.Lock()
	p.prestart = append(p.prestart, slices.Clone(r.DevicesIds))
	p.mu.Unlock()
	return &pluginapi.PreStartContainerResponse{}, nil
}
