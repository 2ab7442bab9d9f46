// Package kubeclient is the node's identity towards kube-apiserver, said
// once for every daemon that talks to it (sources, runtime, status, server):
// the node's kubeconfig (node.kubeconfig), TLS bootstrap from
// node.bootstrapKubeconfig, client certificate rotation
// (node.rotateCertificates) and the kubelet-serving certificate of
// nodelet-server (server.serverTLSBootstrap), all through
// k8s.io/client-go/util/certificate as the kubelet does.
//
// Who does what. nodelet-status owns the client credential
// (StartClientCertificate): it bootstraps it and, with rotateCertificates,
// runs the certificate manager that renews it into
// <stateDir>/pki/kubelet-client-current.pem (the kubelet's file store). Every
// daemon, status included, builds its clients with RESTConfig: it waits
// until the credential exists (while status bootstraps), and its transport
// presents the certificate it re-reads from disk every CertReloadPeriod,
// closing its connections when it changed, as the kubelet's UpdateTransport
// does with the manager in one process. So a renewal reaches every daemon
// without a restart, across separate processes, with no bus message.
package kubeclient

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"time"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/certificate"
	"k8s.io/client-go/util/connrotation"

	"github.com/nodelet/nodelet/internal/config"
)

// Pair name prefixes of the kubelet's certificate file stores:
// <certDir>/kubelet-client-current.pem and kubelet-server-current.pem.
const (
	clientPairPrefix  = "kubelet-client"
	servingPairPrefix = "kubelet-server"
)

// CertDir is the node's certificate directory (the kubelet's --cert-dir):
// <stateDir>/pki.
func CertDir(stateDir string) string { return filepath.Join(stateDir, "pki") }

// ClientCertPath is the node's current client certificate and key (one PEM
// file, a symlink to the latest pair), as the kubelet's.
func ClientCertPath(stateDir string) string {
	return filepath.Join(CertDir(stateDir), clientPairPrefix+"-current.pem")
}

// ServingCertPath is nodelet-server's current serving certificate and key
// with server.serverTLSBootstrap.
func ServingCertPath(stateDir string) string {
	return filepath.Join(CertDir(stateDir), servingPairPrefix+"-current.pem")
}

// CertReloadPeriod is how often a daemon re-reads its client certificate
// (the kubelet's UpdateTransport checks its manager every 10s). Until the
// first certificate is there, it looks every second.
var CertReloadPeriod = 10 * time.Second

// RESTConfig is the node's client configuration (node.kubeconfig), for any
// daemon. While node.bootstrapKubeconfig is set and the node's credential
// is not there yet, it waits (nodelet-status is bootstrapping it), until ctx
// ends. A client certificate in files, or any with
// node.rotateCertificates, is presented by a transport that re-reads it
// from disk, so renewals need no restart; the re-reading stops with ctx.
// Its rate limit is sources.kubeAPIQPS and sources.kubeAPIBurst (the
// kubelet's kubeAPIQPS and kubeAPIBurst, 50 and 100), each daemon's client
// alike: client-go's own default (5 and 10) held nodelet-runtime's secret,
// config map and token requests to 5 a second, and a churning node's pod
// starts queued behind them. Callers set UserAgent.
func RESTConfig(ctx context.Context, cfg *config.Config, log *slog.Logger) (*rest.Config, error) {
	path := cfg.NodeKubeconfig()
	if path == "" {
		return nil, errors.New("no node.kubeconfig: a standalone node has no API identity")
	}
	waiting := false
	for {
		rc, src, err := load(cfg, path)
		if err == nil && src != nil && src.Current() == nil {
			err = fmt.Errorf("client certificate %s: %w", src.describe(), src.lastErr())
		}
		if err == nil {
			if waiting {
				log.Info("Node credential ready", "kubeconfig", path)
			}
			if src != nil {
				if err := addCertRotation(ctx, log, rc, src); err != nil {
					return nil, fmt.Errorf("node.kubeconfig %s: %w", path, err)
				}
			}
			rc.QPS, rc.Burst = float32(cfg.Sources.KubeAPIQPS), cfg.Sources.KubeAPIBurst
			return rc, nil
		}
		if !Bootstraps(cfg) {
			return nil, fmt.Errorf("node.kubeconfig %s: %w", path, err)
		}
		if !waiting {
			log.Info("Waiting for the node's credential from nodelet-status (node.bootstrapKubeconfig, node.rotateCertificates)",
				"kubeconfig", path, "reason", err.Error())
			waiting = true
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// Bootstraps reports whether nodelet-status makes or renews the node's
// credential (node.bootstrapKubeconfig or node.rotateCertificates), so that
// RESTConfig may wait for it.
func Bootstraps(cfg *config.Config) bool {
	return cfg.Node.BootstrapKubeconfig != "" || cfg.Node.RotateCertificates
}

// load reads the kubeconfig and, when its client certificate may change
// on disk, the source that re-reads it.
func load(cfg *config.Config, path string) (*rest.Config, *certSource, error) {
	rc, err := loadRESTClientConfig(path)
	if err != nil {
		return nil, nil, err
	}
	src := &certSource{}
	switch {
	case cfg.Node.RotateCertificates:
		// The rotating manager's store: the current pair, else the
		// kubeconfig's files, else its embedded data (the kubelet's
		// bootstrap PEM), as NewKubeletClientCertificateManager reads it.
		dir := CertDir(cfg.Node.StateDir)
		store, err := certificate.NewFileStore(clientPairPrefix, dir, dir, rc.CertFile, rc.KeyFile)
		if err != nil {
			return nil, nil, err
		}
		certData, keyData := rc.CertData, rc.KeyData
		// As the kubelet's rotating transport: the certificate alone
		// is the identity (a token of the kubeconfig only bootstraps it).
		rc = rest.AnonymousClientConfig(rc)
		src.files = []string{ClientCertPath(cfg.Node.StateDir), rc.CertFile}
		src.read = func() (*tls.Certificate, error) {
			c, err := store.Current()
			var noCert *certificate.NoCertKeyError
			if errors.As(err, &noCert) && len(certData) > 0 {
				cc, err := tls.X509KeyPair(certData, keyData)
				return &cc, err
			}
			return c, err
		}
	case rc.CertFile != "":
		certFile, keyFile := rc.CertFile, rc.KeyFile
		src.files = []string{certFile}
		src.read = func() (*tls.Certificate, error) {
			c, err := tls.LoadX509KeyPair(certFile, keyFile)
			return &c, err
		}
	default:
		// A token or embedded certificate data: nothing on disk to follow.
		return rc, nil, nil
	}
	src.reload()
	return rc, src, nil
}

// certSource is a client certificate kept on disk by someone else
// (nodelet-status's certificate manager, an operator): Current is the last
// one that loaded.
type certSource struct {
	files []string
	read  func() (*tls.Certificate, error)

	mu   sync.Mutex
	cert *tls.Certificate
	err  error
}

// reload reads the certificate again; it reports whether it changed.
func (s *certSource) reload() bool {
	c, err := s.read()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.err = err
	if err != nil || c == nil || len(c.Certificate) == 0 {
		return false
	}
	if s.cert != nil && bytes.Equal(s.cert.Certificate[0], c.Certificate[0]) {
		return false
	}
	s.cert = c
	return true
}

// Current is the certificate to present; nil until one loaded.
func (s *certSource) Current() *tls.Certificate {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cert
}

func (s *certSource) lastErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		return errors.New("no certificate yet")
	}
	return s.err
}

func (s *certSource) describe() string {
	for _, f := range s.files {
		if f != "" {
			return f
		}
	}
	return "(embedded)"
}

// addCertRotation is the kubelet's addCertRotation
// (pkg/kubelet/certificate/transport.go) over a certSource: TLS presents
// the current certificate, and when a re-read finds a new one every
// connection is closed, so the next requests handshake with it.
func addCertRotation(ctx context.Context, log *slog.Logger, rc *rest.Config, src *certSource) error {
	// The CA and server name from the config; the client certificate from src.
	rc.CertData, rc.KeyData, rc.CertFile, rc.KeyFile = nil, nil, "", ""
	tlsConfig, err := rest.TLSConfigFor(rc)
	if err != nil {
		return fmt.Errorf("unable to configure TLS for the rest client: %v", err)
	}
	if tlsConfig == nil {
		tlsConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	tlsConfig.Certificates = nil
	tlsConfig.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		if c := src.Current(); c != nil {
			return c, nil
		}
		return &tls.Certificate{}, nil
	}
	d := connrotation.NewDialer((&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext)
	go wait.Until(func() {
		if src.reload() {
			log.Info("Certificate rotation detected, shutting down client connections to start using new credentials",
				"certificate", src.describe())
			d.CloseAll()
		}
	}, CertReloadPeriod, ctx.Done())
	rc.Transport = utilnet.SetTransportDefaults(&http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		TLSHandshakeTimeout: 10 * time.Second,
		TLSClientConfig:     tlsConfig,
		MaxIdleConnsPerHost: 25,
		DialContext:         d.DialContext,
	})
	// The transport enforces TLS: every TLS option of the config goes.
	rc.CAData, rc.CAFile, rc.Insecure, rc.NextProtos = nil, "", false, nil
	return nil
}
