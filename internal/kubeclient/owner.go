package kubeclient

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"log/slog"
	"os"

	certificatesv1 "k8s.io/api/certificates/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/certificate"

	"github.com/nodelet/nodelet/internal/config"
)

// StartClientCertificate is nodelet-status's part, the kubelet's
// buildKubeletClientConfig (cmd/kubelet/app/server.go) without the client:
//
//   - node.rotateCertificates: LoadClientConfig (which writes
//     node.kubeconfig pointing at the certificate store when it is missing
//     or expired and a bootstrap kubeconfig is set), then a certificate
//     manager (NewKubeletClientCertificateManager) that requests the first
//     certificate with the bootstrap credential when there is none and
//     renews it at 70-90% of its lifetime, with the current one. It runs
//     until ctx ends; StartClientCertificate returns at once.
//   - node.bootstrapKubeconfig alone: LoadClientCert, which returns once the
//     certificate is issued and node.kubeconfig written (up to an hour).
//   - neither: nothing to do.
func StartClientCertificate(ctx context.Context, cfg *config.Config, log *slog.Logger) error {
	kubeconfig, bootstrap := cfg.NodeKubeconfig(), cfg.Node.BootstrapKubeconfig
	if kubeconfig == "" || (bootstrap == "" && !cfg.Node.RotateCertificates) {
		return nil
	}
	certDir := CertDir(cfg.Node.StateDir)
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		return fmt.Errorf("certificate directory %s: %w", certDir, err)
	}
	if !cfg.Node.RotateCertificates {
		if err := loadClientCert(ctx, log, kubeconfig, bootstrap, certDir, cfg.Node.Name); err != nil {
			return fmt.Errorf("TLS bootstrap (node.bootstrapKubeconfig %s): %w", bootstrap, err)
		}
		return nil
	}
	log.Info("Client rotation is on, will bootstrap in background")
	certConfig, clientConfig, err := loadClientConfig(log, kubeconfig, bootstrap, certDir)
	if err != nil {
		return fmt.Errorf("node.kubeconfig %s: %w", kubeconfig, err)
	}
	m, err := newClientCertificateManager(ctx, certConfig, clientConfig, certDir, cfg.Node.Name)
	if err != nil {
		return err
	}
	log.Info("Starting client certificate rotation")
	m.Start()
	go func() {
		<-ctx.Done()
		m.Stop()
	}()
	return nil
}

// newClientCertificateManager is the kubelet's buildClientCertificateManager
// and NewKubeletClientCertificateManager: CSRs for system:node:<name> in
// system:nodes to kubernetes.io/kube-apiserver-client-kubelet, made with
// the current certificate when there is one, else with the bootstrap
// credential; pairs kept in certDir as kubelet-client-<time>.pem with
// kubelet-client-current.pem pointing at the newest (0600).
func newClientCertificateManager(ctx context.Context, certConfig, clientConfig *rest.Config, certDir, nodeName string) (certificate.Manager, error) {
	newClientsetFn := func(current *tls.Certificate) (kubernetes.Interface, error) {
		c := certConfig
		if current != nil {
			c = clientConfig
		}
		return kubernetes.NewForConfig(c)
	}
	store, err := newClientStore(certDir, clientConfig.CertFile, clientConfig.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("failed to initialize client certificate store: %v", err)
	}
	m, err := certificate.NewManager(&certificate.Config{
		ClientsetFn: newClientsetFn,
		Template: &x509.CertificateRequest{
			Subject: pkix.Name{CommonName: "system:node:" + nodeName, Organization: []string{"system:nodes"}},
		},
		SignerName: certificatesv1.KubeAPIServerClientKubeletSignerName,
		GetUsages:  certificate.DefaultKubeletClientGetUsages,
		// A kubeconfig with embedded certificate data (kubeadm's on control
		// plane nodes) seeds the manager and is rotated out at once.
		BootstrapCertificatePEM: clientConfig.CertData,
		BootstrapKeyPEM:         clientConfig.KeyData,
		CertificateStore:        store,
		CertificateRenewFailure: clientRenewErrors,
		Ctx:                     &ctx,
	})
	if err != nil {
		return nil, fmt.Errorf("failed to initialize client certificate manager: %v", err)
	}
	registerClient(m)
	return m, nil
}
