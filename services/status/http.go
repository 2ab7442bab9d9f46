package status

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/services/common/daemon"
)

// Handler is the kubelet's read-only API: /healthz, /pods, /spec/,
// /stats/summary and /metrics, GET only. Anything else gets a 4xx with a
// message saying what is wrong.
func (s *Service) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", s.serveHealthz)
	mux.HandleFunc("/pods", s.servePods)
	mux.HandleFunc("/pods/", s.servePods)
	mux.HandleFunc("/spec", s.serveSpec)
	mux.HandleFunc("/spec/", s.serveSpec)
	mux.HandleFunc("/stats/summary", s.serveSummary)
	// The node's metrics: status's own, and those the other daemons serve
	// on their metrics sockets (prober: nodelet_prober_*, gc: nodelet_gc_*).
	gatherers := prometheus.Gatherers{s.registry}
	for _, c := range []string{bus.Prober, bus.GC, bus.Runtime} {
		gatherers = append(gatherers, daemon.NewRemoteGatherer(s.cfg.Node.StateDir, c))
	}
	mux.Handle("/metrics", promhttp.HandlerFor(gatherers, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		httpError(w, http.StatusNotFound, "no such path %q; this read-only API serves /healthz, /pods, /spec/, /stats/summary and /metrics", r.URL.Path)
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			httpError(w, http.StatusMethodNotAllowed, "method %s is not allowed: the read-only API answers GET", r.Method)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

func httpError(w http.ResponseWriter, code int, format string, args ...any) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	fmt.Fprintf(w, format+"\n", args...)
}

func writeJSON(w http.ResponseWriter, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		httpError(w, http.StatusInternalServerError, "encode response: %v", err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

// serveHealthz answers "ok", or 500 naming each failing check, in the
// format of the API server's healthz (?verbose lists every check).
func (s *Service) serveHealthz(w http.ResponseWriter, r *http.Request) {
	checks := s.healthChecks()
	failed := false
	var b strings.Builder
	b.WriteString("[+]ping ok\n")
	for _, c := range checks {
		if c.err != nil {
			failed = true
			fmt.Fprintf(&b, "[-]%s failed: %v\n", c.name, c.err)
		} else {
			fmt.Fprintf(&b, "[+]%s ok\n", c.name)
		}
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if failed {
		w.WriteHeader(http.StatusInternalServerError)
		b.WriteString("healthz check failed\n")
		_, _ = w.Write([]byte(b.String()))
		return
	}
	if _, verbose := r.URL.Query()["verbose"]; verbose {
		b.WriteString("healthz check passed\n")
		_, _ = w.Write([]byte(b.String()))
		return
	}
	_, _ = w.Write([]byte("ok"))
}

// Pods returns the node's pods (the desired ones; mirror pods are the API's
// business) with their computed status, sorted by namespace and name.
func (s *Service) Pods() []corev1.Pod {
	snap := s.st.snapshot()
	out := make([]corev1.Pod, 0, len(snap.desired))
	for uid, d := range snap.desired {
		if d.Pod == nil || IsMirrorPod(d.Pod) {
			continue
		}
		p := d.Pod.DeepCopy()
		if r := snap.records[uid]; r != nil {
			p.Status = *r.Status.DeepCopy()
		} else if p.Status.Phase == "" {
			// No status generated yet (admission or the runtime has not
			// seen the pod): it is pending, as the API server would say.
			p.Status.Phase = corev1.PodPending
		}
		out = append(out, *p)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].Name < out[j].Name
	})
	return out
}

func (s *Service) servePods(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/pods" && r.URL.Path != "/pods/" {
		httpError(w, http.StatusNotFound, "no such path %q: /pods lists every pod of the node", r.URL.Path)
		return
	}
	writeJSON(w, &corev1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"}, Items: s.Pods()})
}

func (s *Service) serveSpec(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/spec" && r.URL.Path != "/spec/" {
		httpError(w, http.StatusNotFound, "no such path %q: /spec/ is the machine's cAdvisor MachineInfo", r.URL.Path)
		return
	}
	info, err := s.machineInfo()
	if err != nil {
		httpError(w, http.StatusInternalServerError, "machine info: %v", err)
		return
	}
	writeJSON(w, info)
}

func (s *Service) serveSummary(w http.ResponseWriter, r *http.Request) {
	only := false
	for k, v := range r.URL.Query() {
		if k != "only_cpu_and_memory" {
			httpError(w, http.StatusBadRequest, "unknown query parameter %q: /stats/summary takes only_cpu_and_memory=true|false", k)
			return
		}
		b, err := strconv.ParseBool(v[len(v)-1])
		if err != nil {
			httpError(w, http.StatusBadRequest, "only_cpu_and_memory=%q is not a boolean", v[len(v)-1])
			return
		}
		only = b
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	sum, err := s.stats.Summary(ctx, only)
	if err != nil {
		httpError(w, http.StatusInternalServerError, "stats summary: %v", err)
		return
	}
	writeJSON(w, sum)
}

// serveHTTP serves the read-only API on status.readOnlyAddress until ctx
// ends. The listener is open when it returns without error.
func (s *Service) listenHTTP(ctx context.Context) (func(), error) {
	addr := s.cfg.Status.ReadOnlyAddress
	if addr == "" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("status.readOnlyAddress %s: %w", addr, err)
	}
	s.httpAddr.Store(ln.Addr().String())
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("Read-only API stopped", "address", addr, "err", err)
		}
	}()
	s.log.Info("Serving the read-only API", "address", ln.Addr().String())
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}, nil
}
