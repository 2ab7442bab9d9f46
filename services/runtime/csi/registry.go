package csi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sort"
	"sync"
	"time"

	utilversion "k8s.io/apimachinery/pkg/util/version"
	"k8s.io/client-go/kubernetes"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/nodelet/nodelet/internal/pluginwatcher"
)

// RegistryDir is <stateDir>/plugins_registry, where CSI plugins
// registered before the registry moved to the kubelet's
// <node.rootDir>/plugins_registry (config.PluginsRegistryDir); nodelet-runtime
// watches both so a plugin deployed for either path registers.
func RegistryDir(stateDir string) string { return filepath.Join(stateDir, "plugins_registry") }

// Options build a Registry.
type Options struct {
	// Dirs are the plugin-registration directories
	// (config.PluginsRegistryDir, RegistryDir).
	Dirs []string
	// NodeName names the node's CSINode.
	NodeName string
	// Client writes CSINode; nil on a standalone node (no CSINode).
	Client kubernetes.Interface
	Log    *slog.Logger
	// Rescan is how often the directories are listed again besides
	// fsnotify; default 1s (the kubelet's plugin manager reconciles every
	// second).
	Rescan time.Duration
}

// Registry holds the registered CSI drivers.
type Registry struct {
	opts  Options
	log   *slog.Logger
	nodes *csiNodeWriter

	mu      sync.Mutex
	drivers map[string]*Driver
	changed chan struct{}
}

// NewRegistry builds a Registry; Run watches the directory.
func NewRegistry(opts Options) *Registry {
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.Rescan <= 0 {
		opts.Rescan = time.Second
	}
	r := &Registry{opts: opts, log: opts.Log, drivers: map[string]*Driver{}, changed: make(chan struct{}, 1)}
	if opts.Client != nil {
		r.nodes = &csiNodeWriter{client: opts.Client, nodeName: opts.NodeName}
	}
	return r
}

// ErrDriverNotFound is the kubelet's error for a volume of a driver that is
// not registered.
func errDriverNotFound(name string) error {
	return fmt.Errorf("driver name %s not found in the list of registered CSI drivers", name)
}

// Driver returns the registered driver called name.
func (r *Registry) Driver(name string) (*Driver, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if d := r.drivers[name]; d != nil {
		return d, nil
	}
	return nil, errDriverNotFound(name)
}

// Drivers lists the registered drivers by name.
func (r *Registry) Drivers() []*Driver {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*Driver, 0, len(r.drivers))
	for _, d := range r.drivers {
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Changed is signalled whenever a driver registers or goes.
func (r *Registry) Changed() <-chan struct{} { return r.changed }

// Run watches the registration directories until ctx ends, through the
// plugin watcher shared with nodelet-devices (internal/pluginwatcher):
// this registry is its CSIPlugin handler.
func (r *Registry) Run(ctx context.Context) {
	if r.nodes != nil {
		// The kubelet's InitializeCSINodeWithAnnotation: the node's CSINode
		// exists from the start, drivers or not.
		go r.nodes.initialize(ctx, r.log)
	}
	pluginwatcher.New(pluginwatcher.Options{
		Dirs: r.opts.Dirs, Handlers: map[string]pluginwatcher.Handler{registerapi.CSIPlugin: r},
		Log: r.log, Rescan: r.opts.Rescan,
	}).Run(ctx)
	r.mu.Lock()
	for _, d := range r.drivers {
		d.close()
	}
	r.mu.Unlock()
}

// Register is the CSI RegistrationHandler's ValidatePlugin and
// RegisterPlugin for the plugin behind socket.
func (r *Registry) Register(ctx context.Context, socket string, info *registerapi.PluginInfo) error {
	_, err := r.registerDriver(ctx, socket, info)
	return err
}

// Deregister is DeRegisterPlugin: the driver of a socket that went.
func (r *Registry) Deregister(ctx context.Context, socket string, _ *registerapi.PluginInfo) {
	r.deregister(ctx, socket)
}

func (r *Registry) registerDriver(ctx context.Context, socket string, info *registerapi.PluginInfo) (string, error) {
	if info.GetType() != registerapi.CSIPlugin {
		return "", fmt.Errorf("RegisterPlugin error -- no handler registered for plugin type: %s at socket %s", info.GetType(), socket)
	}
	name := info.GetName()
	if err := validateVersions(name, info.GetSupportedVersions()); err != nil {
		return "", fmt.Errorf("RegisterPlugin error -- plugin validation failed with err: validation failed for CSI Driver %s at endpoint %s: %w", name, info.GetEndpoint(), err)
	}
	endpoint := info.GetEndpoint()
	if endpoint == "" {
		// The kubelet's RegisterPlugin: no endpoint, the registration
		// socket serves CSI too.
		endpoint = socket
	}
	d, err := connectDriver(ctx, name, endpoint)
	if err != nil {
		return "", err
	}
	d.socket = socket
	if r.nodes != nil {
		if err := r.nodes.install(ctx, d); err != nil {
			d.close()
			return "", fmt.Errorf("failed to update driver %q: %w", name, err)
		}
	}
	r.mu.Lock()
	if old := r.drivers[name]; old != nil {
		old.close()
	}
	r.drivers[name] = d
	r.mu.Unlock()
	r.signal()
	r.log.Info("Registered CSI driver", "driver", name, "endpoint", endpoint, "nodeID", d.NodeID,
		"maxVolumesPerNode", d.MaxVolumes, "stageUnstage", d.StageUnstage)
	return name, nil
}

// deregister forgets the driver of a socket that went (the kubelet's
// DeRegisterPlugin: the driver leaves CSINode too).
func (r *Registry) deregister(ctx context.Context, socket string) {
	r.mu.Lock()
	var d *Driver
	for name, cur := range r.drivers {
		if cur.socket == socket {
			d = cur
			delete(r.drivers, name)
		}
	}
	r.mu.Unlock()
	if d == nil {
		return
	}
	d.close()
	r.signal()
	r.log.Info("Deregistered CSI driver", "driver", d.Name, "path", socket)
	if r.nodes != nil {
		if err := r.nodes.uninstall(ctx, d.Name); err != nil {
			r.log.Warn("Cannot remove CSI driver from CSINode", "driver", d.Name, "err", err)
		}
	}
}

func (r *Registry) signal() {
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

// validateVersions is the kubelet's validateVersions: one of the versions
// the plugin offers must be a CSI 1.x.
func validateVersions(name string, versions []string) error {
	if len(versions) == 0 {
		return fmt.Errorf("RegisterPlugin for CSI driver %q failed. Plugin returned an empty list for supported versions", name)
	}
	var errs []error
	for _, v := range versions {
		pv, err := utilversion.ParseGeneric(v)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if pv.Major() == 1 {
			return nil
		}
	}
	return fmt.Errorf("RegisterPlugin for CSI driver %q failed. None of the versions specified %q are supported. err=%v", name, versions, errors.Join(errs...))
}
