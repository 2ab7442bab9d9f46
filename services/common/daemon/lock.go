package daemon

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// ErrAlreadyRunning is returned by Lock when another process holds the
// component's lock.
var ErrAlreadyRunning = errors.New("already running")

// RunDir is where the daemons keep their lock files: <stateDir>/run.
func RunDir(stateDir string) string { return filepath.Join(stateDir, "run") }

// LockPath is component's lock file.
func LockPath(stateDir, component string) string {
	return filepath.Join(RunDir(stateDir), component+".lock")
}

// Lock takes component's lock for the life of the process: one writer per
// bucket is a promise about processes too, and two copies of a daemon (one
// under systemd, one under `nodelet up`) would interleave their writes. The
// lock is an flock on <stateDir>/run/<component>.lock, so it goes with the
// process however it ends; the file holds the holder's pid for the message
// the second copy prints. The returned file must stay open.
func Lock(stateDir, component string) (*os.File, error) {
	dir := RunDir(stateDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("lock dir %s: %w", dir, err)
	}
	path := LockPath(stateDir, component)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o644)
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
