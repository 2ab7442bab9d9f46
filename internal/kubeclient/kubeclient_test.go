package kubeclient

import (
	"github.com/nodelet/nodelet/internal/testenv/eventually"

	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/nodelet/nodelet/internal/config"
)

// testCA signs the certificates of these tests.
type testCA struct {
	cert   *x509.Certificate
	key    *ecdsa.PrivateKey
	pem    []byte
	serial int64
}

func newCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return &testCA{cert: c, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), serial: 1}
}

// issue returns a PEM certificate and key for cn.
func (ca *testCA) issue(t *testing.T, cn string, usage x509.ExtKeyUsage, ips ...net.IP) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ca.serial++
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(ca.serial), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: ips}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
}

// echoServer answers every request with the CN and serial of the client
// certificate it was made with; it requires one signed by ca.
func echoServer(t *testing.T, ca *testCA) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := r.TLS.PeerCertificates[0]
		fmt.Fprintf(w, "%s/%s", c.Subject.CommonName, c.SerialNumber)
	}))
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	certPEM, keyPEM := ca.issue(t, "server", x509.ExtKeyUsageServerAuth, net.ParseIP("127.0.0.1"))
	sc, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	srv.TLS = &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool, Certificates: []tls.Certificate{sc}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// writeKubeconfig writes a kubeconfig for srv with the client certificate
// and key in files.
func writeKubeconfig(t *testing.T, path, server string, ca []byte, certFile, keyFile string) {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{ClientCertificate: certFile, ClientKey: keyFile}
	kc.Contexts["x"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	kc.CurrentContext = "x"
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
}

func whoAmI(ctx context.Context, t *testing.T, c kubernetes.Interface) string {
	t.Helper()
	b, err := c.Discovery().RESTClient().Get().AbsPath("/whoami").DoRaw(ctx)
	if err != nil {
		return "error: " + err.Error()
	}
	return string(b)
}

// nodeCertFiles writes a client pair for system:node:n1 into dir.
func nodeCertFiles(t *testing.T, ca *testCA, dir string) (certFile, keyFile string) {
	t.Helper()
	certFile, keyFile = filepath.Join(dir, "c.crt"), filepath.Join(dir, "c.key")
	c, k := ca.issue(t, "system:node:n1", x509.ExtKeyUsageClientAuth)
	writeFile(t, certFile, c)
	writeFile(t, keyFile, k)
	return certFile, keyFile
}

func testConfig(t *testing.T) *config.Config {
	cfg := config.Defaults()
	cfg.Node.Name = "n1"
	cfg.Node.StateDir = t.TempDir()
	return cfg
}

func waitTrue(t *testing.T, timeout time.Duration, what string, ok func() bool) {
	t.Helper()
	eventually.True(t, timeout, what, ok)
}

// TestRESTConfigFollowsRenewedCertificate: a certificate replaced on disk
// (as another process's certificate manager does) is presented by the next
// requests of a client built before, with no new client.
func TestRESTConfigFollowsRenewedCertificate(t *testing.T) {
	old := CertReloadPeriod
	CertReloadPeriod = 20 * time.Millisecond
	t.Cleanup(func() { CertReloadPeriod = old })
	ca := newCA(t)
	srv := echoServer(t, ca)
	cfg := testConfig(t)
	dir := t.TempDir()
	certFile, keyFile := nodeCertFiles(t, ca, dir)
	cfg.Node.Kubeconfig = filepath.Join(dir, "kubeconfig")
	writeKubeconfig(t, cfg.Node.Kubeconfig, srv.URL, ca.pem, certFile, keyFile)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rc, err := RESTConfig(ctx, cfg, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	client := kubernetes.NewForConfigOrDie(rc)
	first := whoAmI(ctx, t, client)
	if !strings.HasPrefix(first, "system:node:n1/") {
		t.Fatalf("first request: %q", first)
	}
	c2, k2 := ca.issue(t, "system:node:n1", x509.ExtKeyUsageClientAuth)
	writeFile(t, keyFile, k2)
	writeFile(t, certFile, c2)
	waitTrue(t, 5*time.Second, "the renewed certificate presented", func() bool {
		got := whoAmI(ctx, t, client)
		return strings.HasPrefix(got, "system:node:n1/") && got != first
	})
}

// TestRESTConfigRateLimit: every daemon's client is limited by
// sources.kubeAPIQPS and kubeAPIBurst (the kubelet's 50 and 100 by default),
// not client-go's 5 and 10, which held nodelet-runtime's volume requests.
func TestRESTConfigRateLimit(t *testing.T) {
	ca := newCA(t)
	dir := t.TempDir()
	certFile, keyFile := nodeCertFiles(t, ca, dir)
	for _, c := range []struct {
		qps   float64
		burst int
	}{{0, 0}, {7, 13}} {
		cfg := testConfig(t)
		if c.qps == 0 {
			c.qps, c.burst = 50, 100 // the defaults
		} else {
			cfg.Sources.KubeAPIQPS, cfg.Sources.KubeAPIBurst = c.qps, c.burst
		}
		cfg.Node.Kubeconfig = filepath.Join(dir, "kubeconfig")
		writeKubeconfig(t, cfg.Node.Kubeconfig, "https://127.0.0.1:1", ca.pem, certFile, keyFile)
		ctx, cancel := context.WithCancel(context.Background())
		rc, err := RESTConfig(ctx, cfg, slog.Default())
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if rc.QPS != float32(c.qps) || rc.Burst != c.burst {
			t.Errorf("QPS %v burst %d, want %v and %d", rc.QPS, rc.Burst, c.qps, c.burst)
		}
	}
}

// TestRESTConfigRotatingStore: with rotateCertificates the certificate is
// the store's current pair (kubelet-client-current.pem), which the owner's
// manager replaces by moving the symlink.
func TestRESTConfigRotatingStore(t *testing.T) {
	old := CertReloadPeriod
	CertReloadPeriod = 20 * time.Millisecond
	t.Cleanup(func() { CertReloadPeriod = old })
	ca := newCA(t)
	srv := echoServer(t, ca)
	cfg := testConfig(t)
	cfg.Node.RotateCertificates = true
	pemPath := ClientCertPath(cfg.Node.StateDir)
	if err := os.MkdirAll(filepath.Dir(pemPath), 0o700); err != nil {
		t.Fatal(err)
	}
	cfg.Node.Kubeconfig = filepath.Join(t.TempDir(), "kubeconfig")
	writeKubeconfig(t, cfg.Node.Kubeconfig, srv.URL, ca.pem, pemPath, pemPath)
	pair := func(name string) {
		c, k := ca.issue(t, "system:node:n1", x509.ExtKeyUsageClientAuth)
		p := filepath.Join(filepath.Dir(pemPath), name)
		writeFile(t, p, append(c, k...))
		_ = os.Remove(pemPath + ".tmp")
		if err := os.Symlink(p, pemPath+".tmp"); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(pemPath+".tmp", pemPath); err != nil {
			t.Fatal(err)
		}
	}
	pair("kubelet-client-1.pem")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rc, err := RESTConfig(ctx, cfg, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	client := kubernetes.NewForConfigOrDie(rc)
	first := whoAmI(ctx, t, client)
	if !strings.HasPrefix(first, "system:node:n1/") {
		t.Fatalf("first request: %q", first)
	}
	pair("kubelet-client-2.pem")
	waitTrue(t, 5*time.Second, "the rotated pair presented", func() bool {
		got := whoAmI(ctx, t, client)
		return strings.HasPrefix(got, "system:node:n1/") && got != first
	})
}

// TestRESTConfigWaitsForBootstrap: with a bootstrap kubeconfig, a daemon
// waits for the node's credential instead of failing, and ends with ctx.
func TestRESTConfigWaitsForBootstrap(t *testing.T) {
	ca := newCA(t)
	srv := echoServer(t, ca)
	cfg := testConfig(t)
	dir := t.TempDir()
	cfg.Node.Kubeconfig = filepath.Join(dir, "kubeconfig")
	cfg.Node.BootstrapKubeconfig = filepath.Join(dir, "bootstrap")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		client kubernetes.Interface
		err    error
	}
	done := make(chan result, 1)
	go func() {
		rc, err := RESTConfig(ctx, cfg, slog.Default())
		if err != nil {
			done <- result{err: err}
			return
		}
		done <- result{client: kubernetes.NewForConfigOrDie(rc)}
	}()
	select {
	case r := <-done:
		t.Fatalf("RESTConfig returned before the credential existed: %v", r.err)
	case <-time.After(1500 * time.Millisecond):
	}
	certFile := filepath.Join(dir, "pair.pem")
	c, k := ca.issue(t, "system:node:n1", x509.ExtKeyUsageClientAuth)
	writeFile(t, certFile, append(c, k...))
	writeKubeconfig(t, cfg.Node.Kubeconfig, srv.URL, ca.pem, certFile, certFile)
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatal(r.err)
		}
		if got := whoAmI(ctx, t, r.client); !strings.HasPrefix(got, "system:node:n1/") {
			t.Fatalf("request: %q", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("RESTConfig did not return once the credential was written")
	}

	// Still waiting when ctx ends: it returns ctx's error.
	cfg2 := testConfig(t)
	cfg2.Node.Kubeconfig = filepath.Join(dir, "never")
	cfg2.Node.BootstrapKubeconfig = cfg.Node.BootstrapKubeconfig
	cctx, ccancel := context.WithCancel(context.Background())
	go func() { time.Sleep(100 * time.Millisecond); ccancel() }()
	if _, err := RESTConfig(cctx, cfg2, slog.Default()); err != context.Canceled {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

// TestRESTConfigWithoutBootstrapFails: no bootstrap, no kubeconfig file:
// an error naming the key at once, as before.
func TestRESTConfigWithoutBootstrapFails(t *testing.T) {
	cfg := testConfig(t)
	cfg.Node.Kubeconfig = filepath.Join(t.TempDir(), "missing")
	_, err := RESTConfig(context.Background(), cfg, slog.Default())
	if err == nil || !strings.Contains(err.Error(), "node.kubeconfig "+cfg.Node.Kubeconfig) {
		t.Fatalf("err = %v", err)
	}
}

// TestServingTemplate is the kubelet's newGetTemplateFn: no CSR before the
// node has an IP; SANs from its addresses, sorted and deduplicated.
func TestServingTemplate(t *testing.T) {
	var addrs []corev1.NodeAddress
	tmpl := newGetTemplateFn("n1", func() []corev1.NodeAddress { return addrs })
	if tmpl() != nil {
		t.Fatal("template without addresses")
	}
	addrs = []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: "host-b"}, {Type: corev1.NodeHostName, Address: "host-b"}}
	if tmpl() != nil {
		t.Fatal("template without an IP (AllowDNSOnlyNodeCSR is off)")
	}
	addrs = append(addrs, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "10.0.0.2"},
		corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "10.0.0.1"},
		corev1.NodeAddress{Type: corev1.NodeInternalDNS, Address: "a.internal"},
		corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "not-an-ip"})
	r := tmpl()
	if r == nil || r.Subject.CommonName != "system:node:n1" || strings.Join(r.Subject.Organization, ",") != "system:nodes" {
		t.Fatalf("template %+v", r)
	}
	if fmt.Sprint(r.DNSNames) != "[a.internal host-b]" || fmt.Sprint(r.IPAddresses) != "[10.0.0.1 10.0.0.2]" {
		t.Fatalf("SANs %v %v", r.DNSNames, r.IPAddresses)
	}
}
