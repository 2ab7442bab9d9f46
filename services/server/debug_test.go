package server

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/cri"
	"github.com/nodelet/nodelet/internal/daemon"
)

// TestConfigz: /configz decodes as the kubelet's does for its clients (the
// e2e framework's configzWrapper: {"kubeletconfig": v1beta1
// KubeletConfiguration}) with nodelet's values, nodelet's own
// configuration beside it, secrets redacted in both.
func TestConfigz(t *testing.T) {
	cfg := testConfig(t)
	cfg.Node.MaxPods = 42
	cfg.Sources.ManifestURL = "http://127.0.0.1:1/pods"
	cfg.Sources.ManifestURLHeader = map[string][]string{"Authorization": {"Bearer secret"}}
	ts := startServer(t, cfg, &cri.Clients{}, nil)
	code, body := ts.get(http.MethodGet, "", "/configz")
	if code != http.StatusOK {
		t.Fatalf("/configz = %d %s", code, body)
	}
	if strings.Contains(body, "secret") {
		t.Errorf("/configz shows the manifest URL's header: %s", body)
	}
	var z struct {
		KubeletConfig kubeletv1beta1.KubeletConfiguration `json:"kubeletconfig"`
		Nodelet       map[string]any                      `json:"nodelet"`
	}
	if err := json.Unmarshal([]byte(body), &z); err != nil {
		t.Fatal(err)
	}
	kc := z.KubeletConfig
	for _, c := range []struct {
		field     string
		got, want any
	}{
		{"maxPods", kc.MaxPods, int32(42)},
		{"staticPodURL", kc.StaticPodURL, "http://127.0.0.1:1/pods"},
		{"staticPodURLHeader", strings.Join(kc.StaticPodURLHeader["Authorization"], ","), "[redacted]"},
		{"containerRuntimeEndpoint", kc.ContainerRuntimeEndpoint, cfg.Runtime.Endpoint},
		{"syncFrequency", kc.SyncFrequency.Duration, cfg.Runtime.SyncFrequency},
		{"healthzPort", *kc.HealthzPort, int32(0)},
		{"authorization.mode", string(kc.Authorization.Mode), "Webhook"},
		{"cgroupDriver", kc.CgroupDriver, cfg.Runtime.CgroupDriver},
		{"nodelet node.maxPods", z.Nodelet["node"].(map[string]any)["maxPods"], float64(42)},
	} {
		if c.got != c.want {
			t.Errorf("/configz %s = %v, want %v", c.field, c.got, c.want)
		}
	}
}

// TestProfiles: /debug/pprof/ serves nodelet-server's profiles as the
// kubelet's InstallProfilingHandler, and another daemon's with ?daemon=,
// through that daemon's metrics socket; off, it answers the kubelet's 405.
func TestProfiles(t *testing.T) {
	cfg := testConfig(t)
	ts := startServer(t, cfg, &cri.Clients{}, nil)
	for path, want := range map[string]string{
		"/debug/pprof/":                  "goroutine",
		"/debug/pprof/goroutine?debug=1": "goroutine profile: total",
		"/debug/pprof/cmdline":           "server.test",
	} {
		if code, body := ts.get(http.MethodGet, "", path); code != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("%s = %d, want 200 with %q:\n%.300s", path, code, want, body)
		}
	}
	if code, body := ts.get(http.MethodGet, "", "/debug/pprof/?daemon=runtime"); code != http.StatusBadGateway || !strings.Contains(body, "nodelet-runtime") {
		t.Errorf("runtime's profiles with no runtime listening = %d %q, want 502 naming nodelet-runtime", code, body)
	}
	if code, body := ts.get(http.MethodGet, "", "/debug/pprof/?daemon=kubelet"); code != http.StatusNotFound || !strings.Contains(body, `no nodelet daemon "kubelet"`) {
		t.Errorf("an unknown daemon's profiles = %d %q, want 404 naming it", code, body)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := daemon.ServeMetrics(ctx, cfg.Node.StateDir, bus.Runtime, nil); err != nil {
		t.Fatal(err)
	}
	if code, body := ts.get(http.MethodGet, "", "/debug/pprof/heap?debug=1&daemon=runtime"); code != http.StatusOK || !strings.Contains(body, "heap profile") {
		t.Errorf("runtime's heap profile through its socket = %d:\n%.300s", code, body)
	}

	off := testConfig(t)
	off.Server.EnableProfilingHandler = false
	ts2 := startServer(t, off, &cri.Clients{}, nil)
	if code, body := ts2.get(http.MethodGet, "", "/debug/pprof/"); code != http.StatusMethodNotAllowed || strings.TrimSpace(body) != "profiling endpoint is disabled." {
		t.Errorf("disabled /debug/pprof/ = %d %q", code, body)
	}
}
