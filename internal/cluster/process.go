package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/nodelet/nodelet/internal/containerd"
)

// process is a child of the harness (a node agent, kube-proxy) with its
// output in a log file. It dies with the harness: Pdeathsig from the one
// locked thread, so a killed harness leaves no process behind.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	exited  chan struct{}
	waitErr error
}

func startProcess(name, logPath string, cmd *exec.Cmd) (*process, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child has its own copy
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := containerd.StartOnLockedThread(cmd); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, exited: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// stop sends SIGTERM, waits up to grace, then kills the process group.
func (p *process) stop(grace time.Duration) {
	if p == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(grace):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.exited
	}
}

// exitedErr is non-nil once the process has exited: what it said last.
func (p *process) exitedErr() error {
	select {
	case <-p.exited:
		return fmt.Errorf("%s exited (%v); last lines of %s:\n%s", p.name, p.waitErr, p.logPath, tail(p.logPath, 15))
	default:
		return nil
	}
}

// tail is the last n lines of the file at path.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// listensOnUnix tells whether process pid holds a listening unix socket
// bound to path: an entry of its network namespace's /proc/<pid>/net/unix
// with that path and the listening flag (__SO_ACCEPTCON), whose inode is
// one of the process's open files. Unlike the file at path, which another
// process may remove and bind again (and whose inode number the
// filesystem may reuse), this says that this process bound it.
func listensOnUnix(pid int, path string) (bool, error) {
	table, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/unix", pid))
	if err != nil {
		return false, err
	}
	const acceptCon = 0x10000
	inodes := map[string]bool{}
	for _, line := range strings.Split(string(table), "\n")[1:] {
		// Num RefCount Protocol Flags Type St Inode Path
		f := strings.Fields(line)
		if len(f) < 8 || f[7] != path {
			continue
		}
		var flags uint64
		if _, err := fmt.Sscanf(f[3], "%x", &flags); err == nil && flags&acceptCon != 0 {
			inodes["socket:["+f[6]+"]"] = true
		}
	}
	if len(inodes) == 0 {
		return false, nil
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return false, err
	}
	for _, fd := range fds {
		if target, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); err == nil && inodes[target] {
			return true, nil
		}
	}
	return false, nil
}
