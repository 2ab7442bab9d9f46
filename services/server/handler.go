package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/internal/kubeletcompat"
)

// Handler is the kubelet API behind authentication and authorization, with
// the kubelet's paths (pkg/kubelet/server/server.go
// InstallAuthNotRequiredHandlers, InstallAuthRequiredHandlers and
// InstallSystemLogHandler).
func (s *Daemon) Handler() http.Handler {
	mux := http.NewServeMux()
	s.readOnlyRoutes(mux)
	mux.HandleFunc("GET /configz", s.serveConfigz)
	mux.HandleFunc("GET /debug/pprof/{name...}", s.profiling.serve)
	mux.HandleFunc("GET /runningpods/", s.readOnly.serveRunningPods)
	mux.Handle("GET "+logsPath, s.readOnly.serveSystemLogs())
	mux.HandleFunc("GET /containerLogs/{podNamespace}/{podID}/{containerName}", s.logs.serveContainerLogs)
	for _, m := range []string{"GET", "POST"} {
		mux.HandleFunc(m+" /exec/{podNamespace}/{podID}/{containerName}", s.streams.serveExec)
		mux.HandleFunc(m+" /exec/{podNamespace}/{podID}/{uid}/{containerName}", s.streams.serveExec)
		mux.HandleFunc(m+" /attach/{podNamespace}/{podID}/{containerName}", s.streams.serveAttach)
		mux.HandleFunc(m+" /attach/{podNamespace}/{podID}/{uid}/{containerName}", s.streams.serveAttach)
		mux.HandleFunc(m+" /portForward/{podNamespace}/{podID}", s.streams.servePortForward)
		mux.HandleFunc(m+" /portForward/{podNamespace}/{podID}/{uid}", s.streams.servePortForward)
	}
	mux.HandleFunc("POST /run/{podNamespace}/{podID}/{containerName}", s.streams.serveRun)
	mux.HandleFunc("POST /run/{podNamespace}/{podID}/{uid}/{containerName}", s.streams.serveRun)
	mux.HandleFunc("POST /checkpoint/{podNamespace}/{podID}/{containerName}", func(w http.ResponseWriter, r *http.Request) {
		writeErrorString(w, http.StatusNotImplemented, "checkpointing containers is not implemented by nodelet")
	})
	return s.metrics.http.instrument("readwrite", s.auth.withAuth(s.limited(mux)))
}

// readOnlyHandler serves the read-only port (server.readOnlyPort): the
// read-only paths without authentication, as the kubelet's
// ListenAndServeKubeletReadOnlyServer, and nothing else.
func (s *Daemon) readOnlyHandler() http.Handler {
	mux := http.NewServeMux()
	s.readOnlyRoutes(mux)
	return s.metrics.http.instrument("readonly", s.limited(mux))
}

// readOnlyRoutes are the kubelet's InstallAuthNotRequiredHandlers (and
// /spec/): served on both ports.
func (s *Daemon) readOnlyRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /healthz", s.readOnly.serveHealthz)
	mux.HandleFunc("GET /pods", s.readOnly.servePods)
	mux.HandleFunc("GET /pods/{$}", s.readOnly.servePods)
	mux.HandleFunc("GET /spec/{$}", s.readOnly.serveSpec)
	mux.HandleFunc("GET /spec", s.readOnly.serveSpec)
	mux.HandleFunc("GET /stats/summary", s.readOnly.serveSummary)
	mux.Handle("GET /metrics", s.metrics.metricsHandler())
	mux.Handle("GET /metrics/cadvisor", s.metrics.cadvisorMetricsHandler())
	mux.Handle("GET /metrics/probes", s.metrics.probeMetricsHandler())
	mux.Handle("GET /metrics/resource", resourceMetricsHandler(func(ctx context.Context) (*statsapi.Summary, error) {
		return s.stats.Summary(ctx, true)
	}, s.log))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		// A read-only path asked with another method is the kubelet's
		// GETOnlyRestfulFilter's 405, not a 404.
		get := r.Clone(r.Context())
		get.Method = http.MethodGet
		if _, pattern := mux.Handler(get); pattern != "/" && r.Method != http.MethodGet {
			w.Header().Set("Allow", http.MethodGet)
			writeErrorString(w, http.StatusMethodNotAllowed, "405: Method Not Allowed")
			return
		}
		writeErrorString(w, http.StatusNotFound, "404 page not found")
	})
}

// isStream says whether r is a long-running request: a stream that
// holds its connection for as long as the client wants (the kubelet's
// isLongRunningRequest).
func isStream(r *http.Request) bool {
	for _, p := range []string{"/exec/", "/attach/", "/portForward/"} {
		if strings.HasPrefix(r.URL.Path, p) {
			return true
		}
	}
	return strings.HasPrefix(r.URL.Path, "/containerLogs/") && r.URL.Query().Get("follow") == "true"
}

// limited bounds the requests in flight: limits.MaxStreams streams and
// limits.MaxInflight others; beyond, 429 with Retry-After, as
// kube-apiserver's max-in-flight filter answers.
func (s *Daemon) limited(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sem, what := s.inflight, "requests"
		if isStream(r) {
			sem, what = s.streamSlots, "streams"
		}
		select {
		case sem <- struct{}{}:
			defer func() { <-sem }()
			next.ServeHTTP(w, r)
		default:
			w.Header().Set("Retry-After", "1")
			writeErrorString(w, http.StatusTooManyRequests, fmt.Sprintf("too many %s in flight (%d), please try again later", what, cap(sem)))
		}
	})
}

// serveConfigz is the kubelet's /configz (pkg/kubelet/server
// InstallAuthRequiredHandlers, configz.InstallHandler): the effective
// configuration in the kubelet's envelope, {"kubeletconfig": …}, as a
// v1beta1 KubeletConfiguration (kubeletcompat.Configz: the kubelet's
// defaults with every field nodelet honours set from its configuration),
// which clients of the kubelet's /configz decode, and beside it
// {"nodelet": …}, nodelet's own configuration. Header values of the
// manifest URL are redacted in both.
func (s *Daemon) serveConfigz(w http.ResponseWriter, r *http.Request) {
	kc, _ := kubeletcompat.Configz(s.cfg)
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
	b, err := json.Marshal(map[string]any{"kubeletconfig": kc, "nodelet": m})
	if err != nil {
		writeErrorString(w, http.StatusInternalServerError, err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}
