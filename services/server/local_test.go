package server

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"math/big"
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

	"github.com/nodelet/nodelet/internal/cri"
)

// clientPair is a client certificate signed by ca for cn, with its key.
func clientPair(t *testing.T, ca *x509.Certificate, caKey *ecdsa.PrivateKey, cn string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// TestLocalAdminOnlyFromTheNodeLocalCA: issue 33, item 6. The node-local
// admin skips authorization (a standalone node has no API server to ask),
// but only with the certificate the node-local CA signed: a certificate
// of the cluster's client CA, or a bearer token whose TokenReview says
// nodelet:local-admin, is an ordinary user, authorized like any other
// (here: a SubjectAccessReview that allows nothing), for exec too.
func TestLocalAdminOnlyFromTheNodeLocalCA(t *testing.T) {
	cfg := testConfig(t)
	ca, caKey := testCA(t)
	caFile := filepath.Join(t.TempDir(), "cluster-ca.crt")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.Server.Authentication.X509.ClientCAFile = caFile
	// An API server that knows one token, reviewed as the local admin's
	// name, and allows nobody anything.
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/apis/authentication.k8s.io/v1/tokenreviews":
			var tr authenticationv1.TokenReview
			_ = json.NewDecoder(r.Body).Decode(&tr)
			if tr.Spec.Token == "pretends-to-be-local" {
				tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: LocalAdmin}}
			}
			_ = json.NewEncoder(w).Encode(&tr)
		case "/apis/authorization.k8s.io/v1/subjectaccessreviews":
			var sar authorizationv1.SubjectAccessReview
			_ = json.NewDecoder(r.Body).Decode(&sar)
			sar.Status = authorizationv1.SubjectAccessReviewStatus{Allowed: false, Reason: "nobody may"}
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
	ts := startServer(t, cfg, &cri.Clients{}, func(o *Options) { o.Kube = kube })

	do := func(c *http.Client, method, path, token string) (int, string) {
		req, err := http.NewRequest(method, "https://"+ts.Addr()+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	with := func(certs ...tls.Certificate) *http.Client {
		return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true, Certificates: certs}}}
	}
	impostor := with(clientPair(t, ca, caKey, LocalAdmin))
	nobody := with()
	for _, path := range []string{"/pods", "/exec/ns/web/app?command=id&output=1", "/run/ns/web/app?cmd=id"} {
		method := http.MethodGet
		if !strings.HasPrefix(path, "/pods") {
			method = http.MethodPost
		}
		if code, body := do(impostor, method, path, ""); code != http.StatusForbidden || !strings.Contains(body, "user="+LocalAdmin) {
			t.Errorf("cluster CA certificate named %s: %s %s = %d %q, want 403", LocalAdmin, method, path, code, body)
		}
		if code, body := do(nobody, method, path, "pretends-to-be-local"); code != http.StatusForbidden {
			t.Errorf("token reviewed as %s: %s %s = %d %q, want 403", LocalAdmin, method, path, code, body)
		}
	}
	// The real local admin still gets in, whatever the mode.
	if code, body := ts.get(http.MethodGet, "", "/pods"); code != http.StatusOK {
		t.Errorf("node-local admin: /pods = %d %q", code, body)
	}
}
