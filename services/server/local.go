package server

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	x509request "k8s.io/apiserver/pkg/authentication/request/x509"

	"github.com/nodelet/nodelet/services/server/client"
)

// LocalAdmin is the user of the node-local client certificate that `nodelet
// logs` and `nodelet exec` use, so a node without a control plane is
// debuggable too. Only root can read its key (the state dir's pki, 0600).
// The identity is accepted only from that certificate (localAdmin).
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

// localAdmin authenticates the node-local admin: a client certificate
// that the node-local CA signed, for LocalAdmin, and nothing else. It is
// the only way to the identity that skips authorization (withAuth): the
// kubelet has no such door, and a name is no proof, since a certificate of
// the cluster's client CA or a token's review can carry any name.
type localAdmin struct {
	x509 authenticator.Request
}

func newLocalAdmin(caPEM []byte) (*localAdmin, error) {
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("node-local CA: no certificate in " + string(caPEM[:min(len(caPEM), 40)]))
	}
	opts := x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	return &localAdmin{x509: x509request.New(opts, x509request.CommonNameUserConversion)}, nil
}

// is tells whether r comes with the node-local admin's certificate.
func (a *localAdmin) is(r *http.Request) bool {
	if a == nil || r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return false
	}
	resp, ok, err := a.x509.AuthenticateRequest(r)
	return err == nil && ok && resp.User.GetName() == LocalAdmin
}
