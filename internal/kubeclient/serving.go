package kubeclient

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"net"
	"os"
	"sort"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/certificate"
	netutils "k8s.io/utils/net"

	"github.com/nodelet/nodelet/internal/config"
)

// NewServingCertificateManager is the kubelet's
// NewKubeletServerCertificateManager (pkg/kubelet/certificate/kubelet.go):
// the serving certificate of the kubelet API from kubernetes.io/kubelet-serving
// CSRs for system:node:<name> in system:nodes, with the node's addresses as
// SANs (getAddresses: the kubelet's last observed node addresses), kept in
// <stateDir>/pki as kubelet-server-<time>.pem with kubelet-server-current.pem
// pointing at the newest, and renewed at 70-90% of its lifetime. No
// certificate is requested until getAddresses gives an IP. The caller
// Starts it; it stops with ctx.
func NewServingCertificateManager(ctx context.Context, client kubernetes.Interface, cfg *config.Config, getAddresses func() []corev1.NodeAddress) (certificate.Manager, error) {
	certDir := CertDir(cfg.Node.StateDir)
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		return nil, fmt.Errorf("certificate directory %s: %w", certDir, err)
	}
	store, err := certificate.NewFileStore(servingPairPrefix, certDir, certDir, cfg.Server.TLSCertFile, cfg.Server.TLSPrivateKeyFile)
	if err != nil {
		return nil, fmt.Errorf("failed to initialize server certificate store: %v", err)
	}
	m, err := certificate.NewManager(&certificate.Config{
		ClientsetFn:             func(*tls.Certificate) (kubernetes.Interface, error) { return client, nil },
		GetTemplate:             newGetTemplateFn(cfg.Node.Name, getAddresses),
		SignerName:              certificatesv1.KubeletServingSignerName,
		GetUsages:               certificate.DefaultKubeletServingGetUsages,
		CertificateStore:        store,
		CertificateRotation:     servingRotationAge,
		CertificateRenewFailure: servingRenewErrors,
		Ctx:                     &ctx,
	})
	if err != nil {
		return nil, fmt.Errorf("failed to initialize server certificate manager: %v", err)
	}
	registerServing(m)
	return m, nil
}

// newGetTemplateFn is the kubelet's: no template (so no CSR) before the
// node has an IP address (AllowDNSOnlyNodeCSR is off by default).
func newGetTemplateFn(nodeName string, getAddresses func() []corev1.NodeAddress) func() *x509.CertificateRequest {
	return func() *x509.CertificateRequest {
		hostnames, ips := addressesToHostnamesAndIPs(getAddresses())
		if len(ips) == 0 {
			return nil
		}
		return &x509.CertificateRequest{
			Subject:     pkix.Name{CommonName: "system:node:" + nodeName, Organization: []string{"system:nodes"}},
			DNSNames:    hostnames,
			IPAddresses: ips,
		}
	}
}

// addressesToHostnamesAndIPs is the kubelet's: Hostname and *DNS addresses
// as DNS names (a Hostname that is an IP as an IP), *IP addresses as IPs,
// deduplicated and sorted.
func addressesToHostnamesAndIPs(addresses []corev1.NodeAddress) (dnsNames []string, ips []net.IP) {
	seenDNSNames := map[string]bool{}
	seenIPs := map[string]bool{}
	for _, address := range addresses {
		if len(address.Address) == 0 {
			continue
		}
		switch address.Type {
		case corev1.NodeHostName:
			if ip := netutils.ParseIPSloppy(address.Address); ip != nil {
				seenIPs[address.Address] = true
			} else {
				seenDNSNames[address.Address] = true
			}
		case corev1.NodeExternalIP, corev1.NodeInternalIP:
			if ip := netutils.ParseIPSloppy(address.Address); ip != nil {
				seenIPs[address.Address] = true
			}
		case corev1.NodeExternalDNS, corev1.NodeInternalDNS:
			seenDNSNames[address.Address] = true
		}
	}
	for dnsName := range seenDNSNames {
		dnsNames = append(dnsNames, dnsName)
	}
	for ip := range seenIPs {
		ips = append(ips, netutils.ParseIPSloppy(ip))
	}
	sort.Strings(dnsNames)
	sort.Slice(ips, func(i, j int) bool { return ips[i].String() < ips[j].String() })
	return dnsNames, ips
}
