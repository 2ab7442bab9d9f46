// Package supervisor is `nodelet up`: it starts nodelet-bus, waits until it
// is ready, starts the daemons in the order the declaration (internal/component) gives,
// restarts any that exits (alone, with back-off), and stops them in reverse
// order. Readiness comes over the sd_notify protocol, exactly as under
// systemd: each child gets its own NOTIFY_SOCKET.
package supervisor

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/component"
	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/internal/daemon"
)

// Options configure a supervisor.
type Options struct {
	Config *config.Config
	// ConfigPath is passed to every child as --config.
	ConfigPath string
	// BinDir holds the nodelet-* binaries.
	BinDir string
	// Out receives the one-line-per-change log.
	Out io.Writer
	// ChildOutput receives the children's stderr and stdout (default Out).
	ChildOutput io.Writer
	// ExtraEnv is added to every child's environment.
	ExtraEnv []string
	// StopTimeout before a child that ignores SIGTERM is killed. Default 15s.
	StopTimeout time.Duration
	// BeforeStart and AfterStop run around the daemons (the private
	// containerd of runtime.manageContainerd).
	BeforeStart func(ctx context.Context) error
	AfterStop   func()
}

// Supervisor runs the node's processes.
type Supervisor struct {
	o     Options
	order []component.Component
	procs map[string]*proc
	// private is a directory of this run only root can list: the
	// readiness sockets and each child's copy of its own bus seed.
	private string
	// ids are the users the children run as (supervisor.componentUsers);
	// a component not in it runs as the supervisor's user.
	ids map[string]*identity

	mu      sync.Mutex
	outMu   sync.Mutex
	stateMu sync.Mutex
}

// ProcState is one process as the supervisor sees it; the supervisor
// writes them all to <stateDir>/run/supervisor.json on every change.
type ProcState struct {
	Name     string    `json:"name"`
	PID      int       `json:"pid"`
	State    string    `json:"state"` // starting, ready, backoff, stopped
	Restarts int       `json:"restarts"`
	Since    time.Time `json:"since"`
}

type proc struct {
	comp     component.Component
	mu       sync.Mutex
	st       ProcState
	ready    chan struct{}
	cancel   context.CancelFunc
	done     chan struct{}
	current  *exec.Cmd
	notifyLn *net.UnixConn
	notify   string // the socket's path, the child's NOTIFY_SOCKET
}

// New prepares a supervisor for the components of component.StartOrder.
func New(o Options) (*Supervisor, error) {
	if o.Out == nil {
		o.Out = os.Stderr
	}
	if o.ChildOutput == nil {
		o.ChildOutput = o.Out
	}
	if o.StopTimeout == 0 {
		o.StopTimeout = 15 * time.Second
	}
	s := &Supervisor{o: o, order: component.StartOrder(), procs: map[string]*proc{}}
	ids, err := identities(s.order, o.Config.Supervisor.ComponentUsers)
	if err != nil {
		return nil, err
	}
	s.ids = ids
	for _, c := range s.order {
		bin := filepath.Join(o.BinDir, c.Binary())
		if _, err := os.Stat(bin); err != nil {
			return nil, fmt.Errorf("supervisor: %s not found in %s (supervisor.binDir; run scripts/setup.sh to build it)", c.Binary(), o.BinDir)
		}
		s.procs[c.Name] = &proc{comp: c, st: ProcState{Name: c.Name, State: "stopped"}}
	}
	return s, nil
}

// StatePath is where the supervisor publishes its view of the processes.
func StatePath(stateDir string) string { return filepath.Join(stateDir, "run", "supervisor.json") }

// ReadState reads the supervisor's state file.
func ReadState(stateDir string) ([]ProcState, error) {
	b, err := os.ReadFile(StatePath(stateDir))
	if err != nil {
		return nil, err
	}
	var st []ProcState
	return st, json.Unmarshal(b, &st)
}

func (s *Supervisor) logf(format string, args ...any) {
	s.outMu.Lock()
	defer s.outMu.Unlock()
	fmt.Fprintf(s.o.Out, "%s nodelet up: %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

func (s *Supervisor) writeState() {
	s.stateMu.Lock()
	defer s.stateMu.Unlock()
	var all []ProcState
	for _, c := range s.order {
		p := s.procs[c.Name]
		p.mu.Lock()
		all = append(all, p.st)
		p.mu.Unlock()
	}
	b, _ := json.MarshalIndent(all, "", "  ")
	path := StatePath(s.o.Config.Node.StateDir)
	_ = os.MkdirAll(filepath.Dir(path), 0o755)
	tmp := path + ".tmp"
	if os.WriteFile(tmp, b, 0o644) == nil {
		_ = os.Rename(tmp, path)
	}
}

func (s *Supervisor) set(p *proc, f func(st *ProcState)) {
	p.mu.Lock()
	f(&p.st)
	p.st.Since = time.Now().UTC()
	p.mu.Unlock()
	s.writeState()
}

// Run starts everything and blocks until ctx is done, then stops everything
// in reverse order. Pods keep running: they belong to the runtime's shims.
func (s *Supervisor) Run(ctx context.Context) error {
	if s.o.BeforeStart != nil {
		if err := s.o.BeforeStart(ctx); err != nil {
			return err
		}
	}
	defer func() {
		if s.o.AfterStop != nil {
			s.o.AfterStop()
		}
	}()
	names := make([]string, len(s.order))
	for i, c := range s.order {
		names[i] = c.Name
	}
	// One supervisor per state dir: a second would start a second set of
	// daemons, each of which would find its lock taken.
	lock, err := daemon.Lock(s.o.Config.Node.StateDir, bus.Supervisor)
	if err != nil {
		return err
	}
	defer lock.Close()
	// The readiness sockets live in a private directory: an abstract
	// socket name could be bound first by any local process (hostNetwork
	// pods included) and a READY=1 forged.
	notifyDir, err := os.MkdirTemp("", "nodelet-notify-")
	if err != nil {
		return fmt.Errorf("supervisor: notify dir: %w", err)
	}
	defer os.RemoveAll(notifyDir)
	s.private = notifyDir
	if len(s.ids) > 0 {
		// Children of their own users reach their socket and seed in it,
		// but cannot list it.
		if err := os.Chmod(notifyDir, 0o711); err != nil {
			return fmt.Errorf("supervisor: notify dir: %w", err)
		}
		var own []string
		for _, c := range s.order {
			if id := s.ids[c.Name]; id != nil {
				own = append(own, c.Name+" as "+id.user)
			}
		}
		s.logf("running %s (supervisor.componentUsers)", strings.Join(own, ", "))
	}
	s.logf("starting %s", strings.Join(names, " → "))
	for _, c := range s.order {
		p := s.procs[c.Name]
		pctx, cancel := context.WithCancel(context.Background())
		p.cancel = cancel
		p.done = make(chan struct{})
		p.ready = make(chan struct{})
		p.notify = filepath.Join(notifyDir, c.Name)
		ln, err := listenNotify(c.Name, p.notify)
		if err != nil {
			s.stopAll()
			return err
		}
		p.notifyLn = ln
		if err := handOver(p.notify, s.ids[c.Name]); err != nil {
			s.stopAll()
			return fmt.Errorf("supervisor: notify socket for %s: %w", c.Name, err)
		}
		go s.supervise(pctx, p)
		select {
		case <-p.ready:
		case <-time.After(s.o.Config.Supervisor.ReadyTimeout):
			s.logf("%s not ready after %s; starting the rest anyway", c.Name, s.o.Config.Supervisor.ReadyTimeout)
		case <-ctx.Done():
			s.stopAll()
			return nil
		}
	}
	s.logf("all %d running", len(s.order))
	<-ctx.Done()
	s.stopAll()
	return nil
}

// stopAll stops the processes in reverse start order.
func (s *Supervisor) stopAll() {
	for i := len(s.order) - 1; i >= 0; i-- {
		p := s.procs[s.order[i].Name]
		if p.cancel == nil {
			continue
		}
		p.cancel()
		<-p.done
		if p.notifyLn != nil {
			_ = p.notifyLn.Close()
		}
	}
	s.logf("stopped")
}

// supervise runs one process until ctx is cancelled, restarting it with
// back-off whenever it exits.
func (s *Supervisor) supervise(ctx context.Context, p *proc) {
	defer close(p.done)
	cfg := s.o.Config.Supervisor
	backoff := cfg.RestartBackoff
	readySignalled := false
	notify := make(chan notification, 16)
	go readNotify(p.notifyLn, notify)
	for attempt := 0; ; attempt++ {
		cmd := exec.Command(filepath.Join(s.o.BinDir, p.comp.Binary()), "--config", s.o.ConfigPath)
		cmd.Stdout = s.o.ChildOutput
		cmd.Stderr = s.o.ChildOutput
		cmd.Env = append(os.Environ(), s.o.ExtraEnv...)
		cmd.Env = append(cmd.Env, "NOTIFY_SOCKET="+p.notify)
		id := s.ids[p.comp.Name]
		if err := prepareDirs(s.o.Config.Node.StateDir, p.comp, id); err != nil {
			s.logf("%s: its parts of the state dir not handed to %s: %v", p.comp.Name, id.user, err)
		}
		if p.comp.Name != bus.BusAdmin {
			if dir, err := s.ownSeed(p.comp.Name); err != nil {
				s.logf("%s: its own seed not handed over (it reads the bus's directory): %v", p.comp.Name, err)
			} else {
				cmd.Env = append(cmd.Env, "CREDENTIALS_DIRECTORY="+dir)
			}
		}
		// Own process group: a terminal's Ctrl-C reaches only the
		// supervisor, which stops the children in order. Pdeathsig: a
		// supervisor killed outright does not leave daemons behind.
		// Credential: its own user, as under the units (nil: ours).
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM, Credential: id.credential()}
		started := time.Now()
		if err := cmd.Start(); err != nil {
			s.logf("%s failed to start: %v", p.comp.Name, err)
		} else {
			p.mu.Lock()
			p.current = cmd
			p.mu.Unlock()
			s.set(p, func(st *ProcState) {
				st.PID, st.State = cmd.Process.Pid, "starting"
				if attempt > 0 {
					st.Restarts++
				}
			})
			s.logf("%s started pid=%d", p.comp.Name, cmd.Process.Pid)
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
		running:
			for {
				select {
				case msg := <-notify:
					// Only the current process speaks for itself (systemd's
					// NotifyAccess=main): a datagram a crashed predecessor
					// left behind is not the new one's READY=1.
					if msg.pid == cmd.Process.Pid && hasField(msg.text, "READY=1") {
						s.set(p, func(st *ProcState) { st.State = "ready" })
						s.logf("%s ready pid=%d", p.comp.Name, cmd.Process.Pid)
						if !readySignalled {
							readySignalled = true
							close(p.ready)
						}
					}
				case err := <-exited:
					s.logf("%s exited pid=%d after %s: %s", p.comp.Name, cmd.Process.Pid, time.Since(started).Round(time.Millisecond), exitText(err))
					break running
				case <-ctx.Done():
					s.terminate(p, cmd, exited)
					s.set(p, func(st *ProcState) { st.PID, st.State = 0, "stopped" })
					return
				}
			}
		}
		if ctx.Err() != nil {
			s.set(p, func(st *ProcState) { st.PID, st.State = 0, "stopped" })
			return
		}
		if time.Since(started) >= cfg.RestartBackoffReset {
			backoff = cfg.RestartBackoff
		}
		s.set(p, func(st *ProcState) { st.PID, st.State = 0, "backoff" })
		s.logf("%s restarting in %s", p.comp.Name, backoff)
		select {
		case <-ctx.Done():
			s.set(p, func(st *ProcState) { st.State = "stopped" })
			return
		case <-time.After(backoff):
		}
		backoff *= 2
		if backoff > cfg.RestartBackoffMax {
			backoff = cfg.RestartBackoffMax
		}
	}
}

// terminate sends SIGTERM and waits, then SIGKILL after StopTimeout.
func (s *Supervisor) terminate(p *proc, cmd *exec.Cmd, exited <-chan error) {
	s.logf("%s stopping pid=%d", p.comp.Name, cmd.Process.Pid)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		s.logf("%s stopped: %s", p.comp.Name, exitText(err))
	case <-time.After(s.o.StopTimeout):
		_ = cmd.Process.Kill()
		<-exited
		s.logf("%s killed after %s", p.comp.Name, s.o.StopTimeout)
	}
}

func exitText(err error) string {
	if err == nil {
		return "exit 0"
	}
	if ee, ok := err.(*exec.ExitError); ok {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return "killed by " + ws.Signal().String()
		}
		return fmt.Sprintf("exit %d", ee.ExitCode())
	}
	return err.Error()
}

// ownSeed copies component's bus seed, and no other, into a private
// directory for the child, handed over as systemd hands a unit its
// LoadCredential= ($CREDENTIALS_DIRECTORY/bus-seed), which the daemons read
// before the bus's own directory. A child of its own user owns the copy
// (0400, in its 0700 directory) and cannot reach the bus's directory.
func (s *Supervisor) ownSeed(component string) (string, error) {
	seed, err := os.ReadFile(bus.CredentialPath(s.o.Config.Node.StateDir, component))
	if err != nil {
		return "", err
	}
	dir := filepath.Join(s.private, component+".credentials")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	path := filepath.Join(dir, bus.SystemdCredential)
	tmp := path + ".tmp"
	_ = os.Remove(tmp)
	if err := os.WriteFile(tmp, seed, 0o400); err != nil {
		return "", err
	}
	id := s.ids[component]
	if err := handOver(tmp, id); err != nil {
		return "", err
	}
	if err := handOver(dir, id); err != nil {
		return "", err
	}
	return dir, os.Rename(tmp, path)
}

// listenNotify opens the unixgram socket at path a child notifies on, with
// SO_PASSCRED so that every datagram carries its sender's PID.
func listenNotify(component, path string) (*net.UnixConn, error) {
	addr := &net.UnixAddr{Name: path, Net: "unixgram"}
	ln, err := net.ListenUnixgram("unixgram", addr)
	if err != nil {
		return nil, fmt.Errorf("notify socket for %s: %w", component, err)
	}
	raw, err := ln.SyscallConn()
	if err == nil {
		cerr := raw.Control(func(fd uintptr) {
			err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_PASSCRED, 1)
		})
		if cerr != nil {
			err = cerr
		}
	}
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("notify socket for %s: SO_PASSCRED: %w", component, err)
	}
	return ln, nil
}

// notification is one sd_notify datagram and the PID that sent it.
type notification struct {
	pid  int
	text string
}

func readNotify(ln *net.UnixConn, out chan<- notification) {
	buf := make([]byte, 4096)
	oob := make([]byte, syscall.CmsgSpace(syscall.SizeofUcred))
	for {
		n, oobn, _, _, err := ln.ReadMsgUnix(buf, oob)
		if err != nil {
			return
		}
		msg := notification{text: string(buf[:n])}
		if cmsgs, err := syscall.ParseSocketControlMessage(oob[:oobn]); err == nil {
			for i := range cmsgs {
				if cred, err := syscall.ParseUnixCredentials(&cmsgs[i]); err == nil {
					msg.pid = int(cred.Pid)
				}
			}
		}
		select {
		case out <- msg:
		default:
		}
	}
}

func hasField(msg, field string) bool {
	for _, l := range strings.Split(msg, "\n") {
		if l == field {
			return true
		}
	}
	return false
}
