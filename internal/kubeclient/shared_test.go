package kubeclient

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	certutil "k8s.io/client-go/util/cert"
)

// TestSharedStoreOpensPairsToTheGroup: in a setgid certificate directory
// (the shared pki) a renewed pair is group-readable, elsewhere 0600 as
// the kubelet's.
func TestSharedStoreOpensPairsToTheGroup(t *testing.T) {
	cert, key, err := certutil.GenerateSelfSignedCertKey("node", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		setgid bool
		want   fs.FileMode
	}{{"shared", true, 0o640}, {"private", false, 0o600}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.setgid {
				if err := os.Chmod(dir, 0o770|fs.ModeSetgid); err != nil {
					t.Fatal(err)
				}
			}
			s, err := newClientStore(dir, "", "")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Update(cert, key); err != nil {
				t.Fatal(err)
			}
			p, err := filepath.EvalSymlinks(filepath.Join(dir, clientPairPrefix+"-current.pem"))
			if err != nil {
				t.Fatal(err)
			}
			st, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			if st.Mode().Perm() != tc.want {
				t.Errorf("pair %s: mode %v, want %v", p, st.Mode().Perm(), tc.want)
			}
		})
	}
}
