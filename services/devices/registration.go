package devices

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/nodelet/nodelet/internal/podutil"
)

// The kubelet's registration errors (devicemanager/plugin/v1beta1/api.go).
const (
	errFailedToDialDevicePlugin = "failed to dial device plugin:"
	errUnsupportedVersion       = "requested API version %q is not supported by kubelet. Supported version is %q"
	errInvalidResourceName      = "the ResourceName %q is invalid"
)

// registrar is the kubelet's device plugin registration server
// (devicemanager/plugin/v1beta1/server.go): the Registration service on
// <dir>/kubelet.sock, and one client per registered plugin.
type registrar struct {
	pluginapi.UnsafeRegistrationServer
	dir string
	m   *manager
	log *slog.Logger
	ctx context.Context

	mu      sync.Mutex
	clients map[string][]*pluginClient // resource → clients
	grpc    *grpc.Server
	wg      sync.WaitGroup
}

func newRegistrar(ctx context.Context, dir string, m *manager, log *slog.Logger) *registrar {
	return &registrar{dir: dir, m: m, log: log, ctx: ctx, clients: map[string][]*pluginClient{}}
}

// socketPath is <dir>/kubelet.sock (pluginapi.KubeletSocket's name).
func (r *registrar) socketPath() string {
	return filepath.Join(r.dir, filepath.Base(pluginapi.KubeletSocket))
}

// start is the kubelet's server.Start: make the directory, remove every
// socket left in it (CleanupPluginDirectory: plugins watch kubelet.sock
// and register again when it is made anew), then serve.
func (r *registrar) start() error {
	if err := os.MkdirAll(r.dir, 0o750); err != nil {
		return fmt.Errorf("device plugin directory (node.rootDir): %w", err)
	}
	if err := cleanupPluginDirectory(r.dir, r.log); err != nil {
		return fmt.Errorf("cleaning up the device plugin directory %s: %w", r.dir, err)
	}
	ln, err := net.Listen("unix", r.socketPath())
	if err != nil {
		return fmt.Errorf("listening on %s: %w", r.socketPath(), err)
	}
	r.grpc = grpc.NewServer()
	pluginapi.RegisterRegistrationServer(r.grpc, r)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		if err := r.grpc.Serve(ln); err != nil {
			r.log.Error("Error while serving device plugin registration grpc server", "err", err)
		}
	}()
	r.log.Info("Serving device plugin registration", "socket", r.socketPath(), "version", pluginapi.Version)
	return nil
}

// stop is the kubelet's server.Stop: every client disconnected, the
// server stopped.
func (r *registrar) stop() {
	r.mu.Lock()
	var all []*pluginClient
	for _, cs := range r.clients {
		all = append(all, cs...)
	}
	r.mu.Unlock()
	for _, c := range all {
		r.disconnect(c)
	}
	if r.grpc != nil {
		r.grpc.Stop()
		r.wg.Wait()
	}
}

// cleanupPluginDirectory is the kubelet's CleanupPluginDirectory: every
// socket in dir goes, directories and other files stay.
func cleanupPluginDirectory(dir string, log *slog.Logger) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		st, err := os.Stat(p)
		if err != nil || st.IsDir() || st.Mode()&os.ModeSocket == 0 {
			continue
		}
		if err := os.RemoveAll(p); err != nil {
			log.Error("Failed to remove file", "path", p, "err", err)
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Register is the kubelet's server.Register.
func (r *registrar) Register(ctx context.Context, req *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	r.log.Info("Got registration request from device plugin with resource", "resourceName", req.ResourceName)
	if !slices.Contains(pluginapi.SupportedVersions[:], req.Version) {
		err := fmt.Errorf(errUnsupportedVersion, req.Version, pluginapi.SupportedVersions)
		r.log.Error("Bad registration request from device plugin with resource", "resourceName", req.ResourceName, "err", err)
		return &pluginapi.Empty{}, err
	}
	if !podutil.IsExtendedResourceName(corev1.ResourceName(req.ResourceName)) {
		err := fmt.Errorf(errInvalidResourceName, req.ResourceName)
		r.log.Error("Bad registration request from device plugin", "err", err)
		return &pluginapi.Empty{}, err
	}
	if req.Endpoint == "" || filepath.Base(req.Endpoint) != req.Endpoint {
		err := fmt.Errorf("endpoint %q must be a socket's file name in %s", req.Endpoint, r.dir)
		r.log.Error("Bad registration request from device plugin", "resourceName", req.ResourceName, "err", err)
		return &pluginapi.Empty{}, err
	}
	if err := r.connect(req.ResourceName, filepath.Join(r.dir, req.Endpoint), req.Options); err != nil {
		r.log.Error("Error connecting to device plugin client", "resourceName", req.ResourceName, "err", err)
		return &pluginapi.Empty{}, err
	}
	return &pluginapi.Empty{}, nil
}

// connect is the kubelet's connectClient: dial, ask for the options
// (PluginConnected), then ListAndWatch until the stream ends.
func (r *registrar) connect(resource, socket string, regOpts *pluginapi.DevicePluginOptions) error {
	ctx, cancel := context.WithTimeout(r.ctx, 10*time.Second)
	defer cancel()
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithAuthority("localhost"))
	if err != nil {
		return fmt.Errorf(errFailedToDialDevicePlugin+" %v", err)
	}
	c := &pluginClient{resource: resource, socket: socket, conn: conn, api: pluginapi.NewDevicePluginClient(conn)}
	opts, err := c.api.GetDevicePluginOptions(ctx, &pluginapi.Empty{}, grpc.WaitForReady(true))
	if err != nil {
		conn.Close()
		return fmt.Errorf("failed to get device plugin options: %v", err)
	}
	if opts == nil {
		opts = regOpts
	}
	c.opts = opts
	stream, err := c.api.ListAndWatch(r.ctx, &pluginapi.Empty{})
	if err != nil {
		conn.Close()
		return fmt.Errorf("ListAndWatch of device plugin %s: %v", resource, err)
	}
	if err := r.m.pluginConnected(resource, c); err != nil {
		conn.Close()
		return err
	}
	r.mu.Lock()
	r.clients[resource] = append(r.clients[resource], c)
	r.mu.Unlock()
	go r.run(c, stream)
	return nil
}

// run is the kubelet's client.Run and runClient: each ListAndWatch answer
// updates the devices; when the stream ends the plugin is disconnected.
func (r *registrar) run(c *pluginClient, stream pluginapi.DevicePlugin_ListAndWatchClient) {
	for {
		resp, err := stream.Recv()
		if err != nil {
			if r.ctx.Err() == nil {
				r.log.Error("ListAndWatch ended unexpectedly for device plugin", "resource", c.resource, "err", err)
			}
			r.disconnect(c)
			return
		}
		r.m.listAndWatchReceived(c.resource, resp.Devices)
	}
}

// disconnect is the kubelet's disconnectClient.
func (r *registrar) disconnect(c *pluginClient) {
	r.mu.Lock()
	cs := r.clients[c.resource]
	i := slices.Index(cs, c)
	if i < 0 {
		r.mu.Unlock()
		return
	}
	cs = slices.Delete(slices.Clone(cs), i, i+1)
	if len(cs) == 0 {
		delete(r.clients, c.resource)
	} else {
		r.clients[c.resource] = cs
	}
	r.mu.Unlock()
	c.conn.Close()
	r.m.pluginDisconnected(c.resource, c.socket)
	r.log.Info("Device plugin disconnected", "resource", c.resource)
}

// pluginClient is one registered plugin: the kubelet's client and
// endpointImpl.
type pluginClient struct {
	resource, socket string
	conn             *grpc.ClientConn
	api              pluginapi.DevicePluginClient
	opts             *pluginapi.DevicePluginOptions
}

func (c *pluginClient) socketPath() string                      { return c.socket }
func (c *pluginClient) options() *pluginapi.DevicePluginOptions { return c.opts }

func (c *pluginClient) getPreferredAllocation(ctx context.Context, available, mustInclude []string, size int) (*pluginapi.PreferredAllocationResponse, error) {
	return c.api.GetPreferredAllocation(ctx, &pluginapi.PreferredAllocationRequest{
		ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{
			AvailableDeviceIDs: available, MustIncludeDeviceIDs: mustInclude, AllocationSize: int32(size),
		}},
	})
}

func (c *pluginClient) allocate(ctx context.Context, devs []string) (*pluginapi.AllocateResponse, error) {
	return c.api.Allocate(ctx, &pluginapi.AllocateRequest{
		ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: devs}},
	})
}

var _ plugin = (*pluginClient)(nil)
var _ pluginapi.RegistrationServer = (*registrar)(nil)
