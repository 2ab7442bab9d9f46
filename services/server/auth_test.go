package server

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/config"
)

// TestRequestAttributes holds the kubelet's table
// (pkg/kubelet/server/auth_test.go, fine-grained authz on).
func TestRequestAttributes(t *testing.T) {
	for _, tc := range []struct {
		method, path string
		verb         string
		subresources []string
	}{
		{"GET", "/containerLogs/ns/pod/c", "get", []string{"proxy"}},
		{"POST", "/exec/ns/pod/c", "create", []string{"proxy"}},
		{"GET", "/exec/ns/pod/c", "get", []string{"proxy"}},
		{"POST", "/portForward/ns/pod", "create", []string{"proxy"}},
		{"POST", "/run/ns/pod/c", "create", []string{"proxy"}},
		{"GET", "/stats/summary", "get", []string{"stats"}},
		{"GET", "/stats/", "get", []string{"stats"}},
		{"GET", "/metrics", "get", []string{"metrics"}},
		{"GET", "/metrics/cadvisor", "get", []string{"metrics"}},
		{"GET", "/metrics/resource", "get", []string{"metrics"}},
		{"GET", "/logs/syslog", "get", []string{"log"}},
		{"POST", "/checkpoint/ns/pod/c", "create", []string{"checkpoint"}},
		{"GET", "/spec/", "get", []string{"proxy"}},
		{"GET", "/pods", "get", []string{"pods", "proxy"}},
		{"GET", "/pods/", "get", []string{"pods", "proxy"}},
		{"GET", "/runningpods/", "get", []string{"pods", "proxy"}},
		{"GET", "/healthz", "get", []string{"healthz", "proxy"}},
		{"GET", "/healthz/ping", "get", []string{"healthz", "proxy"}},
		{"GET", "/configz", "get", []string{"configz", "proxy"}},
		{"GET", "/flagz", "get", []string{"configz"}},
		{"GET", "/debug/pprof/heap", "get", []string{"proxy"}},
		{"GET", "/statusz", "get", []string{"statusz"}},
		{"PUT", "/podsfoo", "update", []string{"proxy"}},
		{"PATCH", "/metricsfoo", "patch", []string{"proxy"}},
		{"DELETE", "/statsfoo", "delete", []string{"proxy"}},
		{"HEAD", "/pods", "", []string{"pods", "proxy"}},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			u := &user.DefaultInfo{Name: "alice"}
			attrs := requestAttributes("node-a", u, httptest.NewRequest(tc.method, tc.path, nil), false)
			var subs []string
			for _, a := range attrs {
				subs = append(subs, a.GetSubresource())
				if a.GetVerb() != tc.verb || a.GetResource() != "nodes" || a.GetName() != "node-a" ||
					a.GetAPIVersion() != "v1" || a.GetAPIGroup() != "" || a.GetNamespace() != "" ||
					!a.IsResourceRequest() || a.GetPath() != tc.path || a.GetUser().GetName() != "alice" {
					t.Errorf("attributes = %+v", a)
				}
			}
			if !reflect.DeepEqual(subs, tc.subresources) {
				t.Errorf("subresources = %v, want %v", subs, tc.subresources)
			}
		})
	}
}

func TestIsSubpath(t *testing.T) {
	for _, tc := range []struct {
		sub, path string
		want      bool
	}{
		{"/stats", "/stats/", true},
		{"/stats/summary", "/stats/", true},
		{"/statsfoo", "/stats/", false},
		{"/pods", "/pods", true},
		{"/pods/x", "/pods", true},
		{"/podsx", "/pods", false},
		{"/", "/pods", false},
	} {
		if got := isSubpath(tc.sub, tc.path); got != tc.want {
			t.Errorf("isSubpath(%q, %q) = %v, want %v", tc.sub, tc.path, got, tc.want)
		}
	}
}

// TestWithAuth runs the kubelet's filter over the authenticators and
// authorizers buildAuthn/buildAuthz make without an API server: client
// certificates against the client CA, nothing else.
func TestWithAuth(t *testing.T) {
	dir := t.TempDir()
	caCert, caKey := testCA(t)
	caFile := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caCert.Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	client := testClientCert(t, caCert, caKey, "alice", "devs")
	for _, tc := range []struct {
		name     string
		authn    config.ServerAuthenticationConfig
		mode     string
		cert     bool
		wantCode int
		wantBody string
	}{
		{name: "standalone, no method", mode: "Webhook", wantCode: 401, wantBody: "Unauthorized"},
		{name: "no certificate", authn: config.ServerAuthenticationConfig{X509: config.ServerX509Config{ClientCAFile: caFile}},
			mode: "AlwaysAllow", wantCode: 401, wantBody: "Unauthorized"},
		{name: "certificate, AlwaysAllow", authn: config.ServerAuthenticationConfig{X509: config.ServerX509Config{ClientCAFile: caFile}},
			mode: "AlwaysAllow", cert: true, wantCode: 200, wantBody: "ok"},
		{name: "certificate, Webhook without API server", authn: config.ServerAuthenticationConfig{X509: config.ServerX509Config{ClientCAFile: caFile}},
			mode: "Webhook", cert: true, wantCode: 403, wantBody: "Forbidden (user=alice, verb=get, resource=nodes, subresource(s)=[pods proxy])\n"},
		{name: "anonymous, AlwaysAllow", authn: config.ServerAuthenticationConfig{Anonymous: config.ServerAnonymousConfig{Enabled: true}},
			mode: "AlwaysAllow", wantCode: 200, wantBody: "ok"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log := slog.New(slog.NewTextHandler(io.Discard, nil))
			authn, _, err := buildAuthn(tc.authn, nil, log)
			if err != nil {
				t.Fatal(err)
			}
			authz, err := buildAuthz(config.ServerAuthorizationConfig{Mode: tc.mode}, nil, clock.RealClock{}, log)
			if err != nil {
				t.Fatal(err)
			}
			s := &authFilter{authn: authn, authz: authz, nodeName: "node-a", log: log}
			h := s.withAuth(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok")) }))
			r := httptest.NewRequest("GET", "/pods", nil)
			if tc.cert {
				r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{client}}
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != tc.wantCode || w.Body.String() != tc.wantBody {
				t.Errorf("got %d %q, want %d %q", w.Code, w.Body.String(), tc.wantCode, tc.wantBody)
			}
		})
	}
}

func testCA(t *testing.T) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c, key
}

func testClientCert(t *testing.T, ca *x509.Certificate, caKey *ecdsa.PrivateKey, cn, org string) *x509.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: cn, Organization: []string{org}},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestStrictStreamingAttributes: with strictStreamingVerbs the streaming
// paths are create whatever the method; the rest keep the method's verb.
func TestStrictStreamingAttributes(t *testing.T) {
	u := &user.DefaultInfo{Name: "alice"}
	for path, want := range map[string]string{"/exec/ns/p/c": "create", "/attach/ns/p/c": "create",
		"/portForward/ns/p": "create", "/run/ns/p/c": "create", "/pods": "get", "/containerLogs/ns/p/c": "get",
		"/execfoo": "get", "/runningpods/": "get"} {
		for _, a := range requestAttributes("node-a", u, httptest.NewRequest("GET", path, nil), true) {
			if a.GetVerb() != want {
				t.Errorf("GET %s strict: verb %s, want %s", path, a.GetVerb(), want)
			}
		}
	}
}
