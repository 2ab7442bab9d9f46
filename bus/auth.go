package bus

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
)

// InboxPrefix is the reply-subject prefix of component's connection; each
// component may subscribe only under its own.
func InboxPrefix(component string) string { return "_INBOX_" + component }

func streamOf(bucket string) string { return kvStreamNamePrefix + bucket }

func perms(pub, sub []string) *server.Permissions {
	return &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: pub},
		Subscribe: &server.SubjectPermission{Allow: sub},
	}
}

func dedupe(in []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range in {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	sort.Strings(out)
	return out
}

// CredentialsDir is where the bus keeps one NKey seed per component.
func CredentialsDir(stateDir string) string { return filepath.Join(stateDir, "credentials") }

// SystemdCredential is the name under which a systemd unit hands a daemon
// its own seed (LoadCredential=bus-seed:…).
const SystemdCredential = "bus-seed"

// SeedPath is where component's seed is read from: the copy systemd handed
// in ($CREDENTIALS_DIRECTORY/bus-seed) when there is one, as under the
// generated units, whose daemons cannot see the credentials directory;
// else the bus's file.
func SeedPath(stateDir, component string) string {
	if dir := os.Getenv("CREDENTIALS_DIRECTORY"); dir != "" {
		p := filepath.Join(dir, SystemdCredential)
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return CredentialPath(stateDir, component)
}

// CredentialPath is the seed file of component.
func CredentialPath(stateDir, component string) string {
	return filepath.Join(CredentialsDir(stateDir), component+".nk")
}

// EnsureCredentials creates a user NKey for every component that has none
// (directory 0700, files 0600, both owned by this user) and returns the
// public keys. Existing seeds are reused, so credentials survive bus
// restarts. The bus's own keys are not among them: they live in memory only.
func EnsureCredentials(stateDir string) (map[string]string, error) {
	dir := CredentialsDir(stateDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("credentials dir: %w", err)
	}
	if err := checkPrivateDir(dir); err != nil {
		return nil, err
	}
	pubs := map[string]string{}
	for _, c := range declared.clientComponents() {
		path := CredentialPath(stateDir, c)
		seed, err := readSecret(path)
		if errors.Is(err, fs.ErrNotExist) {
			kp, err := nkeys.CreateUser()
			if err != nil {
				return nil, err
			}
			if seed, err = kp.Seed(); err != nil {
				return nil, err
			}
			if err := writeSecret(path, seed); err != nil {
				return nil, fmt.Errorf("credential %s: %w", c, err)
			}
		} else if err != nil {
			return nil, fmt.Errorf("credential %s: %w", c, err)
		}
		kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(seed))))
		if err != nil {
			return nil, fmt.Errorf("credential %s (%s): %w", c, path, err)
		}
		pub, err := kp.PublicKey()
		if err != nil {
			return nil, err
		}
		pubs[c] = pub
	}
	return pubs, nil
}

// checkPrivateDir makes dir 0700 and fails unless this user owns it and it
// is a real directory (not a symlink someone planted). A bus running as
// root takes back a directory the bus's own user (nodelet-bus, under the
// systemd units) made, as systemd's StateDirectory= does the other way.
func checkPrivateDir(dir string) error {
	st, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("credentials dir: %w", err)
	}
	if !st.IsDir() {
		return fmt.Errorf("credentials dir %s: not a directory", dir)
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && os.Geteuid() == 0 && sys.Uid != 0 {
		err := filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			return os.Lchown(p, 0, 0)
		})
		if err != nil {
			return fmt.Errorf("credentials dir %s: taking it back from uid %d: %w", dir, sys.Uid, err)
		}
		if st, err = os.Lstat(dir); err != nil {
			return fmt.Errorf("credentials dir: %w", err)
		}
	}
	if err := checkOwner(dir, st); err != nil {
		return err
	}
	if st.Mode().Perm() != 0o700 {
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("credentials dir: %w", err)
		}
	}
	return nil
}

func checkOwner(path string, st fs.FileInfo) error {
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && int(sys.Uid) != os.Geteuid() {
		return fmt.Errorf("%s: owned by uid %d, not by this user (uid %d)", path, sys.Uid, os.Geteuid())
	}
	return nil
}

// readSecret reads a seed without following a symlink, and only from a
// file this user owns that nobody else can read.
func readSecret(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if err := checkOwner(path, st); err != nil {
		return nil, err
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%s: mode %v, want 0600", path, st.Mode().Perm())
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, err
	}
	if len(strings.TrimSpace(string(b))) == 0 {
		// A seed written before a power loss without reaching the disk:
		// treat it as absent so a new one is made (and the bus, which reads
		// them all at start, hands out the new public key).
		return nil, fmt.Errorf("%s is empty: %w", path, fs.ErrNotExist)
	}
	return b, nil
}

// writeSecret creates path exclusively (never through a symlink, never
// over a file someone else made), writes and fsyncs it, then fsyncs the
// directory so the name survives a power loss too.
func writeSecret(path string, b []byte) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
