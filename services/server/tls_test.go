package server

import (
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/internal/cri"
)

// loadServerConfig reads a server section through the config loader, as a
// node's file would be read, into a test configuration.
func loadServerConfig(t *testing.T, section string) *config.Config {
	t.Helper()
	p := filepath.Join(t.TempDir(), "nodelet.yaml")
	if err := os.WriteFile(p, []byte("server:\n"+section), 0o600); err != nil {
		t.Fatal(err)
	}
	loaded, err := config.LoadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t)
	cfg.Server.TLSMinVersion = loaded.Server.TLSMinVersion
	cfg.Server.TLSCipherSuites = loaded.Server.TLSCipherSuites
	cfg.Server.Authorization.StrictStreamingVerbs = loaded.Server.Authorization.StrictStreamingVerbs
	return cfg
}

// handshake connects to addr with tc and says which version and suite the
// server chose, or the error.
func handshake(addr string, tc *tls.Config) (uint16, uint16, error) {
	tc.InsecureSkipVerify = true
	c, err := tls.Dial("tcp", addr, tc)
	if err != nil {
		return 0, 0, err
	}
	defer c.Close()
	st := c.ConnectionState()
	return st.Version, st.CipherSuite, nil
}

// TestTLSSettings: issue 33, item 7. server.tlsMinVersion and
// server.tlsCipherSuites are the kubelet's settings, read from the node's
// file and applied to the kubelet API's listener.
func TestTLSSettings(t *testing.T) {
	t.Run("tlsMinVersion", func(t *testing.T) {
		ts := startServer(t, loadServerConfig(t, "  tlsMinVersion: VersionTLS13\n"), &cri.Clients{}, nil)
		if _, _, err := handshake(ts.Addr(), &tls.Config{MaxVersion: tls.VersionTLS12}); err == nil {
			t.Error("a TLS 1.2 client was served with tlsMinVersion VersionTLS13")
		}
		if v, _, err := handshake(ts.Addr(), &tls.Config{}); err != nil || v != tls.VersionTLS13 {
			t.Errorf("TLS 1.3 client: version %x, %v", v, err)
		}
	})
	t.Run("tlsCipherSuites", func(t *testing.T) {
		ts := startServer(t, loadServerConfig(t, "  tlsCipherSuites: [TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384]\n"), &cri.Clients{}, nil)
		if _, _, err := handshake(ts.Addr(), &tls.Config{MaxVersion: tls.VersionTLS12,
			CipherSuites: []uint16{tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256}}); err == nil {
			t.Error("a suite not in tlsCipherSuites was agreed")
		}
		_, suite, err := handshake(ts.Addr(), &tls.Config{MaxVersion: tls.VersionTLS12,
			CipherSuites: []uint16{tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384}})
		if err != nil || suite != tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384 {
			t.Errorf("suite %s, %v", tls.CipherSuiteName(suite), err)
		}
	})
	t.Run("defaults", func(t *testing.T) {
		ts := startServer(t, loadServerConfig(t, "  port: 10250\n"), &cri.Clients{}, nil)
		if _, _, err := handshake(ts.Addr(), &tls.Config{MinVersion: tls.VersionTLS11, MaxVersion: tls.VersionTLS11}); err == nil {
			t.Error("a TLS 1.1 client was served by default")
		}
		if v, _, err := handshake(ts.Addr(), &tls.Config{MaxVersion: tls.VersionTLS12}); err != nil || v != tls.VersionTLS12 {
			t.Errorf("TLS 1.2 client: version %x, %v", v, err)
		}
	})
}

// TestStrictStreamingVerbs: with server.authorization.strictStreamingVerbs
// a WebSocket upgrade to /exec (a GET) needs create on nodes/proxy; without
// it, as the kubelet, get is enough. The API server here allows a
// monitoring agent's token get on nodes/proxy and nothing else.
func TestStrictStreamingVerbs(t *testing.T) {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/apis/authentication.k8s.io/v1/tokenreviews":
			var tr authenticationv1.TokenReview
			_ = json.NewDecoder(r.Body).Decode(&tr)
			if tr.Spec.Token == "monitoring" {
				tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: "prometheus"}}
			}
			_ = json.NewEncoder(w).Encode(&tr)
		case "/apis/authorization.k8s.io/v1/subjectaccessreviews":
			var sar authorizationv1.SubjectAccessReview
			_ = json.NewDecoder(r.Body).Decode(&sar)
			ra := sar.Spec.ResourceAttributes
			sar.Status.Allowed = ra != nil && ra.Verb == "get" && ra.Resource == "nodes" && ra.Subresource == "proxy"
			_ = json.NewEncoder(w).Encode(&sar)
		default:
			http.NotFound(w, r)
		}
	}))
	defer api.Close()
	kube, err := kubernetes.NewForConfig(&rest.Config{Host: api.URL})
	if err != nil {
		t.Fatal(err)
	}
	for _, strict := range []bool{false, true} {
		section := "  authorization:\n    strictStreamingVerbs: false\n"
		if strict {
			section = "  authorization:\n    strictStreamingVerbs: true\n"
		}
		ts := startServer(t, loadServerConfig(t, section), &cri.Clients{}, func(o *Options) { o.Kube = kube })
		c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
		for _, path := range []string{"/exec/ns/web/app?command=id&output=1", "/attach/ns/web/app?output=1", "/portForward/ns/web", "/run/ns/web/app?cmd=id"} {
			req, _ := http.NewRequest(http.MethodGet, "https://"+ts.Addr()+path, nil)
			req.Header.Set("Authorization", "Bearer monitoring")
			req.Header.Set("Connection", "Upgrade")
			req.Header.Set("Upgrade", "websocket")
			req.Header.Set("Sec-WebSocket-Protocol", "v5.channel.k8s.io")
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			forbidden := resp.StatusCode == http.StatusForbidden && strings.Contains(string(body), "verb=create")
			if forbidden != strict {
				t.Errorf("strictStreamingVerbs %v: GET %s with get on nodes/proxy = %d %q", strict, path, resp.StatusCode, body)
			}
		}
		// /pods stays a get.
		req, _ := http.NewRequest(http.MethodGet, "https://"+ts.Addr()+"/pods", nil)
		req.Header.Set("Authorization", "Bearer monitoring")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("strictStreamingVerbs %v: /pods = %d", strict, resp.StatusCode)
		}
	}
}
