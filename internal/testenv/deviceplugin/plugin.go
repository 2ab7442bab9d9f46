// Package deviceplugin is a device plugin for tests: it speaks the real
// k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1 API over a unix socket in a
// node's device plugin directory and behaves as the Kubernetes project's
// sample device plugin (test/images/sample-device-plugin, through the
// kubelet's plugin stub): it registers on kubelet.sock, answers Allocate
// with an env naming the devices and one read-only mount per device (a
// file holding the device's ID), and registers again whenever kubelet.sock
// is made anew (the kubelet, or nodelet-devices, restarted). With
// Options.PreStartRequired it asks for PreStartContainer, as the stub does
// with its preStartContainerFlag, and records each call.
package deviceplugin

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// Plugin is one running plugin.
type Plugin struct {
	pluginapi.UnimplementedDevicePluginServer
	Dir, Resource, Endpoint string
	// FilesDir holds one file per device, mounted at /dev-info/<id>.
	FilesDir string

	// PreStartRequired is what it registers with (DevicePluginOptions).
	PreStartRequired bool

	mu            sync.Mutex
	devs          []string
	allocs        [][]string
	preStarts     []PreStart
	preStartErr   error
	registrations int
	server        *grpc.Server
	cancel        context.CancelFunc
	done          chan struct{}
}

// PreStart is one PreStartContainer call.
type PreStart struct {
	Devices []string
	At      time.Time
}

// Options change what the plugin asks for.
type Options struct {
	// PreStartRequired: the runtime must call PreStartContainer before
	// each container with its devices starts.
	PreStartRequired bool
}

// Start serves resource with devices ids in dir (a node's
// <rootDir>/device-plugins), registers, and keeps registering again when
// kubelet.sock is replaced, until Stop.
func Start(dir, filesDir, resource string, ids ...string) (*Plugin, error) {
	return StartWith(Options{}, dir, filesDir, resource, ids...)
}

// StartWith is Start with options.
func StartWith(o Options, dir, filesDir, resource string, ids ...string) (*Plugin, error) {
	p := &Plugin{Dir: dir, Resource: resource, Endpoint: "nodelet-test-" + strings.ReplaceAll(resource, "/", "-") + ".sock",
		FilesDir: filesDir, devs: ids, done: make(chan struct{}), PreStartRequired: o.PreStartRequired}
	for _, id := range ids {
		if err := os.WriteFile(filepath.Join(filesDir, id), []byte(id+"\n"), 0o644); err != nil {
			return nil, err
		}
	}
	// The directory is watched before the first registration, as the
	// stub's Start adds its watch before it registers: no new kubelet.sock
	// is missed.
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	if err := w.Add(dir); err != nil {
		w.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	if err := p.serveAndRegister(ctx); err != nil {
		cancel()
		w.Close()
		return nil, err
	}
	go p.watch(ctx, w)
	return p, nil
}

// serveAndRegister (re)starts the gRPC server and registers.
func (p *Plugin) serveAndRegister(ctx context.Context) error {
	// The old server first: closing its listener unlinks the socket's
	// path, the new one's too if it came after (the stub's Stop, Start).
	p.mu.Lock()
	old := p.server
	p.server = nil
	p.mu.Unlock()
	if old != nil {
		old.Stop()
	}
	sock := filepath.Join(p.Dir, p.Endpoint)
	_ = os.Remove(sock)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return err
	}
	s := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(s, p)
	go func() { _ = s.Serve(ln) }()
	p.mu.Lock()
	p.server = s
	p.mu.Unlock()
	kubelet := filepath.Join(p.Dir, "kubelet.sock")
	conn, err := grpc.NewClient("unix://"+kubelet, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := pluginapi.NewRegistrationClient(conn).Register(rctx, &pluginapi.RegisterRequest{
		Version: pluginapi.Version, Endpoint: p.Endpoint, ResourceName: p.Resource,
		Options: &pluginapi.DevicePluginOptions{PreStartRequired: p.PreStartRequired},
	}, grpc.WaitForReady(true)); err != nil {
		return fmt.Errorf("register %s: %w", p.Resource, err)
	}
	p.mu.Lock()
	p.registrations++
	p.mu.Unlock()
	return nil
}

// watch registers again whenever kubelet.sock is created, as the sample
// plugin's stub does (Watch: an fsnotify Create of kubelet.sock). A
// failed registration is tried again until one succeeds.
func (p *Plugin) watch(ctx context.Context, w *fsnotify.Watcher) {
	defer close(p.done)
	defer w.Close()
	kubelet := filepath.Join(p.Dir, "kubelet.sock")
	var retry <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case ev := <-w.Events:
			if ev.Name != kubelet || !ev.Has(fsnotify.Create) {
				continue
			}
		case <-w.Errors:
			continue
		case <-retry:
		}
		retry = nil
		if err := p.serveAndRegister(ctx); err != nil && ctx.Err() == nil {
			retry = time.After(time.Second)
		}
	}
}

// Stop ends the plugin: its stream ends, nodelet-devices sees it go.
func (p *Plugin) Stop() {
	p.cancel()
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.server != nil {
		p.server.Stop()
		p.server = nil
	}
}

// Allocations are the device sets Allocate was called with.
func (p *Plugin) Allocations() [][]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.allocs)
}

// Registrations counts the successful registrations.
func (p *Plugin) Registrations() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.registrations
}

// PreStarts are the PreStartContainer calls, in order.
func (p *Plugin) PreStarts() []PreStart {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.preStarts)
}

// SetPreStartError makes PreStartContainer fail with err (nil: succeed).
func (p *Plugin) SetPreStartError(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.preStartErr = err
}

func (p *Plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{PreStartRequired: p.PreStartRequired}, nil
}

// PreStartContainer records the call (the stub logs it) and answers with
// the error SetPreStartError gave, if any.
func (p *Plugin) PreStartContainer(_ context.Context, r *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	ids := slices.Clone(r.DevicesIds)
	slices.Sort(ids)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.preStarts = append(p.preStarts, PreStart{Devices: ids, At: time.Now()})
	if p.preStartErr != nil {
		return nil, p.preStartErr
	}
	return &pluginapi.PreStartContainerResponse{}, nil
}

func (p *Plugin) ListAndWatch(_ *pluginapi.Empty, s pluginapi.DevicePlugin_ListAndWatchServer) error {
	var devs []*pluginapi.Device
	for _, id := range p.devs {
		devs = append(devs, &pluginapi.Device{ID: id, Health: pluginapi.Healthy})
	}
	if err := s.Send(&pluginapi.ListAndWatchResponse{Devices: devs}); err != nil {
		return err
	}
	<-s.Context().Done()
	return nil
}

// Allocate answers as the sample device plugin: the devices in an env, a
// read-only mount of each device's file.
func (p *Plugin) Allocate(_ context.Context, r *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, c := range r.ContainerRequests {
		ids := slices.Clone(c.DevicesIds)
		slices.Sort(ids)
		p.mu.Lock()
		p.allocs = append(p.allocs, ids)
		p.mu.Unlock()
		cr := &pluginapi.ContainerAllocateResponse{Envs: map[string]string{"TEST_DEVICES": strings.Join(ids, ",")}}
		for _, id := range ids {
			cr.Mounts = append(cr.Mounts, &pluginapi.Mount{ContainerPath: "/dev-info/" + id, HostPath: filepath.Join(p.FilesDir, id), ReadOnly: true})
		}
		resp.ContainerResponses = append(resp.ContainerResponses, cr)
	}
	return resp, nil
}
