package daemon

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/nodelet/nodelet/internal/kubeletmetrics"
)

// MetricsSocket is where a daemon serves its Prometheus metrics: a unix
// socket in its own directory under the state dir, so no port needs
// configuring and only the daemon's user and group nodelet can reach it.
// nodelet-server federates them into the node's /metrics.
func MetricsSocket(stateDir, component string) string {
	return filepath.Join(ComponentDir(stateDir, component), "metrics.sock")
}

// ServeMetrics serves g (nil: no metrics) at /metrics on the component's
// metrics socket until ctx ends, and the Go runtime's profiles at
// /debug/pprof/ (where a daemon's memory and CPU go: `curl --unix-socket
// SOCK http://x/debug/pprof/heap > heap.pb.gz; go tool pprof heap.pb.gz`).
// The socket is 0660 in the component's 0750 directory: its user and
// group nodelet reach it, nobody else. A previous instance's socket is
// replaced.
func ServeMetrics(ctx context.Context, stateDir, component string, g prometheus.Gatherer) error {
	path := MetricsSocket(stateDir, component)
	if err := MkdirRun(stateDir, component); err != nil {
		return err
	}
	_ = os.Remove(path)
	l, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("metrics socket %s: %w", path, err)
	}
	_ = os.Chmod(path, 0o660)
	if g == nil {
		g = prometheus.NewRegistry()
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	go func() { _ = srv.Serve(l) }()
	return nil
}

// RemoteGatherer gathers the metrics another daemon serves on its socket.
// A daemon that is down contributes nothing rather than failing the whole
// scrape.
type RemoteGatherer struct {
	Socket string
	client *http.Client
}

// NewRemoteGatherer reads the metrics of component on the node of stateDir.
func NewRemoteGatherer(stateDir, component string) *RemoteGatherer {
	sock := MetricsSocket(stateDir, component)
	return &RemoteGatherer{Socket: sock, client: &http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}},
	}}
}

// Gather implements prometheus.Gatherer.
func (r *RemoteGatherer) Gather() ([]*dto.MetricFamily, error) {
	resp, err := r.client.Get("http://metrics/metrics")
	if err != nil {
		return nil, nil
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("metrics from %s: %s", r.Socket, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("metrics from %s: %w", r.Socket, err)
	}
	// The daemon's families (nodelet_* and the kubelet's it owns) without
	// those of its process: every process has go_* and process_* series,
	// which would collide with the federator's own.
	out := make([]*dto.MetricFamily, 0, len(fams))
	for name, f := range fams {
		if !kubeletmetrics.ProcessLocal(name) {
			out = append(out, f)
		}
	}
	return out, nil
}
