package server

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"

	"github.com/nodelet/nodelet/services/common/config"
	"github.com/nodelet/nodelet/services/common/daemon"
)

// Handler is the kubelet API behind authentication and authorization, with
// the kubelet's paths (pkg/kubelet/server/server.go InstallDefaultHandlers
// and InstallDebuggingHandlers).
func (s *Service) Handler() http.Handler {
	mux := http.NewServeMux()
	// Read-only paths, computed by nodelet-status.
	for _, p := range []string{"/pods", "/pods/", "/healthz", "/healthz/", "/spec", "/spec/", "/stats/", "/metrics", "/metrics/"} {
		mux.Handle("GET "+p, s.readOnly)
	}
	mux.Handle("GET /metrics/resource", resourceMetricsHandler(statusSummary(s.cfg.Node.StateDir), s.log))
	mux.HandleFunc("GET /configz", s.serveConfigz)
	mux.HandleFunc("GET /containerLogs/{podNamespace}/{podID}/{containerName}", s.serveContainerLogs)
	for _, m := range []string{"GET", "POST"} {
		mux.HandleFunc(m+" /exec/{podNamespace}/{podID}/{containerName}", s.serveExec)
		mux.HandleFunc(m+" /exec/{podNamespace}/{podID}/{uid}/{containerName}", s.serveExec)
		mux.HandleFunc(m+" /attach/{podNamespace}/{podID}/{containerName}", s.serveAttach)
		mux.HandleFunc(m+" /attach/{podNamespace}/{podID}/{uid}/{containerName}", s.serveAttach)
		mux.HandleFunc(m+" /portForward/{podNamespace}/{podID}", s.servePortForward)
		mux.HandleFunc(m+" /portForward/{podNamespace}/{podID}/{uid}", s.servePortForward)
	}
	mux.HandleFunc("POST /run/{podNamespace}/{podID}/{containerName}", s.serveRun)
	mux.HandleFunc("POST /run/{podNamespace}/{podID}/{uid}/{containerName}", s.serveRun)
	mux.HandleFunc("POST /checkpoint/{podNamespace}/{podID}/{containerName}", func(w http.ResponseWriter, r *http.Request) {
		writeErrorString(w, http.StatusNotImplemented, "checkpointing containers is not implemented by nodelet")
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeErrorString(w, http.StatusNotFound, "404 page not found")
	})
	return s.withAuth(mux)
}

// readOnlyOnly serves the read-only port: the read-only paths, nothing else.
func readOnlyOnly(ro http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, p := range []string{podsPath, healthzPath, "/spec", statsPath, metricsPath} {
			if isSubpath(r.URL.Path, p) {
				ro.ServeHTTP(w, r)
				return
			}
		}
		writeErrorString(w, http.StatusNotFound, "404 page not found")
	})
}

// statusProxy forwards the read-only paths to nodelet-status over its API
// socket under the state dir.
func statusProxy(stateDir string) http.Handler {
	sock := daemon.APISocket(stateDir, "status")
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(&url.URL{Scheme: "http", Host: "status"})
			pr.Out.Host = "status"
		},
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", sock)
			},
			ResponseHeaderTimeout: 60 * time.Second,
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			writeErrorString(w, http.StatusServiceUnavailable, "nodelet-status, which computes "+r.URL.Path+", does not answer: "+err.Error())
		},
	}
	return rp
}

// serveConfigz is the kubelet's /configz: the effective configuration, in
// the kubelet's envelope ({"kubeletconfig": …}), header values of the
// manifest URL redacted.
func (s *Service) serveConfigz(w http.ResponseWriter, r *http.Request) {
	m := config.ToMap(s.cfg)
	if src, ok := m["sources"].(map[string]any); ok {
		if h, ok := src["manifestURLHeader"].(map[string][]string); ok && len(h) > 0 {
			red := map[string][]string{}
			for k := range h {
				red[k] = []string{"[redacted]"}
			}
			src["manifestURLHeader"] = red
		}
	}
	b, err := json.Marshal(map[string]any{"kubeletconfig": m})
	if err != nil {
		writeErrorString(w, http.StatusInternalServerError, err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}
