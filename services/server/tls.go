package server

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
	cliflag "k8s.io/component-base/cli/flag"

	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/internal/kubeclient"
)

// serverTLS is the kubelet API's TLS configuration as the kubelet's
// InitializeTLS makes it: server.tlsMinVersion (TLS 1.2 when empty) and
// server.tlsCipherSuites (Go's default set when empty), with a warning for
// each insecure suite. A client certificate is asked for and not
// required: the authenticators verify it.
func serverTLS(cfg config.ServerConfig, log *slog.Logger) (*tls.Config, error) {
	minVersion, err := cliflag.TLSVersion(cfg.TLSMinVersion)
	if err != nil {
		return nil, fmt.Errorf("server.tlsMinVersion: %w", err)
	}
	suites, err := cliflag.TLSCipherSuites(cfg.TLSCipherSuites)
	if err != nil {
		return nil, fmt.Errorf("server.tlsCipherSuites: %w", err)
	}
	insecure := cliflag.InsecureTLSCipherNames()
	for _, name := range cfg.TLSCipherSuites {
		if slices.Contains(insecure, name) {
			log.Warn("Use of insecure cipher detected", "cipher", name)
		}
	}
	return &tls.Config{MinVersion: minVersion, CipherSuites: suites, ClientAuth: tls.RequestClientCert,
		NextProtos: []string{"http/1.1"}}, nil
}

// servingCertificate loads server.tlsCertFile/tlsPrivateKeyFile, or, like
// the kubelet's InitializeTLS (cmd/kubelet/app/server.go), a self-signed
// certificate made once under the state dir for the node's names and
// addresses.
func servingCertificate(cfg *config.Config) (tls.Certificate, error) {
	if cfg.Server.TLSCertFile != "" {
		c, err := tls.LoadX509KeyPair(cfg.Server.TLSCertFile, cfg.Server.TLSPrivateKeyFile)
		if err != nil {
			return c, fmt.Errorf("server.tlsCertFile/tlsPrivateKeyFile: %w", err)
		}
		return c, nil
	}
	dir := kubeclient.CertDir(cfg.Node.StateDir)
	certPath, keyPath := filepath.Join(dir, "nodelet-server.crt"), filepath.Join(dir, "nodelet-server.key")
	if ok, _ := cert.CanReadCertAndKey(certPath, keyPath); !ok {
		ips, names := certNames(cfg)
		crt, key, err := cert.GenerateSelfSignedCertKey(cfg.Node.Name, ips, names)
		if err != nil {
			return tls.Certificate{}, fmt.Errorf("self-signed serving certificate: %w", err)
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return tls.Certificate{}, err
		}
		if err := keyutil.WriteKey(keyPath, key); err != nil {
			return tls.Certificate{}, fmt.Errorf("write %s: %w", keyPath, err)
		}
		if err := cert.WriteCert(certPath, crt); err != nil {
			return tls.Certificate{}, fmt.Errorf("write %s: %w", certPath, err)
		}
	}
	c, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err != nil {
		return c, fmt.Errorf("serving certificate %s: %w (delete it to make a new one)", certPath, err)
	}
	return c, nil
}

// certNames are the serving certificate's extra names and addresses: the
// hostname, node.address and the addresses of the node's interfaces.
func certNames(cfg *config.Config) ([]net.IP, []string) {
	var names []string
	if h, err := os.Hostname(); err == nil && !strings.EqualFold(h, cfg.Node.Name) {
		names = append(names, strings.ToLower(h))
	}
	var ips []net.IP
	if ip := net.ParseIP(cfg.Node.Address); ip != nil {
		ips = append(ips, ip)
	}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && !n.IP.IsLinkLocalUnicast() && !n.IP.Equal(net.ParseIP(cfg.Node.Address)) {
				ips = append(ips, n.IP)
			}
		}
	}
	return ips, names
}
