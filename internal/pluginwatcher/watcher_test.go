package pluginwatcher

import (
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/nodelet/nodelet/internal/testenv/eventually"
)

// plugin serves the Registration service and keeps the statuses it is told.
type plugin struct {
	registerapi.UnimplementedRegistrationServer
	info   *registerapi.PluginInfo
	mu     sync.Mutex
	status []*registerapi.RegistrationStatus
	srv    *grpc.Server
}

func (p *plugin) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return p.info, nil
}

func (p *plugin) NotifyRegistrationStatus(_ context.Context, s *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.status = append(p.status, s)
	return &registerapi.RegistrationStatusResponse{}, nil
}

func (p *plugin) statuses() []*registerapi.RegistrationStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*registerapi.RegistrationStatus(nil), p.status...)
}

func serve(t *testing.T, path string, info *registerapi.PluginInfo) *plugin {
	t.Helper()
	p := &plugin{info: info, srv: grpc.NewServer()}
	registerapi.RegisterRegistrationServer(p.srv, p)
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.srv.Serve(ln) }()
	t.Cleanup(p.srv.Stop)
	return p
}

// handler records registrations.
type handler struct {
	mu    sync.Mutex
	reg   map[string]string // socket → name
	dereg []string
}

func (h *handler) Register(_ context.Context, socket string, info *registerapi.PluginInfo) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.reg[socket] = info.GetName()
	return nil
}

func (h *handler) Deregister(_ context.Context, socket string, _ *registerapi.PluginInfo) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.reg, socket)
	h.dereg = append(h.dereg, socket)
}

func (h *handler) registered(socket string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.reg[socket]
	return ok
}

// Two watchers share a directory as nodelet-runtime (CSI) and
// nodelet-devices (DRA) do: each registers its own type and tells the
// plugin, leaves the other's plugin untold, both refuse a type nobody
// takes in the kubelet's words, and a socket that goes is deregistered.
func TestSharedDirectory(t *testing.T) {
	dir, err := os.MkdirTemp("", "pw")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	csi, dra := &handler{reg: map[string]string{}}, &handler{reg: map[string]string{}}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	log := slog.New(slog.DiscardHandler)
	go New(Options{Dirs: []string{dir}, Handlers: map[string]Handler{registerapi.CSIPlugin: csi}, Log: log, Rescan: 50 * time.Millisecond}).Run(ctx)
	go New(Options{Dirs: []string{dir}, Handlers: map[string]Handler{registerapi.DRAPlugin: dra}, Log: log, Rescan: 50 * time.Millisecond}).Run(ctx)

	csiSock, draSock, oddSock := filepath.Join(dir, "c.sock"), filepath.Join(dir, "d.sock"), filepath.Join(dir, "x.sock")
	pc := serve(t, csiSock, &registerapi.PluginInfo{Type: registerapi.CSIPlugin, Name: "c"})
	pd := serve(t, draSock, &registerapi.PluginInfo{Type: registerapi.DRAPlugin, Name: "d"})
	px := serve(t, oddSock, &registerapi.PluginInfo{Type: "Odd", Name: "x"})
	eventually.True(t, 10*time.Second, "both registered and told once each", func() bool {
		return csi.registered(csiSock) && dra.registered(draSock) && len(pc.statuses()) == 1 && len(pd.statuses()) == 1
	})
	if !pc.statuses()[0].PluginRegistered || !pd.statuses()[0].PluginRegistered {
		t.Fatalf("statuses %+v %+v", pc.statuses(), pd.statuses())
	}
	if csi.registered(draSock) || dra.registered(csiSock) {
		t.Fatal("a watcher took the other's plugin")
	}
	eventually.True(t, 10*time.Second, "the odd plugin refused", func() bool { return len(px.statuses()) >= 1 })
	want := "RegisterPlugin error -- no handler registered for plugin type: Odd at socket " + oddSock
	if s := px.statuses()[0]; s.PluginRegistered || s.Error != want {
		t.Fatalf("odd plugin told %+v, want %q", s, want)
	}
	// The DRA plugin goes: only its watcher deregisters it.
	pd.srv.Stop()
	_ = os.Remove(draSock)
	eventually.True(t, 10*time.Second, "the DRA plugin deregistered", func() bool { return !dra.registered(draSock) })
	csi.mu.Lock()
	defer csi.mu.Unlock()
	if csi.reg[csiSock] != "c" || len(csi.dereg) != 0 {
		t.Fatalf("CSI handler: registered %v, deregistered %v", csi.reg, csi.dereg)
	}
}
