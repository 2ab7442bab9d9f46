package server

import (
	"context"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/http/httputil"
	"net/http/pprof"
	"net/url"
	"runtime"
	"slices"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/daemon"
)

// profiling is the kubelet's /debug/pprof/ (pkg/kubelet/server/server.go
// InstallProfilingHandler), on the authenticated port only and authorized
// as the kubelet's (nodes/proxy). nodelet is several processes: the
// profiles are nodelet-server's own, or with ?daemon=<name> another
// daemon's (or the bus's), proxied to the /debug/pprof/ it serves on its
// metrics socket.
type profiling struct {
	enabled  bool
	stateDir string
	proxies  map[string]*httputil.ReverseProxy // by daemon
}

func newProfiling(enabled, contention bool, stateDir string) *profiling {
	if enabled && contention {
		runtime.SetBlockProfileRate(1)
	}
	p := &profiling{enabled: enabled, stateDir: stateDir, proxies: map[string]*httputil.ReverseProxy{}}
	for _, d := range append(slices.Clone(bus.Daemons), bus.BusAdmin) {
		if d == bus.KubeletServer {
			continue
		}
		sock := daemon.MetricsSocket(stateDir, d)
		p.proxies[d] = &httputil.ReverseProxy{
			Rewrite: func(r *httputil.ProxyRequest) {
				r.SetURL(&url.URL{Scheme: "http", Host: d})
				q := r.Out.URL.Query()
				q.Del("daemon")
				r.Out.URL.RawQuery = q.Encode()
			},
			Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var dl net.Dialer
				return dl.DialContext(ctx, "unix", sock)
			}},
			ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
				writeErrorString(w, http.StatusBadGateway, fmt.Sprintf("profiles of nodelet-%s: %v", d, err))
			},
		}
	}
	return p
}

func (p *profiling) serve(w http.ResponseWriter, r *http.Request) {
	if !p.enabled {
		http.Error(w, "profiling endpoint is disabled.", http.StatusMethodNotAllowed)
		return
	}
	if d := r.URL.Query().Get("daemon"); d != "" && d != bus.KubeletServer {
		proxy, ok := p.proxies[d]
		if !ok {
			writeErrorString(w, http.StatusNotFound, fmt.Sprintf("no nodelet daemon %q (want one of %v)", d, slices.Sorted(maps.Keys(p.proxies))))
			return
		}
		proxy.ServeHTTP(w, r)
		return
	}
	switch r.PathValue("name") {
	case "profile":
		pprof.Profile(w, r)
	case "symbol":
		pprof.Symbol(w, r)
	case "cmdline":
		pprof.Cmdline(w, r)
	case "trace":
		pprof.Trace(w, r)
	default:
		pprof.Index(w, r)
	}
}
