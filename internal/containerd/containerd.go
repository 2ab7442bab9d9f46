// Package containerd configures and runs a containerd for nodelet.
//
// Config renders the config.toml that nodelet needs, for containerd 1.6
// (version 2, Debian's package, the default) or, with Major 2, for
// containerd 2.x (version 3, built from its Go module by
// scripts/containerd2.sh): the CRI plugin with restrict_oom_score_adj (root lacks
// CAP_SYS_RESOURCE on the machines nodelet is tested on, and without it every
// sandbox fails with "can't get final child's PID from pipe"), cgroupfs unless
// SystemdCgroup, overlayfs, the node's CNI dirs and sandbox image, and no debug or
// metrics listener. Start runs /usr/bin/containerd with it and returns once
// the CRI socket answers; Stop ends it. The supervisor (`nodelet up` with
// runtime.manageContainerd) and the test environment both use them.
package containerd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Process is a running containerd started by Start.
type Process struct {
	cfg  Config
	cmd  *exec.Cmd
	done chan struct{}
	err  error // exit status, valid once done is closed
}

// Start writes cfg's config file, starts containerd with its output appended
// to logFile (<State>/containerd.log when empty) and returns once the CRI
// plugin answers Version and reports RuntimeReady. It refuses to start when
// something already answers on cfg.Socket. Cancelling ctx aborts the wait
// (and kills the process); it does not stop a containerd that started.
func Start(ctx context.Context, cfg Config, logFile string) (*Process, error) {
	cfg = cfg.WithDefaults()
	if logFile == "" {
		logFile = filepath.Join(cfg.State, "containerd.log")
	}
	if c, err := net.DialTimeout("unix", cfg.Socket, time.Second); err == nil {
		c.Close()
		return nil, fmt.Errorf("a containerd already answers on %s", cfg.Socket)
	}
	for _, d := range []string{cfg.Root, cfg.State, filepath.Dir(cfg.Socket),
		filepath.Dir(cfg.ConfigFile), filepath.Dir(logFile)} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			return nil, err
		}
	}
	if err := writeFile(cfg.ConfigFile, []byte(cfg.Render())); err != nil {
		return nil, err
	}
	log, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer log.Close()

	cmd := cfg.Namespaces.Command(cfg.Binary, "--config", cfg.ConfigFile)
	cmd.Stdout, cmd.Stderr = log, log
	// Its own process group: a ^C at the operator's terminal is for the
	// supervisor, which then stops containerd (or not) itself.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if cfg.KillWithParent {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	// Shims find runc and containerd-shim-runc-v2 through PATH.
	cmd.Env = withPath(os.Environ())
	start := cmd.Start
	if cfg.KillWithParent {
		start = func() error { return StartOnLockedThread(cmd) }
	}
	if err := start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", cfg.Binary, err)
	}
	p := &Process{cfg: cfg, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	if err := p.waitReady(ctx); err != nil {
		_ = cmd.Process.Kill()
		<-p.done
		return nil, fmt.Errorf("containerd did not become ready: %w%s", err, logTail(logFile))
	}
	return p, nil
}

// Config is the configuration p runs with (defaults applied).
func (p *Process) Config() Config { return p.cfg }

// Pid of the containerd process.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Done is closed when containerd has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Stop sends SIGTERM and waits for containerd to exit; after 10 seconds it
// sends SIGKILL. Running containers and their shims survive, as they must.
func (p *Process) Stop() error {
	select {
	case <-p.done:
		return nil
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		return errors.New("containerd ignored SIGTERM for 10s and was killed")
	}
}

func (p *Process) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	wait := func() error {
		select {
		case <-p.done:
			return fmt.Errorf("containerd exited: %v", p.err)
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			return nil
		}
	}
	// The socket first: a gRPC client that dials too early backs off for a second.
	for {
		if c, err := net.Dial("unix", p.cfg.Socket); err == nil {
			c.Close()
			break
		}
		if err := wait(); err != nil {
			return err
		}
	}
	conn, err := Dial(p.cfg.Socket)
	if err != nil {
		return err
	}
	defer conn.Close()
	var last error
	for {
		if last = RuntimeReady(ctx, conn); last == nil {
			return nil
		}
		// gRPC services are all registered before containerd serves: no CRI
		// service now means the CRI plugin failed to load (see the log).
		if status.Code(last) == codes.Unimplemented {
			return fmt.Errorf("the CRI plugin is not loaded: %w", last)
		}
		if err := wait(); err != nil {
			return fmt.Errorf("%w (last: %v)", err, last)
		}
	}
}

// Dial opens a gRPC client connection to the CRI socket at path (a path or
// a unix:// endpoint). The connection is lazy; calls carry their deadline.
func Dial(path string) (*grpc.ClientConn, error) {
	path = strings.TrimPrefix(path, "unix://")
	return grpc.NewClient("unix://"+path,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(16<<20)))
}

// RuntimeReady asks CRI for Version and Status and returns nil when the
// runtime reports RuntimeReady (network readiness is not required: the CNI
// config may come later).
func RuntimeReady(ctx context.Context, conn *grpc.ClientConn) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	rt := runtimeapi.NewRuntimeServiceClient(conn)
	if _, err := rt.Version(ctx, &runtimeapi.VersionRequest{}); err != nil {
		return err
	}
	st, err := rt.Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		return err
	}
	for _, c := range st.GetStatus().GetConditions() {
		if c.Type == runtimeapi.RuntimeReady {
			if c.Status {
				return nil
			}
			return fmt.Errorf("runtime not ready: %s: %s", c.Reason, c.Message)
		}
	}
	return errors.New("runtime reports no RuntimeReady condition")
}

// NetworkReady returns nil when CRI reports NetworkReady (a valid CNI config
// is loaded), else the reason.
func NetworkReady(ctx context.Context, conn *grpc.ClientConn) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	st, err := runtimeapi.NewRuntimeServiceClient(conn).Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		return err
	}
	for _, c := range st.GetStatus().GetConditions() {
		if c.Type == runtimeapi.NetworkReady {
			if c.Status {
				return nil
			}
			return fmt.Errorf("network not ready: %s: %s", c.Reason, c.Message)
		}
	}
	return errors.New("runtime reports no NetworkReady condition")
}

// withPath makes sure /usr/sbin (runc) and /usr/bin (shims) are on PATH.
func withPath(env []string) []string {
	const need = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	for i, e := range env {
		if v, ok := strings.CutPrefix(e, "PATH="); ok {
			env[i] = "PATH=" + v + ":" + need
			return env
		}
	}
	return append(env, "PATH="+need)
}

// logTail returns, for error messages, the errors in containerd's log (and
// the CRI plugins' failures to load, only warnings there), else its last lines.
func logTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil || len(b) == 0 {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	var important []string
	for _, l := range lines {
		if strings.Contains(l, "level=error") || strings.Contains(l, "level=fatal") || criLoadFailure(l) {
			important = append(important, l)
		}
	}
	what := " ends with"
	if len(important) > 0 {
		lines, what = important, " says"
	}
	if len(lines) > 8 {
		lines = lines[len(lines)-8:]
	}
	return "\n" + path + what + ":\n" + strings.Join(lines, "\n")
}

// criLoadFailure tells whether a log line says a CRI plugin failed to load:
// 1.6 names io.containerd.grpc.v1.cri in the message, 2.x logs
// `msg="failed to load plugin"` with the plugin's id (the root cause is on
// the line of io.containerd.cri.v1.images or .runtime).
func criLoadFailure(l string) bool {
	if strings.Contains(l, `failed to load plugin io.containerd.grpc.v1.cri"`) {
		return true
	}
	return strings.Contains(l, `msg="failed to load plugin"`) &&
		(strings.Contains(l, "id=io.containerd.grpc.v1.cri ") || strings.Contains(l, "id=io.containerd.cri.v1."))
}

// Pdeathsig fires when the thread that forked the child exits, not when the
// process does, and Go may retire threads. Children that must die with us are
// therefore forked from one goroutine locked to its thread for the life of
// the process.
var spawner struct {
	once sync.Once
	reqs chan spawnRequest
}

type spawnRequest struct {
	cmd  *exec.Cmd
	done chan error
}

// StartOnLockedThread starts cmd from that goroutine, so that its
// Pdeathsig holds for the life of this process (testenv's children use it
// too).
func StartOnLockedThread(cmd *exec.Cmd) error {
	spawner.once.Do(func() {
		spawner.reqs = make(chan spawnRequest)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread lives as long as the process
			for r := range spawner.reqs {
				r.done <- r.cmd.Start()
			}
		}()
	})
	done := make(chan error, 1)
	spawner.reqs <- spawnRequest{cmd: cmd, done: done}
	return <-done
}

// Binaries2 are the programs of a containerd 2.x build.
type Binaries2 struct {
	Dir        string // the directory they are in
	Containerd string
	Shim       string // containerd-shim-runc-v2
	Ctr        string
}

// Cached2 is where scripts/containerd2.sh builds containerd Version2:
// ${NODELET_CACHE:-$HOME/.cache/nodelet}/containerd-<Version2>/. The files
// may not be there (yet): Present tells.
func Cached2() Binaries2 {
	base := os.Getenv("NODELET_CACHE")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil || home == "" {
			home = os.TempDir()
		}
		base = filepath.Join(home, ".cache", "nodelet")
	}
	return binaries2(filepath.Join(base, "containerd-"+Version2))
}

func binaries2(dir string) Binaries2 {
	return Binaries2{
		Dir:        dir,
		Containerd: filepath.Join(dir, "containerd"),
		Shim:       filepath.Join(dir, "containerd-shim-runc-v2"),
		Ctr:        filepath.Join(dir, "ctr"),
	}
}

// Present tells whether every program of b is an executable file.
func (b Binaries2) Present() bool {
	for _, p := range []string{b.Containerd, b.Shim, b.Ctr} {
		if st, err := os.Stat(p); err != nil || !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0 {
			return false
		}
	}
	return true
}
