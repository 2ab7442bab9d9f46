package kubeclient

import (
	"crypto/tls"
	"io/fs"
	"os"
	"path/filepath"

	"k8s.io/client-go/util/certificate"
)

// sharedStore is the node's client certificate store. Its pairs are
// written 0600, as the kubelet's; in a shared certificate directory — the
// setgid pki the units and `nodelet up` with componentUsers make, group
// nodelet-api (internal/component) — each new pair is made readable by
// that group, so the runtime (root without CAP_DAC_READ_SEARCH) and the
// other daemons that talk to the API keep using the node's identity after
// status renews it. Elsewhere nothing changes.
type sharedStore struct {
	certificate.FileStore
	dir string
}

func newClientStore(certDir, certFile, keyFile string) (certificate.FileStore, error) {
	s, err := certificate.NewFileStore(clientPairPrefix, certDir, certDir, certFile, keyFile)
	if err != nil {
		return nil, err
	}
	return sharedStore{FileStore: s, dir: certDir}, nil
}

// Update stores the pair and, in a shared directory, opens it to the group.
func (s sharedStore) Update(cert, key []byte) (*tls.Certificate, error) {
	c, err := s.FileStore.Update(cert, key)
	if err != nil {
		return c, err
	}
	st, err := os.Stat(s.dir)
	if err != nil || st.Mode()&fs.ModeSetgid == 0 {
		return c, nil
	}
	if p, err := filepath.EvalSymlinks(s.CurrentPath()); err == nil {
		_ = os.Chmod(p, 0o640)
	}
	return c, nil
}
