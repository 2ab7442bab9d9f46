package daemon

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// ErrAlreadyRunning is returned by Lock when another process holds the
// component's lock.
var ErrAlreadyRunning = errors.New("already running")

// RunDir holds one directory per component: <stateDir>/run.
func RunDir(stateDir string) string { return filepath.Join(stateDir, "run") }

// ComponentDir is component's own directory, <stateDir>/run/<component>:
// its lock file and its sockets. It belongs to the component's user (group
// nodelet, 0750) so that a daemon running as its own user can create its
// files there and nowhere else; the systemd units create it
// (StateDirectory=), `nodelet up` and root daemons make it themselves.
func ComponentDir(stateDir, component string) string {
	return filepath.Join(RunDir(stateDir), component)
}

// ComponentDirMode is the mode of ComponentDir: the group (nodelet) may
// reach the sockets in it, for status's metrics federation and server's
// read-only API.
const ComponentDirMode = 0o750

// MkdirRun makes component's directory if missing: the state dir and its
// run directory 0755 (every daemon's user passes through them), its own
// ComponentDirMode.
func MkdirRun(stateDir, component string) error {
	if err := os.MkdirAll(RunDir(stateDir), 0o755); err != nil {
		return err
	}
	if err := os.Mkdir(ComponentDir(stateDir, component), ComponentDirMode); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return nil
}

// LockPath is component's lock file.
func LockPath(stateDir, component string) string {
	return filepath.Join(ComponentDir(stateDir, component), component+".lock")
}

// Lock takes component's lock for the life of the process: one writer per
// bucket is a promise about processes too, and two copies of a daemon (one
// under systemd, one under `nodelet up`) would interleave their writes. The
// lock is an flock on <stateDir>/run/<component>/<component>.lock (0600, so
// no other user can open it, let alone hold it), so it goes with the
// process however it ends; the file holds the holder's pid for the message
// the second copy prints. The returned file must stay open.
func Lock(stateDir, component string) (*os.File, error) {
	dir := ComponentDir(stateDir, component)
	if err := MkdirRun(stateDir, component); err != nil {
		return nil, fmt.Errorf("lock dir %s: %w", dir, err)
	}
	path := LockPath(stateDir, component)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder := "another process"
		if b, rerr := os.ReadFile(path); rerr == nil {
			if pid, perr := strconv.Atoi(string(bytes.TrimSpace(b))); perr == nil {
				holder = fmt.Sprintf("pid %d", pid)
			}
		}
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("nodelet-%s %w as %s (it holds %s)", component, ErrAlreadyRunning, holder, path)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}
