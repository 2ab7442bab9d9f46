package devices

import (
	"context"
	"net"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"google.golang.org/grpc"
	drahealthv1alpha1 "k8s.io/kubelet/pkg/apis/dra-health/v1alpha1"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// grpcDriver is a DRA driver serving the real kubelet plugin APIs over
// gRPC on one unix socket in the plugin registry: Registration (GetInfo
// naming the same socket as its endpoint), v1 DRAPlugin (preparing each
// claim as one device "dev-<claim>" in pool "pool"), and, when asked,
// v1alpha1 DRAResourceHealth (streaming what the test sends).
type grpcDriver struct {
	drapb.UnimplementedDRAPluginServer
	drahealthv1alpha1.UnimplementedDRAResourceHealthServer
	registerapi.UnimplementedRegistrationServer

	name, sock string
	health     bool
	srv        *grpc.Server

	mu      sync.Mutex
	prep    []string
	unp     []string
	streams int
	reports chan *drahealthv1alpha1.NodeWatchResourcesResponse
}

// serveDriver starts a driver registering in registryDir.
func serveDriver(t *testing.T, registryDir, name string, health bool) *grpcDriver {
	t.Helper()
	d := &grpcDriver{name: name, sock: filepath.Join(registryDir, name+".sock"), health: health, srv: grpc.NewServer(),
		reports: make(chan *drahealthv1alpha1.NodeWatchResourcesResponse)}
	registerapi.RegisterRegistrationServer(d.srv, d)
	drapb.RegisterDRAPluginServer(d.srv, d)
	if health {
		drahealthv1alpha1.RegisterDRAResourceHealthServer(d.srv, d)
	}
	ln, err := net.Listen("unix", d.sock)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = d.srv.Serve(ln) }()
	t.Cleanup(d.srv.Stop)
	return d
}

func (d *grpcDriver) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	versions := []string{drapb.DRAPluginService}
	if d.health {
		versions = append(versions, drahealthv1alpha1.DRAResourceHealthService)
	}
	return &registerapi.PluginInfo{Type: registerapi.DRAPlugin, Name: d.name, Endpoint: d.sock, SupportedVersions: versions}, nil
}

func (d *grpcDriver) NotifyRegistrationStatus(context.Context, *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	return &registerapi.RegistrationStatusResponse{}, nil
}

func (d *grpcDriver) NodePrepareResources(_ context.Context, req *drapb.NodePrepareResourcesRequest) (*drapb.NodePrepareResourcesResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	resp := &drapb.NodePrepareResourcesResponse{Claims: map[string]*drapb.NodePrepareResourceResponse{}}
	for _, c := range req.Claims {
		d.prep = append(d.prep, c.Name)
		resp.Claims[c.Uid] = &drapb.NodePrepareResourceResponse{Devices: []*drapb.Device{{RequestNames: []string{"req"},
			PoolName: "pool", DeviceName: "dev-" + c.Name, CdiDeviceIds: []string{d.name + "/dev=" + c.Name}}}}
	}
	return resp, nil
}

func (d *grpcDriver) NodeUnprepareResources(_ context.Context, req *drapb.NodeUnprepareResourcesRequest) (*drapb.NodeUnprepareResourcesResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	resp := &drapb.NodeUnprepareResourcesResponse{Claims: map[string]*drapb.NodeUnprepareResourceResponse{}}
	for _, c := range req.Claims {
		d.unp = append(d.unp, c.Name)
		resp.Claims[c.Uid] = &drapb.NodeUnprepareResourceResponse{}
	}
	return resp, nil
}

// NodeWatchResources streams the test's reports until the client goes;
// a nil report ends the stream.
func (d *grpcDriver) NodeWatchResources(_ *drahealthv1alpha1.NodeWatchResourcesRequest, s grpc.ServerStreamingServer[drahealthv1alpha1.NodeWatchResourcesResponse]) error {
	d.mu.Lock()
	d.streams++
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		d.streams--
		d.mu.Unlock()
	}()
	for {
		select {
		case <-s.Context().Done():
			return nil
		case r := <-d.reports:
			if r == nil {
				return nil
			}
			if err := s.Send(r); err != nil {
				return err
			}
		}
	}
}

func (d *grpcDriver) calls() (prepared, unprepared []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.prep), slices.Clone(d.unp)
}

func (d *grpcDriver) watched() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.streams > 0
}
