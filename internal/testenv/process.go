package testenv

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nodelet/nodelet/internal/containerd"
)

// Buffer collects a child process's output while the test reads it.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// BuildBinaries builds the given packages of the module (default every
// ./cmd/... binary) into dir, for tests that run nodelet as processes.
// When nodeletd is among them, the nodelet-<daemon> links to it are made
// too, as scripts/setup.sh makes them.
func BuildBinaries(dir string, pkgs ...string) error {
	if len(pkgs) == 0 {
		pkgs = []string{"./cmd/..."}
	}
	if err := goBuild(dir, nil, pkgs); err != nil {
		return err
	}
	nodeletd := filepath.Join(dir, "nodeletd")
	if _, err := os.Stat(nodeletd); err != nil {
		return nil
	}
	if out, err := exec.Command(nodeletd, "link", dir).CombinedOutput(); err != nil {
		return fmt.Errorf("nodeletd link %s: %w\n%s", dir, err, out)
	}
	return nil
}

// BuildStatic builds packages (paths relative to the module root, or
// testdata paths made absolute) into dir without cgo: binaries that run
// inside containers.
func BuildStatic(dir string, pkgs ...string) error {
	return goBuild(dir, []string{"CGO_ENABLED=0"}, pkgs)
}

// goBuild is every test binary build: one go build from the module root.
func goBuild(dir string, env, pkgs []string) error {
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	build := exec.Command("go", append([]string{"build", "-o", dir + "/"}, pkgs...)...)
	build.Dir = root
	build.Env = append(os.Environ(), env...)
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %v: %w\n%s", pkgs, err, out)
	}
	return nil
}

var daemons struct {
	once sync.Once
	dir  string
	err  error
}

// DaemonBinary is the executable of one nodelet daemon (nodelet-<name>, a
// link to nodeletd), built once per test process.
func DaemonBinary(name string) (string, error) {
	daemons.once.Do(func() {
		removeDeadDaemonDirs()
		daemons.dir = filepath.Join(os.TempDir(), fmt.Sprintf("%s%d", daemonDirPrefix, os.Getpid()))
		if daemons.err = os.MkdirAll(daemons.dir, 0o755); daemons.err == nil {
			daemons.err = BuildBinaries(daemons.dir, "./cmd/nodeletd")
		}
	})
	if daemons.err != nil {
		return "", daemons.err
	}
	p := filepath.Join(daemons.dir, "nodelet-"+name)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("no daemon %q in nodeletd: %w", name, err)
	}
	return p, nil
}

// daemonDirPrefix names DaemonBinary's directories: the prefix and the
// test process's PID.
const daemonDirPrefix = "nodelet-daemons-"

// removeDeadDaemonDirs removes the daemon directories of test processes
// that have ended (a test binary has no exit hook to do it itself).
func removeDeadDaemonDirs() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), daemonDirPrefix+"*"))
	for _, d := range dirs {
		pid, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(d), daemonDirPrefix))
		if err != nil {
			continue
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); os.IsNotExist(err) {
			_ = os.RemoveAll(d)
		}
	}
}

// MustDaemonBinary is DaemonBinary for a test: a failure to build fails it.
func MustDaemonBinary(t testing.TB, name string) string {
	t.Helper()
	p, err := DaemonBinary(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// proc is a child process whose output goes to a log file.
type proc struct {
	cmd     *exec.Cmd
	logPath string
	exited  chan struct{}
	waitErr error
}

// startProc starts a program with Pdeathsig SIGKILL, so it dies with the test
// binary even when the binary is killed before it can stop it.
func startProc(logPath, path string, args ...string) (*proc, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child has its own copy
	cmd := exec.Command(path, args...)
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := spawn(cmd); err != nil {
		return nil, fmt.Errorf("testenv: starting %s: %w", path, err)
	}
	p := &proc{cmd: cmd, logPath: logPath, exited: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// stop sends SIGTERM, waits up to 15 s, then sends SIGKILL and waits.
func (p *proc) stop() {
	if p == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		return
	case <-time.After(15 * time.Second):
	}
	_ = p.cmd.Process.Kill()
	<-p.exited
}

func (p *proc) logTail() string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 30 {
		lines = lines[len(lines)-30:]
	}
	return strings.Join(lines, "\n")
}

// spawn forks from the one locked thread (containerd.StartOnLockedThread):
// Pdeathsig fires when the forking thread exits, not the process.
func spawn(cmd *exec.Cmd) error { return containerd.StartOnLockedThread(cmd) }
