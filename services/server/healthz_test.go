package server

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/cri"
	"github.com/nodelet/nodelet/schemas"
)

// TestKubeletHealthzPort: server.healthzPort answers GET /healthz over
// plain HTTP without credentials, with the checks server.port's /healthz
// makes, and /healthz/ping. A port already taken does not stop the kubelet
// API: nodelet-server serves it and takes the healthz port once it is free,
// as the kubelet's retry loop does.
func TestKubeletHealthzPort(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := held.Addr().(*net.TCPAddr).Port
	cfg := testConfig(t)
	cfg.Server.HealthzBindAddress, cfg.Server.HealthzPort = "127.0.0.1", port
	ts := startServer(t, cfg, &cri.Clients{}, func(o *Options) { o.Daemons = []string{} })
	if code, _ := ts.get(http.MethodGet, "", "/healthz"); code != http.StatusOK {
		t.Fatalf("the kubelet API's /healthz = %d while the healthz port is taken, want it served", code)
	}
	if a := ts.HealthzAddr(); a != "" {
		t.Fatalf("healthz listens on %s while another process holds 127.0.0.1:%d", a, port)
	}
	held.Close()
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	plain := &http.Client{Timeout: 10 * time.Second}
	get := func(path string) (int, string) {
		resp, err := plain.Get(base + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	runtime := ts.b.Connect(bus.Runtime)
	if _, err := runtime.Put(t.Context(), bus.BucketRuntime, bus.KeyRuntimeState, &schemas.RuntimeState{RuntimeReady: true, NetworkReady: true}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "healthz on the freed port (retried every 5s)", func() bool {
		code, body := get("/healthz")
		return code == http.StatusOK && body == "ok"
	})
	if ts.HealthzAddr() != fmt.Sprintf("127.0.0.1:%d", port) {
		t.Errorf("HealthzAddr = %q", ts.HealthzAddr())
	}
	if code, body := get("/healthz/ping"); code != http.StatusOK || body != "ok" {
		t.Errorf("/healthz/ping = %d %q", code, body)
	}
	if code, body := get("/healthz?verbose"); code != http.StatusOK || body != "[+]ping ok\n[+]runtime ok\nhealthz check passed\n" {
		t.Errorf("/healthz?verbose = %d %q", code, body)
	}
	if code, _ := get("/pods"); code != http.StatusNotFound {
		t.Errorf("/pods on the healthz port = %d, want 404: it serves healthz only", code)
	}
	if _, err := runtime.Put(t.Context(), bus.BucketRuntime, bus.KeyRuntimeState, &schemas.RuntimeState{RuntimeReady: false, Reason: "RuntimeDown", Message: "containerd socket gone"}); err != nil {
		t.Fatal(err)
	}
	var body string
	waitFor(t, 10*time.Second, "healthz to fail naming the runtime", func() bool {
		var code int
		code, body = get("/healthz")
		return code == http.StatusInternalServerError
	})
	if !strings.Contains(body, "[-]runtime failed: container runtime is down: RuntimeDown: containerd socket gone") {
		t.Errorf("healthz body:\n%s", body)
	}
}
