package server

import (
	"context"
	"crypto/tls"
	"errors"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/internal/kubeclient"
)

// setServingCertificate gives the kubelet API its certificate, as the
// kubelet's NewMainKubelet and InitializeTLS: with server.serverTLSBootstrap,
// the current one of a certificate manager that requests it from a
// kubernetes.io/kubelet-serving CSR and renews it; else the configured or
// self-signed one (tls.go).
func (s *Daemon) setServingCertificate(ctx context.Context, tlsCfg *tls.Config) error {
	if !s.cfg.Server.ServerTLSBootstrap {
		cert, err := servingCertificate(s.cfg)
		if err != nil {
			return err
		}
		tlsCfg.Certificates = []tls.Certificate{cert}
		return nil
	}
	if s.nodeKube == nil {
		return errors.New("server.serverTLSBootstrap needs the node's identity (node.kubeconfig)")
	}
	addrs := &observedAddresses{}
	go addrs.run(ctx, s)
	m, err := kubeclient.NewServingCertificateManager(ctx, s.nodeKube, s.cfg, addrs.get)
	if err != nil {
		return err
	}
	m.Start()
	s.log.Info("Serving certificate from kubernetes.io/kubelet-serving CSRs (server.serverTLSBootstrap)",
		"certificate", kubeclient.ServingCertPath(s.cfg.Node.StateDir))
	tlsCfg.GetCertificate = func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
		if c := m.Current(); c != nil {
			return c, nil
		}
		// The kubelet's words (pkg/kubelet/kubelet.go).
		return nil, errors.New("no serving certificate available for the kubelet")
	}
	return nil
}

// observedAddresses are the addresses of the node as registered
// (status.addresses of the Node object, which nodelet-status writes): the
// kubelet's getLastObservedNodeAddresses, the SANs of the serving CSR.
type observedAddresses struct {
	mu    sync.Mutex
	addrs []corev1.NodeAddress
}

// addressesPeriod is how often the Node's addresses are read again; every
// second until the node has registered some.
const addressesPeriod = 10 * time.Second

func (o *observedAddresses) run(ctx context.Context, s *Daemon) {
	for {
		node, err := s.nodeKube.CoreV1().Nodes().Get(ctx, s.nodeName, metav1.GetOptions{})
		if err != nil {
			s.log.Debug("Node addresses not read", "node", s.nodeName, "err", err)
		} else {
			o.mu.Lock()
			o.addrs = node.Status.Addresses
			o.mu.Unlock()
		}
		next := addressesPeriod
		if len(o.get()) == 0 {
			next = time.Second
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(next):
		}
	}
}

func (o *observedAddresses) get() []corev1.NodeAddress {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]corev1.NodeAddress(nil), o.addrs...)
}
