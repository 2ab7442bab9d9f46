package csi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	utilversion "k8s.io/apimachinery/pkg/util/version"
	"k8s.io/client-go/kubernetes"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// RegistryDir is <stateDir>/plugins_registry, the kubelet's
// <root>/plugins_registry.
func RegistryDir(stateDir string) string { return filepath.Join(stateDir, "plugins_registry") }

// Options build a Registry.
type Options struct {
	// Dir is the plugin-registration directory (RegistryDir).
	Dir string
	// NodeName names the node's CSINode.
	NodeName string
	// Client writes CSINode; nil on a standalone node (no CSINode).
	Client kubernetes.Interface
	Log    *slog.Logger
	// Rescan is how often the directory is listed again besides fsnotify;
	// default 1s (the kubelet's plugin manager reconciles every second).
	Rescan time.Duration
}

// Registry holds the registered CSI drivers.
type Registry struct {
	opts  Options
	log   *slog.Logger
	nodes *csiNodeWriter

	mu      sync.Mutex
	drivers map[string]*Driver
	// sockets: registration sockets seen, by path.
	sockets map[string]*socketState
	changed chan struct{}
}

type socketState struct {
	mtime      time.Time
	driver     string // registered driver name, "" until registered
	failedAt   time.Time
	lastErrMsg string
}

// retryFailed is how long a socket whose registration failed waits before
// it is tried again (unless it is re-created).
const retryFailed = 5 * time.Second

// NewRegistry builds a Registry; Run watches the directory.
func NewRegistry(opts Options) *Registry {
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.Rescan <= 0 {
		opts.Rescan = time.Second
	}
	r := &Registry{opts: opts, log: opts.Log, drivers: map[string]*Driver{}, sockets: map[string]*socketState{},
		changed: make(chan struct{}, 1)}
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

// Run watches the registration directory until ctx ends.
func (r *Registry) Run(ctx context.Context) {
	dir := r.opts.Dir
	if err := os.MkdirAll(dir, 0o750); err != nil {
		r.log.Error("Cannot create the plugin registration directory", "path", dir, "err", err)
		return
	}
	w, err := fsnotify.NewWatcher()
	var events chan fsnotify.Event
	if err == nil {
		if err = w.Add(dir); err == nil {
			events = w.Events
		}
		defer w.Close()
	}
	if err != nil {
		r.log.Warn("Cannot watch the plugin registration directory, rescanning only", "path", dir, "err", err)
	}
	if r.nodes != nil {
		// The kubelet's InitializeCSINodeWithAnnotation: the node's CSINode
		// exists from the start, drivers or not.
		go r.nodes.initialize(ctx, r.log)
	}
	t := time.NewTicker(r.opts.Rescan)
	defer t.Stop()
	for {
		r.reconcile(ctx)
		select {
		case <-ctx.Done():
			r.mu.Lock()
			for _, d := range r.drivers {
				d.close()
			}
			r.mu.Unlock()
			return
		case <-events:
		case <-t.C:
		}
	}
}

// reconcile registers new sockets and deregisters the drivers of sockets
// that went, as the kubelet's plugin manager reconciler.
func (r *Registry) reconcile(ctx context.Context) {
	found := map[string]time.Time{}
	entries, err := os.ReadDir(r.opts.Dir)
	if err != nil {
		r.log.Warn("Cannot list the plugin registration directory", "path", r.opts.Dir, "err", err)
		return
	}
	for _, e := range entries {
		// The kubelet's plugin watcher ignores hidden files and anything
		// that is not a socket.
		if strings.HasPrefix(e.Name(), ".") || e.Type()&os.ModeSocket == 0 {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue
		}
		found[filepath.Join(r.opts.Dir, e.Name())] = fi.ModTime()
	}
	r.mu.Lock()
	var gone []string
	for path, s := range r.sockets {
		if mt, ok := found[path]; !ok || !mt.Equal(s.mtime) {
			gone = append(gone, path)
		}
	}
	r.mu.Unlock()
	for _, path := range gone {
		r.deregister(ctx, path)
	}
	for path, mt := range found {
		r.mu.Lock()
		s := r.sockets[path]
		due := s == nil || (s.driver == "" && time.Since(s.failedAt) >= retryFailed)
		r.mu.Unlock()
		if !due {
			continue
		}
		name, err := r.register(ctx, path)
		r.mu.Lock()
		if s == nil {
			s = &socketState{mtime: mt}
			r.sockets[path] = s
		}
		if err != nil {
			s.failedAt = time.Now()
			if s.lastErrMsg != err.Error() {
				r.log.Error("Failed to register CSI plugin", "path", path, "err", err)
			}
			s.lastErrMsg = err.Error()
		} else {
			s.driver = name
		}
		r.mu.Unlock()
	}
}

// register is the kubelet's plugin registration of one socket: GetInfo,
// validation, the CSI RegistrationHandler's RegisterPlugin, then
// NotifyRegistrationStatus with the outcome.
func (r *Registry) register(ctx context.Context, socket string) (string, error) {
	conn, err := dial(socket)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	reg := registerapi.NewRegistrationClient(conn)
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	info, err := reg.GetInfo(cctx, &registerapi.InfoRequest{})
	if err != nil {
		return "", fmt.Errorf("RegisterPlugin error -- failed to get plugin info using RPC GetInfo at socket %s, err: %w", socket, err)
	}
	name, err := r.registerDriver(ctx, socket, info)
	status := &registerapi.RegistrationStatus{PluginRegistered: err == nil}
	if err != nil {
		status.Error = err.Error()
	}
	if _, nerr := reg.NotifyRegistrationStatus(cctx, status); nerr != nil {
		r.log.Warn("Cannot notify a plugin of its registration status", "path", socket, "err", nerr)
	}
	return name, err
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
	s := r.sockets[socket]
	delete(r.sockets, socket)
	var d *Driver
	if s != nil && s.driver != "" {
		if cur := r.drivers[s.driver]; cur != nil && cur.socket == socket {
			d = cur
			delete(r.drivers, s.driver)
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
