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
	grpcstats "google.golang.org/grpc/stats"
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
	// connected: the plugin's gRPC connection is up (the kubelet's
	// monitoredPlugin.connected); guarded by draPlugins.mu.
	connected bool
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

// connMonitor is the kubelet's monitoredPlugin: gRPC's connection events
// of one plugin, which say whether its driver is usable.
type connMonitor struct {
	p *draPlugins
	d *draDriver
}

func (m *connMonitor) TagRPC(ctx context.Context, _ *grpcstats.RPCTagInfo) context.Context {
	return ctx
}
func (m *connMonitor) HandleRPC(context.Context, grpcstats.RPCStats) {}
func (m *connMonitor) TagConn(ctx context.Context, _ *grpcstats.ConnTagInfo) context.Context {
	return ctx
}

func (m *connMonitor) HandleConn(_ context.Context, s grpcstats.ConnStats) {
	var connected bool
	switch s.(type) {
	case *grpcstats.ConnBegin:
		connected = true
	case *grpcstats.ConnEnd:
		// Ask for a reconnect, or gRPC would not notice the plugin come
		// back; in a goroutine, as the kubelet does (gRPC holds a lock
		// here when the connection goes idle).
		go m.d.conn.Connect()
	default:
		return
	}
	m.p.mu.Lock()
	defer m.p.mu.Unlock()
	if !slices.Contains(m.p.drivers[m.d.name], m.d) {
		return // deregistered: its connection says nothing now
	}
	m.d.connected = connected
	m.p.syncLocked(m.d.name)
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
// the plugin watcher, and every registered plugin of each driver, oldest
// first (a rolling update runs two, on different sockets, and a failed
// new one leaves the old in use).
type draPlugins struct {
	log *slog.Logger
	// health, when set, follows each driver's health stream
	// (ResourceHealthStatus).
	health  *healthCache
	mu      sync.Mutex
	drivers map[string][]*draDriver
	changed chan struct{}
	// wiper, when set, deletes the node's ResourceSlices of drivers that
	// stay unusable.
	wiper *sliceWiper
}

func newDRAPlugins(log *slog.Logger) *draPlugins {
	return &draPlugins{log: log, drivers: map[string][]*draDriver{}, changed: make(chan struct{}, 1)}
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

// Register is the kubelet's ValidatePlugin and RegisterPlugin: one more
// plugin of the driver. The kubelet refuses an endpoint another plugin of
// the driver already has; the same registration socket registering again
// (nodelet's watcher after a restart of the plugin) replaces its entry.
func (p *draPlugins) Register(_ context.Context, socket string, info *registerapi.PluginInfo) error {
	name, endpoint := info.GetName(), info.GetEndpoint()
	service, err := validateSupportedServices(info.GetSupportedVersions())
	if err != nil {
		return fmt.Errorf("invalid supported gRPC versions of DRA driver plugin %s at endpoint %s: %w", name, endpoint, err)
	}
	p.mu.Lock()
	var old *draDriver
	for _, o := range p.drivers[name] {
		switch {
		case o.socket == socket:
			old = o
		case o.endpoint == endpoint:
			p.mu.Unlock()
			return fmt.Errorf("endpoint %s already registered for DRA driver plugin %s", endpoint, name)
		}
	}
	p.mu.Unlock()
	path := strings.TrimPrefix(strings.TrimPrefix(endpoint, "unix://"), "unix:")
	d := &draDriver{name: name, endpoint: endpoint, socket: socket, service: service}
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithStatsHandler(&connMonitor{p: p, d: d}))
	if err != nil {
		return fmt.Errorf("create gRPC connection to DRA driver %s plugin at endpoint %s: %w", name, endpoint, err)
	}
	d.conn = conn
	d.healthService = pickHealthService(info.GetSupportedVersions())
	p.mu.Lock()
	list := slices.DeleteFunc(slices.Clone(p.drivers[name]), func(o *draDriver) bool { return o == old })
	p.drivers[name] = append(list, d)
	p.syncLocked(name)
	if p.health != nil && d.healthService != "" {
		// Not the registration's context: the watch lasts as long as
		// the plugin stays registered.
		ctx, cancel := context.WithCancel(context.Background())
		d.stop = cancel
		go p.health.watchHealth(ctx, name, conn, d.healthService)
	}
	p.mu.Unlock()
	// Connect now, not at the first call: the connection's state is what
	// says whether the driver is usable (the kubelet's RegisterPlugin).
	conn.Connect()
	if old != nil {
		old.close()
	}
	p.log.Info("Registered DRA driver", "driver", name, "endpoint", endpoint, "service", service, "healthService", d.healthService)
	p.signal()
	return nil
}

// Deregister is DeRegisterPlugin: the plugin of a socket that went; the
// driver's other plugins stay in use.
func (p *draPlugins) Deregister(_ context.Context, socket string, info *registerapi.PluginInfo) {
	name := info.GetName()
	p.mu.Lock()
	i := slices.IndexFunc(p.drivers[name], func(d *draDriver) bool { return d.socket == socket })
	if i < 0 {
		p.mu.Unlock()
		return
	}
	d := p.drivers[name][i]
	p.drivers[name] = slices.Delete(slices.Clone(p.drivers[name]), i, i+1)
	if len(p.drivers[name]) == 0 {
		delete(p.drivers, name)
	}
	p.syncLocked(name)
	p.mu.Unlock()
	d.close()
	p.log.Info("Deregistered DRA driver", "driver", name, "path", socket, "remaining", len(p.drivers[name]))
	p.signal()
}

// get is the kubelet's GetPlugin: the newest connected plugin of the
// driver, else its newest.
func (p *draPlugins) get(name string) (draClient, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	list := p.drivers[name]
	for i := len(list) - 1; i >= 0; i-- {
		if list[i].connected {
			return list[i].client(), nil
		}
	}
	if len(list) > 0 {
		return list[len(list)-1].client(), nil
	}
	return nil, fmt.Errorf("DRA driver %s is not registered", name)
}

// syncLocked is the kubelet's sync: a driver with a connected plugin
// keeps its ResourceSlices, one without loses them after wipingDelay.
func (p *draPlugins) syncLocked(name string) {
	if p.wiper == nil {
		return
	}
	if slices.ContainsFunc(p.drivers[name], func(d *draDriver) bool { return d.connected }) {
		p.wiper.cancel(name)
		return
	}
	p.wiper.schedule(name)
}

// usable lists the drivers with a connected plugin.
func (p *draPlugins) usable() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var names []string
	for name, list := range p.drivers {
		if slices.ContainsFunc(list, func(d *draDriver) bool { return d.connected }) {
			names = append(names, name)
		}
	}
	return names
}

func (p *draPlugins) signal() {
	select {
	case p.changed <- struct{}{}:
	default:
	}
}

func (p *draPlugins) close() {
	p.mu.Lock()
	drivers := p.drivers
	p.drivers = map[string][]*draDriver{}
	if p.wiper != nil {
		p.wiper.stop()
	}
	p.wiper = nil
	p.mu.Unlock()
	// Outside the lock: closing may report the connection's end.
	for _, list := range drivers {
		for _, d := range list {
			d.close()
		}
	}
}
