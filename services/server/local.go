package server

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"time"

	"github.com/nodelet/nodelet/services/server/client"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// LocalAdmin is the user of the node-local client certificate that `nodelet
// logs` and `nodelet exec` use, so a node without a control plane is
// debuggable too. Only root can read its key (the state dir's pki, 0600).
const LocalAdmin = "nodelet:local-admin"

// ensureLocalClient makes the node-local CA and the local admin's client
// certificate once, and returns the CA's PEM.
func ensureLocalClient(stateDir string) ([]byte, error) {
	f := client.LocalFiles(stateDir)
	if ca, err := os.ReadFile(f.CA); err == nil {
		if _, err := os.Stat(f.Key); err == nil {
			return ca, nil
		}
	}
	if err := os.MkdirAll(filepath.Dir(f.CA), 0o700); err != nil {
		return nil, err
	}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(now.UnixNano()), Subject: pkix.Name{CommonName: "nodelet-local-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(now.UnixNano() + 1), Subject: pkix.Name{CommonName: LocalAdmin},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	// The CA's key is not kept: nothing else is ever signed with it.
	for _, w := range []struct {
		path string
		data []byte
		mode os.FileMode
	}{
		{f.Key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600},
		{f.Cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600},
		{f.CA, caPEM, 0o644},
	} {
		if err := os.WriteFile(w.path+".tmp", w.data, w.mode); err != nil {
			return nil, err
		}
		if err := os.Rename(w.path+".tmp", w.path); err != nil {
			return nil, err
		}
	}
	return caPEM, nil
}

// localAdminAllowed lets the node-local admin through whatever the mode
// (a standalone node has no API server to ask), and asks next otherwise.
type localAdminAllowed struct {
	next authorizer.UnconditionalAuthorizer
}

func (a localAdminAllowed) Authorize(ctx context.Context, attrs authorizer.Attributes) (authorizer.Decision, string, error) {
	if u := attrs.GetUser(); u != nil && u.GetName() == LocalAdmin {
		return authorizer.DecisionAllow, "node-local admin", nil
	}
	return a.next.Authorize(ctx, attrs)
}
