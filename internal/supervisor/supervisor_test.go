package supervisor_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/component"
	"github.com/nodelet/nodelet/internal/supervisor"
	"github.com/nodelet/nodelet/internal/testenv"
	"github.com/nodelet/nodelet/internal/tools/tap"
	"github.com/nodelet/nodelet/schemas"
)

var (
	binDir string
	ctrd   *testenv.Containerd
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "nodelet-supervisor-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if err := testenv.BuildBinaries(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	binDir = dir
	ctrd, err = testenv.StartContainerd(testenv.ContainerdOptions{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "containerd:", err)
		return 1
	}
	defer ctrd.Stop()
	return m.Run()
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// node is one `nodelet up` under test.
type node struct {
	t        *testing.T
	stateDir string
	config   string
	cmd      *exec.Cmd
	out      *testenv.Buffer
	exited   chan error
}

func startNode(t *testing.T) *node { return startNodeWith(t, "") }

// startNodeWith starts a node whose config's supervisor section has the
// extra lines.
func startNodeWith(t *testing.T, supervisorExtra string) *node {
	t.Helper()
	testenv.RequiresRoot(t)
	dir := t.TempDir()
	// Daemons of their own users (supervisor.componentUsers) reach the
	// config and the state dir through the test's directories.
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	n := &node{t: t, stateDir: filepath.Join(dir, "state"), config: filepath.Join(dir, "nodelet.yaml"), out: &testenv.Buffer{}}
	cfg := fmt.Sprintf(`node:
  name: supervisor-test
  stateDir: %s
  podLogsDir: %s
bus:
  listen: 127.0.0.1:%d
  heartbeatInterval: 500ms
runtime:
  endpoint: %s
  cniConfDir: %s
  manageCNIConfig: false
server:
  address: 127.0.0.1
  port: %d
  readOnlyPort: %d
supervisor:
  restartBackoff: 1s
  restartBackoffMax: 4s
%s`, n.stateDir, filepath.Join(dir, "logs"), freePort(t), ctrd.Endpoint, ctrd.CNIConfDir, freePort(t), freePort(t), supervisorExtra)
	if err := os.WriteFile(n.config, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	n.cmd = exec.Command(filepath.Join(binDir, "nodelet"), "up", "--config", n.config)
	n.cmd.Stdout, n.cmd.Stderr = n.out, n.out
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	n.exited = make(chan error, 1)
	go func() { n.exited <- n.cmd.Wait() }()
	t.Cleanup(func() {
		if n.cmd.ProcessState == nil {
			_ = n.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-n.exited:
			case <-time.After(60 * time.Second):
				_ = n.cmd.Process.Kill()
			}
		}
		if t.Failed() {
			t.Logf("nodelet up output:\n%s", n.out.String())
		}
	})
	return n
}

func (n *node) states() map[string]supervisor.ProcState {
	st, err := supervisor.ReadState(n.stateDir)
	if err != nil {
		return nil
	}
	m := map[string]supervisor.ProcState{}
	for _, s := range st {
		m[s.Name] = s
	}
	return m
}

// waitAll waits until every process is ready and returns their pids.
func (n *node) waitAll(what string, ok func(map[string]supervisor.ProcState) bool) map[string]supervisor.ProcState {
	n.t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		st := n.states()
		ready := len(st) == len(component.Declared.Processes())
		for _, s := range st {
			ready = ready && s.State == "ready" && s.PID > 0
		}
		if ready && (ok == nil || ok(st)) {
			return st
		}
		select {
		case err := <-n.exited:
			n.t.Fatalf("nodelet up exited: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
	n.t.Fatalf("timed out waiting for %s; state: %+v", what, n.states())
	return nil
}

func (n *node) connect(component string) *bus.Conn {
	n.t.Helper()
	cfg := strings.Split(readFile(n.t, n.config), "\n")
	var listen string
	for i, l := range cfg {
		if strings.TrimSpace(l) == "bus:" {
			listen = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(cfg[i+1]), "listen:"))
		}
	}
	c, err := bus.Connect(bus.ConnectOptions{URL: bus.URLFor(listen), Component: component, StateDir: n.stateDir})
	if err != nil {
		n.t.Fatal(err)
	}
	n.t.Cleanup(c.NC.Close)
	return c
}

func readFile(t *testing.T, p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// heartbeatsAfter waits until every daemon has sent a heartbeat after since.
func heartbeatsAfter(t *testing.T, c *bus.Conn, since time.Time, pids map[string]supervisor.ProcState) {
	t.Helper()
	seen := map[string]int{}
	var mu sync.Mutex
	sub, err := c.NC.Subscribe(bus.SubjectHealthAll, func(m *nats.Msg) {
		_, hb, err := schemas.Decode[schemas.Heartbeat](m.Data)
		if err != nil {
			return
		}
		mu.Lock()
		seen[hb.Component] = hb.PID
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		mu.Lock()
		ok := len(seen) == len(bus.Daemons)
		for _, d := range bus.Daemons {
			ok = ok && seen[d] == pids[d].PID
		}
		mu.Unlock()
		if ok {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	t.Fatalf("heartbeats since %s: %v, want all of %v with pids %+v", since.Format(time.StampMilli), seen, bus.Daemons, pids)
}

// checkOwnSeeds: each daemon was handed its own bus seed and no other, in a
// directory only root can enter; the bus was handed none.
func checkOwnSeeds(t *testing.T, n *node, st map[string]supervisor.ProcState) {
	t.Helper()
	for name, p := range st {
		env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", p.PID))
		if err != nil {
			t.Fatal(err)
		}
		var dir string
		for _, kv := range strings.Split(string(env), "\x00") {
			if v, ok := strings.CutPrefix(kv, "CREDENTIALS_DIRECTORY="); ok {
				dir = v
			}
		}
		if name == bus.BusAdmin {
			if dir != "" {
				t.Errorf("the bus was handed a seed directory %s", dir)
			}
			continue
		}
		entries, err := os.ReadDir(dir)
		if err != nil || len(entries) != 1 || entries[0].Name() != bus.SystemdCredential {
			t.Fatalf("%s: seed directory %q: %v %v", name, dir, entries, err)
		}
		if fi, err := os.Stat(filepath.Dir(dir)); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: %s is not private: %v", name, filepath.Dir(dir), err)
		}
		got, _ := os.ReadFile(filepath.Join(dir, bus.SystemdCredential))
		want, _ := os.ReadFile(bus.CredentialPath(n.stateDir, name))
		if len(want) == 0 || !bytes.Equal(got, want) {
			t.Errorf("%s was not handed its own seed", name)
		}
	}
}

func TestUpStartsInOrderAndRestartsOnlyTheFailed(t *testing.T) {
	n := startNode(t)
	first := n.waitAll("all ready", nil)
	checkOwnSeeds(t, n, first)

	// Start order in the log follows the declaration.
	var started []string
	sc := bufio.NewScanner(strings.NewReader(n.out.String()))
	for sc.Scan() {
		if i := strings.Index(sc.Text(), "nodelet up: "); i >= 0 && strings.Contains(sc.Text(), " started pid=") {
			started = append(started, strings.Fields(sc.Text()[i+len("nodelet up: "):])[0])
		}
	}
	var want []string
	for _, c := range component.StartOrder() {
		want = append(want, c.Name)
	}
	if strings.Join(started, ",") != strings.Join(want, ",") {
		t.Fatalf("start order %v, want %v", started, want)
	}

	// SIGKILL one daemon: it comes back, nobody else restarts.
	victim := "admission"
	if err := syscall.Kill(first[victim].PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	after := n.waitAll("admission back", func(st map[string]supervisor.ProcState) bool {
		return st[victim].PID != first[victim].PID
	})
	if back := time.Since(killed); back > 15*time.Second {
		t.Errorf("admission took %s to come back (back-off 1s)", back)
	}
	for name, s := range after {
		if name != victim && s.PID != first[name].PID {
			t.Errorf("%s restarted (pid %d → %d) when only %s was killed", name, first[name].PID, s.PID, victim)
		}
	}
	if after[victim].Restarts != 1 {
		t.Errorf("restarts = %d", after[victim].Restarts)
	}

	// SIGKILL the bus: it is restarted, daemons reconnect without restarting.
	if err := syscall.Kill(after["bus"].PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	busKilled := time.Now()
	final := n.waitAll("bus back", func(st map[string]supervisor.ProcState) bool {
		return st["bus"].PID != after["bus"].PID
	})
	for name, s := range final {
		if name != "bus" && s.PID != after[name].PID {
			t.Errorf("%s restarted after the bus was killed", name)
		}
	}
	heartbeatsAfter(t, n.connect(bus.Tap), busKilled, final)

	// SIGTERM stops everything in reverse order, exit 0.
	if err := n.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-n.exited:
		if err != nil {
			t.Fatalf("nodelet up exit: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("nodelet up did not stop")
	}
	var stopped []string
	sc = bufio.NewScanner(strings.NewReader(n.out.String()))
	for sc.Scan() {
		if i := strings.Index(sc.Text(), "nodelet up: "); i >= 0 && strings.Contains(sc.Text(), " stopping pid=") {
			stopped = append(stopped, strings.Fields(sc.Text()[i+len("nodelet up: "):])[0])
		}
	}
	for i, j := 0, len(want)-1; i < j; i, j = i+1, j-1 {
		want[i], want[j] = want[j], want[i]
	}
	if strings.Join(stopped, ",") != strings.Join(want, ",") {
		t.Fatalf("stop order %v, want %v", stopped, want)
	}
	for name, s := range final {
		if syscall.Kill(s.PID, 0) == nil {
			t.Errorf("%s (pid %d) still runs after nodelet up stopped", name, s.PID)
		}
	}
}

func TestTapShowsEveryDaemonsHeartbeatAsJSON(t *testing.T) {
	n := startNode(t)
	n.waitAll("all ready", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "nodelet"), "tap", "--config", n.config, "--json", "nodelet.v1.health.>")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	seen := map[string]bool{}
	sc := bufio.NewScanner(stdout)
	for sc.Scan() && len(seen) < len(bus.Daemons) {
		var l tap.Line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("tap --json line is not JSON: %q: %v", sc.Text(), err)
		}
		if l.Schema != (schemas.Heartbeat{}).SchemaName() {
			t.Fatalf("unexpected schema %q in %q", l.Schema, sc.Text())
		}
		seen[l.Producer] = true
	}
	for _, d := range bus.Daemons {
		if !seen[d] {
			t.Errorf("tap showed no heartbeat of %s (saw %v)", d, seen)
		}
	}
}
