package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/images"
	"github.com/nodelet/nodelet/internal/supervisor"
)

// NodeName is the bench node's name; static pods are named <name>-bench.
const NodeName = "bench"

// runtimeEnv is the private containerd every contender shares.
type runtimeEnv struct {
	Endpoint, Address      string
	CNIConfDir, BridgeName string
	NetworkName, Subnet    string
	ContainerdPid          int
	shimPIDs               func() []int
}

// node is one `nodelet up` (the bus and every daemon) against the bench's
// containerd, with a static pod directory of its own.
type node struct {
	dir       string
	stateDir  string
	staticDir string
	stageDir  string
	config    string
	busListen string
	// readOnly is the node's read-only HTTP API (/pods), as the kubelet's.
	readOnly string
	logPath  string
	cmd      *exec.Cmd
	exited   chan error
	tap      *bus.Conn
}

// nodeConfig renders the node's configuration: everything on loopback or
// on the bench containerd's bridge, and the sandbox bound under test.
func nodeConfig(dir, busListen, readOnly, serverPort, binDir string, rt *runtimeEnv, bound int) string {
	_, readOnlyPort, _ := net.SplitHostPort(readOnly)
	return fmt.Sprintf(`node:
  name: %s
  stateDir: %s
  podLogsDir: %s
  podCIDR: %s
bus:
  listen: %s
runtime:
  endpoint: %s
  cniConfDir: %s
  cniBridgeName: %s
  cniNetworkName: %s
  cgroupRoot: %s
  maxConcurrentSandboxCreations: %d
sources:
  staticPodPath: %s
server:
  address: 127.0.0.1
  port: %s
  readOnlyPort: %s
supervisor:
  binDir: %s
`, NodeName, filepath.Join(dir, "state"), filepath.Join(dir, "logs"), rt.Subnet, busListen,
		rt.Endpoint, rt.CNIConfDir, rt.BridgeName, rt.NetworkName, CgroupRoot, bound,
		filepath.Join(dir, "manifests"), serverPort, readOnlyPort, binDir)
}

// manifest is the bench's static pod. The run label makes every round's
// pods new pods (static pod UIDs are a hash of the manifest).
func manifest(name, run string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
  namespace: %s
  labels:
    nodelet-bench/run: %q
spec:
  terminationGracePeriodSeconds: %d
  containers:
  - name: %s
    image: %s
    imagePullPolicy: Never
    command: [%s]
`, name, Namespace, run, graceSeconds, containerName, images.BusyboxImage, `"`+strings.Join(podCommand, `", "`)+`"`)
}

func freeLoopbackAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// startNode writes the config and starts `nodelet up`, and returns once the
// supervisor reports all eight processes ready and the tap is connected.
func startNode(ctx context.Context, dir, binDir string, rt *runtimeEnv, bound int) (_ *node, err error) {
	n := &node{dir: dir, stateDir: filepath.Join(dir, "state"), staticDir: filepath.Join(dir, "manifests"),
		stageDir: filepath.Join(dir, "staging"), config: filepath.Join(dir, "nodelet.yaml"), logPath: filepath.Join(dir, "nodelet.log")}
	for _, d := range []string{n.staticDir, n.stageDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	if n.busListen, err = freeLoopbackAddr(); err != nil {
		return nil, err
	}
	if n.readOnly, err = freeLoopbackAddr(); err != nil {
		return nil, err
	}
	server, err := freeLoopbackAddr()
	if err != nil {
		return nil, err
	}
	_, serverPort, _ := net.SplitHostPort(server)
	if err := os.WriteFile(n.config, []byte(nodeConfig(dir, n.busListen, n.readOnly, serverPort, binDir, rt, bound)), 0o644); err != nil {
		return nil, err
	}
	logf, err := os.Create(n.logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child holds its own descriptor
	n.cmd = exec.Command(filepath.Join(binDir, "nodelet"), "up", "--config", n.config)
	n.cmd.Stdout, n.cmd.Stderr = logf, logf
	// SIGTERM when the bench dies: the supervisor stops its daemons.
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := n.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start nodelet up: %w", err)
	}
	n.exited = make(chan error, 1)
	go func() { n.exited <- n.cmd.Wait() }()
	defer func() {
		if err != nil {
			n.stop()
		}
	}()
	if err := n.waitReady(ctx, 2*time.Minute); err != nil {
		return nil, err
	}
	return n, nil
}

// waitReady waits until the supervisor's state file says the bus and every
// daemon are ready, and connects the tap.
func (n *node) waitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last []supervisor.ProcState
	for time.Now().Before(deadline) {
		st, err := supervisor.ReadState(n.stateDir)
		if err == nil {
			last = st
		}
		ready := err == nil && len(st) == 1+len(bus.Daemons)
		for _, p := range st {
			ready = ready && p.PID != 0 && p.State == "ready"
		}
		if ready {
			c, err := bus.Connect(bus.ConnectOptions{URL: bus.URLFor(n.busListen), Component: bus.Tap,
				StateDir: n.stateDir, Log: quietLogger(), NoRetry: true})
			if err == nil {
				n.tap = c
				return nil
			}
		}
		select {
		case err := <-n.exited:
			n.exited <- err
			return fmt.Errorf("nodelet up exited (%v) before it was ready; see %s:\n%s", err, n.logPath, tailFile(n.logPath, 30))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("node not ready after %s: %+v; see %s", timeout, last, n.logPath)
}

// pids names the node's processes: the supervisor and, from its state file,
// the bus and the daemons.
func (n *node) pids() (map[string]int, error) {
	st, err := supervisor.ReadState(n.stateDir)
	if err != nil {
		return nil, err
	}
	out := map[string]int{"supervisor": n.cmd.Process.Pid}
	for _, p := range st {
		if p.PID == 0 {
			return nil, fmt.Errorf("%s is %s, not running", p.Name, p.State)
		}
		out[p.Name] = p.PID
	}
	return out, nil
}

// stage writes the manifests next to the static pod dir, so that publish
// only has to rename them.
func (n *node) stage(names []string, run string) error {
	for _, name := range names {
		if err := os.WriteFile(filepath.Join(n.stageDir, name+".yaml"), []byte(manifest(name, run)), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// publish renames the staged manifests into the static pod dir, one
// after the other (a rename takes microseconds): the burst.
func (n *node) publish(names []string) error {
	for _, name := range names {
		if err := os.Rename(filepath.Join(n.stageDir, name+".yaml"), filepath.Join(n.staticDir, name+".yaml")); err != nil {
			return err
		}
	}
	return nil
}

// remove deletes the manifests: the teardown.
func (n *node) remove(names []string) error {
	var errs []error
	for _, name := range names {
		errs = append(errs, os.Remove(filepath.Join(n.staticDir, name+".yaml")))
	}
	return errors.Join(errs...)
}

// stop stops the agent (pods would keep running; the bench has removed
// them before).
func (n *node) stop() {
	if n.tap != nil {
		n.tap.NC.Close()
	}
	if n.cmd == nil || n.cmd.Process == nil {
		return
	}
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-n.exited:
		n.exited <- err
	case <-time.After(90 * time.Second):
		_ = n.cmd.Process.Kill()
		n.exited <- <-n.exited
	}
}

func tailFile(path string, lines int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	l := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(l) > lines {
		l = l[len(l)-lines:]
	}
	return strings.Join(l, "\n")
}
