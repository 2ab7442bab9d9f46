package devices

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	drapbv1beta1 "k8s.io/kubelet/pkg/apis/dra/v1beta1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// draCallTimeout is the kubelet's defaultClientCallTimeout for
// NodePrepareResources and NodeUnprepareResources.
const draCallTimeout = 45 * time.Second

// servicesSupported are the DRA gRPC services nodelet speaks, most recent
// first (the kubelet's servicesSupportedByKubelet).
var servicesSupported = []string{drapb.DRAPluginService, drapbv1beta1.DRAPluginService}

// draDriver is a registered DRA kubelet plugin (the kubelet's DRAPlugin).
type draDriver struct {
	name, endpoint, socket, service string
	conn                            *grpc.ClientConn
	// healthService is the DRAResourceHealth service it offers, or "";
	// stop ends the watch of its health stream.
	healthService string
	stop          context.CancelFunc
}

// close ends the driver's health watch and connection.
func (d *draDriver) close() {
	if d.stop != nil {
		d.stop()
	}
	_ = d.conn.Close()
}

// client is the driver's DRAPlugin client in v1 terms, through the
// v1beta1 wrapper for a driver that only speaks v1beta1.
func (d *draDriver) client() drapb.DRAPluginClient {
	if d.service == drapbv1beta1.DRAPluginService {
		return drapbv1beta1.V1Beta1ClientWrapper{DRAPluginClient: drapbv1beta1.NewDRAPluginClient(d.conn)}
	}
	return drapb.NewDRAPluginClient(d.conn)
}

// draPlugins is the kubelet's DRAPluginManager: the DRAPlugin handler of
// the plugin watcher, and the drivers by name.
type draPlugins struct {
	log *slog.Logger
	// health, when set, follows each driver's health stream
	// (ResourceHealthStatus).
	health  *healthCache
	mu      sync.Mutex
	drivers map[string]*draDriver
	changed chan struct{}
}

func newDRAPlugins(log *slog.Logger) *draPlugins {
	return &draPlugins{log: log, drivers: map[string]*draDriver{}, changed: make(chan struct{}, 1)}
}

// validateSupportedServices is the kubelet's: the most recent service
// both sides speak.
func validateSupportedServices(services []string) (string, error) {
	if len(services) == 0 {
		return "", errors.New("empty list of supported gRPC services (aka supported versions)")
	}
	for _, s := range services {
		if slices.Contains(servicesSupported, s) {
			return s, nil
		}
	}
	return "", fmt.Errorf("none of services supported by the plugin (%q) are supported by the kubelet (%q)", services, servicesSupported)
}

// Register is the kubelet's ValidatePlugin and RegisterPlugin: a driver
// registering again (a new pod of its DaemonSet) replaces the old one.
func (p *draPlugins) Register(_ context.Context, socket string, info *registerapi.PluginInfo) error {
	name, endpoint := info.GetName(), info.GetEndpoint()
	service, err := validateSupportedServices(info.GetSupportedVersions())
	if err != nil {
		return fmt.Errorf("invalid supported gRPC versions of DRA driver plugin %s at endpoint %s: %w", name, endpoint, err)
	}
	path := strings.TrimPrefix(strings.TrimPrefix(endpoint, "unix://"), "unix:")
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("create gRPC connection to DRA driver %s plugin at endpoint %s: %w", name, endpoint, err)
	}
	d := &draDriver{name: name, endpoint: endpoint, socket: socket, service: service, conn: conn,
		healthService: pickHealthService(info.GetSupportedVersions())}
	p.mu.Lock()
	old := p.drivers[name]
	p.drivers[name] = d
	if p.health != nil && d.healthService != "" {
		// Not the registration's context: the watch lasts as long as
		// the driver stays registered.
		ctx, cancel := context.WithCancel(context.Background())
		d.stop = cancel
		go p.health.watchHealth(ctx, name, conn, d.healthService)
	}
	p.mu.Unlock()
	if old != nil {
		old.close()
	}
	p.log.Info("Registered DRA driver", "driver", name, "endpoint", endpoint, "service", service, "healthService", d.healthService)
	p.signal()
	return nil
}

// Deregister is DeRegisterPlugin: the driver of a socket that went.
func (p *draPlugins) Deregister(_ context.Context, socket string, info *registerapi.PluginInfo) {
	p.mu.Lock()
	d := p.drivers[info.GetName()]
	if d == nil || d.socket != socket {
		p.mu.Unlock()
		return
	}
	delete(p.drivers, info.GetName())
	p.mu.Unlock()
	d.close()
	p.log.Info("Deregistered DRA driver", "driver", d.name, "path", socket)
	p.signal()
}

// get is the kubelet's GetPlugin.
func (p *draPlugins) get(name string) (draClient, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if d := p.drivers[name]; d != nil {
		return d.client(), nil
	}
	return nil, fmt.Errorf("DRA driver %s is not registered", name)
}

func (p *draPlugins) signal() {
	select {
	case p.changed <- struct{}{}:
	default:
	}
}

func (p *draPlugins) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, d := range p.drivers {
		d.close()
	}
	clear(p.drivers)
}
