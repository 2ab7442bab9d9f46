// Package pluginwatcher is the kubelet's plugin watcher and the generic
// half of its plugin manager (pkg/kubelet/pluginmanager): it watches
// plugin-registration directories (<node.rootDir>/plugins_registry) for
// sockets, asks each socket's Registration service GetInfo, hands the
// plugin to the Handler of its type and tells the plugin the outcome
// (NotifyRegistrationStatus), and deregisters a plugin whose socket goes.
//
// Several daemons watch the same directory, each for its own plugin
// types (nodelet-runtime CSIPlugin, nodelet-devices DRAPlugin): a socket
// of another daemon's type (Taken) is left alone, unnotified, for the
// daemon that takes it; a type nobody takes is refused with the kubelet's
// "no handler registered for plugin type" (by every watcher, in the same
// words).
package pluginwatcher

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// Handler takes the plugins of one type (the kubelet's PluginHandler).
type Handler interface {
	// Register validates and registers the plugin GetInfo described at
	// socket (ValidatePlugin then RegisterPlugin); its error is what the
	// plugin is told.
	Register(ctx context.Context, socket string, info *registerapi.PluginInfo) error
	// Deregister forgets the plugin registered from socket, which went
	// or was re-created (DeRegisterPlugin).
	Deregister(ctx context.Context, socket string, info *registerapi.PluginInfo)
}

// Taken are the plugin types some nodelet daemon takes.
var Taken = []string{registerapi.CSIPlugin, registerapi.DRAPlugin}

// Options build a Watcher.
type Options struct {
	// Dirs are the registration directories, made if missing.
	Dirs []string
	// Handlers take the plugins by type (registerapi.CSIPlugin,
	// registerapi.DRAPlugin, ...).
	Handlers map[string]Handler
	Log      *slog.Logger
	// Rescan is how often the directories are listed again besides
	// fsnotify; default 1s (the kubelet's reconciler period).
	Rescan time.Duration
}

// RetryFailed is how long a socket whose registration failed waits before
// it is tried again (unless it is re-created).
const RetryFailed = 5 * time.Second

// CallTimeout bounds each Registration call.
const CallTimeout = 10 * time.Second

// Watcher registers the plugins of its handlers' types.
type Watcher struct {
	o       Options
	mu      sync.Mutex
	sockets map[string]*socketState
}

type socketState struct {
	mtime      time.Time
	info       *registerapi.PluginInfo // nil until GetInfo answered
	registered bool
	foreign    bool // a type no handler here takes
	failedAt   time.Time
	lastErrMsg string
}

// New builds a Watcher; Run watches.
func New(o Options) *Watcher {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Rescan <= 0 {
		o.Rescan = time.Second
	}
	return &Watcher{o: o, sockets: map[string]*socketState{}}
}

// Run watches the directories until ctx ends.
func (w *Watcher) Run(ctx context.Context) {
	fw, err := fsnotify.NewWatcher()
	var events chan fsnotify.Event
	if err == nil {
		defer fw.Close()
		events = fw.Events
	} else {
		w.o.Log.Warn("Cannot watch the plugin registration directories, rescanning only", "err", err)
	}
	for _, dir := range w.o.Dirs {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			w.o.Log.Error("Cannot create the plugin registration directory", "path", dir, "err", err)
			continue
		}
		if fw != nil {
			if err := fw.Add(dir); err != nil {
				w.o.Log.Warn("Cannot watch the plugin registration directory, rescanning only", "path", dir, "err", err)
			}
		}
	}
	t := time.NewTicker(w.o.Rescan)
	defer t.Stop()
	for {
		w.Reconcile(ctx)
		select {
		case <-ctx.Done():
			return
		case <-events:
		case <-t.C:
		}
	}
}

// Reconcile registers new sockets and deregisters the plugins of sockets
// that went or were re-created, as the kubelet's plugin manager
// reconciler.
func (w *Watcher) Reconcile(ctx context.Context) {
	found := map[string]time.Time{}
	for _, dir := range w.o.Dirs {
		entries, err := os.ReadDir(dir)
		if err != nil {
			if !os.IsNotExist(err) {
				w.o.Log.Warn("Cannot list the plugin registration directory", "path", dir, "err", err)
			}
			continue
		}
		for _, e := range entries {
			// The kubelet's plugin watcher ignores hidden files and
			// anything that is not a socket.
			if strings.HasPrefix(e.Name(), ".") || e.Type()&os.ModeSocket == 0 {
				continue
			}
			if fi, err := e.Info(); err == nil {
				found[filepath.Join(dir, e.Name())] = fi.ModTime()
			}
		}
	}
	w.mu.Lock()
	var gone []string
	for path, s := range w.sockets {
		if mt, ok := found[path]; !ok || !mt.Equal(s.mtime) {
			gone = append(gone, path)
		}
	}
	w.mu.Unlock()
	for _, path := range gone {
		w.deregister(ctx, path)
	}
	for path, mt := range found {
		w.mu.Lock()
		s := w.sockets[path]
		due := s == nil || (!s.registered && !s.foreign && time.Since(s.failedAt) >= RetryFailed)
		if s == nil {
			s = &socketState{mtime: mt}
			w.sockets[path] = s
		}
		w.mu.Unlock()
		if !due {
			continue
		}
		info, foreign, err := w.register(ctx, path)
		w.mu.Lock()
		s.info, s.foreign = info, foreign
		if err != nil {
			s.failedAt = time.Now()
			if s.lastErrMsg != err.Error() {
				w.o.Log.Error("Failed to register plugin", "path", path, "err", err)
			}
			s.lastErrMsg = err.Error()
		} else {
			s.registered = !foreign
		}
		w.mu.Unlock()
	}
}

// register is the kubelet's operation executor's RegisterPlugin for one
// socket: GetInfo, the type's handler, then NotifyRegistrationStatus with
// the outcome.
func (w *Watcher) register(ctx context.Context, socket string) (*registerapi.PluginInfo, bool, error) {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, false, err
	}
	defer conn.Close()
	reg := registerapi.NewRegistrationClient(conn)
	cctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	info, err := reg.GetInfo(cctx, &registerapi.InfoRequest{})
	if err != nil {
		return nil, false, fmt.Errorf("RegisterPlugin error -- failed to get plugin info using RPC GetInfo at socket %s, err: %w", socket, err)
	}
	h := w.o.Handlers[info.GetType()]
	if h == nil && slices.Contains(Taken, info.GetType()) {
		return info, true, nil
	}
	if h == nil {
		err = fmt.Errorf("RegisterPlugin error -- no handler registered for plugin type: %s at socket %s", info.GetType(), socket)
	} else {
		err = h.Register(ctx, socket, info)
	}
	status := &registerapi.RegistrationStatus{PluginRegistered: err == nil}
	if err != nil {
		status.Error = err.Error()
	}
	if _, nerr := reg.NotifyRegistrationStatus(cctx, status); nerr != nil {
		w.o.Log.Warn("Cannot notify a plugin of its registration status", "path", socket, "err", nerr)
	}
	return info, false, err
}

func (w *Watcher) deregister(ctx context.Context, socket string) {
	w.mu.Lock()
	s := w.sockets[socket]
	delete(w.sockets, socket)
	w.mu.Unlock()
	if s == nil || !s.registered || s.info == nil {
		return
	}
	if h := w.o.Handlers[s.info.GetType()]; h != nil {
		h.Deregister(ctx, socket, s.info)
	}
}
