package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/component"
	"github.com/nodelet/nodelet/internal/supervisor"
	"github.com/nodelet/nodelet/internal/testenv"
	"github.com/nodelet/nodelet/internal/tools/explain"
)

// NodeOptions shape one node.
type NodeOptions struct {
	// API makes it a cluster node (node.kubeconfig = the node identity).
	API bool
	// Name is node.name; empty is nodeName, the control plane's node.
	Name string
	// Extra is appended to the generated config (YAML, top-level sections
	// not used by the harness: admission, prober, gc).
	Extra string
	// Runtime, Status, GC, Server: extra lines for those sections. Unless
	// GC names evictionHard or an imageGC field, it gets
	// testenv.DiskManagementOff too.
	Runtime, Status, GC, Node, Server string
	// ServerAddress is server.address; empty is 127.0.0.1. kube-apiserver
	// proxies to a node (nodes/proxy) only at a non-loopback address.
	ServerAddress string
	// BusStoreSize, when set (e.g. "48m"), puts the bus's store
	// (<stateDir>/bus) on a tmpfs of that size of its own, unmounted when
	// the test ends: a small filesystem a test can fill.
	BusStoreSize string
	// NoReadOnlyPort leaves server.readOnlyPort at its default, 0 (off);
	// otherwise the harness turns it on (node.ReadOnly) for node.Pods.
	NoReadOnlyPort bool
	// Containerd is the node's runtime; nil is the test binary's shared one.
	Containerd *testenv.Containerd
}

// Node is one `nodelet up` under test, made by NewNode.
type Node struct {
	t testing.TB
	// Dir is the node's scratch dir (state, manifests, config, logs, root).
	Dir       string
	StateDir  string
	StaticDir string
	Config    string
	// ReadOnly is the read-only port's address (server.readOnlyPort on
	// server.address), "" when off.
	ReadOnly  string
	BusListen string
	// ServerPort is nodelet-server's port (server.port) on 127.0.0.1.
	ServerPort int
	// HealthzPort is the kubelet's healthz (server.healthzPort) on
	// 127.0.0.1: a free one, since nodes run side by side.
	HealthzPort int
	// CgroupRoot is the node's runtime.cgroupRoot.
	CgroupRoot string
	// ctrd is the node's containerd (NodeOptions.Containerd or the shared one).
	ctrd *testenv.Containerd
	cmd  *exec.Cmd
	// Out is `nodelet up`'s output so far.
	Out     *testenv.Buffer
	exited  chan error
	stopped bool
	opts    NodeOptions
}

func NewNode(t testing.TB, o NodeOptions) *Node {
	t.Helper()
	testenv.RequiresRoot(t)
	dir := t.TempDir()
	n := &Node{t: t, Dir: dir, StateDir: filepath.Join(dir, "state"), StaticDir: filepath.Join(dir, "manifests"),
		Config: filepath.Join(dir, "nodelet.yaml"), opts: o,
		BusListen: fmt.Sprintf("127.0.0.1:%d", FreePort(t)), ServerPort: FreePort(t), HealthzPort: FreePort(t), ctrd: env.Ctrd}
	if o.Containerd != nil {
		n.ctrd = o.Containerd
	}
	if err := os.MkdirAll(n.StaticDir, 0o755); err != nil {
		t.Fatal(err)
	}
	// A cgroup root of its own: a runtime removes the pod cgroups under
	// its root that it does not know, so nodes running side by side must
	// not share one. Registered first, it runs after the node stopped.
	cgroupRoot := fmt.Sprintf("/nodelet-e2e-%d-%d", os.Getpid(), n.ServerPort)
	t.Cleanup(func() { RemoveCgroupDirs(cgroupRoot) })
	n.CgroupRoot = cgroupRoot
	if o.BusStoreSize != "" {
		store := filepath.Join(n.StateDir, "bus")
		if err := os.MkdirAll(store, 0o700); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+o.BusStoreSize+",mode=0700", "nodelet-e2e-bus", store).CombinedOutput(); err != nil {
			t.Fatalf("mount tmpfs on %s: %v\n%s", store, err, out)
		}
		// Registered before the node's own cleanup: runs after it stopped.
		t.Cleanup(func() {
			if out, err := exec.Command("umount", store).CombinedOutput(); err != nil {
				t.Errorf("umount %s: %v\n%s", store, err, out)
			}
		})
	}
	serverAddress := o.ServerAddress
	if serverAddress == "" {
		serverAddress = "127.0.0.1"
	}
	readOnlyPort := 0
	if !o.NoReadOnlyPort {
		readOnlyPort = FreePort(t)
		n.ReadOnly = fmt.Sprintf("127.0.0.1:%d", readOnlyPort)
	}
	nodeLines := o.Node
	// A root dir of its own unless the test gives one: nodes side by side
	// (and a cluster run on the host's /var/lib/kubelet) must not share
	// device-plugins/kubelet.sock or plugins_registry.
	if !strings.Contains(nodeLines, "rootDir:") {
		nodeLines += "  rootDir: " + filepath.Join(dir, "root") + "\n"
	}
	if o.API {
		nodeLines = "  kubeconfig: " + env.CP.NodeKubeconfig + "\n" + nodeLines
	}
	name := o.Name
	if name == "" {
		name = env.NodeName
	}
	// The machine's shared disk must not put the node under DiskPressure,
	// unless the test is about disk pressure or image GC.
	gc := o.GC
	if !strings.Contains(gc, "evictionHard") && !strings.Contains(gc, "imageGC") {
		gc += testenv.DiskManagementOff("  ")
	}
	cfg := fmt.Sprintf(`node:
  name: %s
  stateDir: %s
  podLogsDir: %s
  podCIDR: %s
%sbus:
  listen: %s
  heartbeatInterval: 1s
runtime:
  endpoint: %s
  cniConfDir: %s
  cgroupRoot: %s
  cniBridgeName: %s
  cniNetworkName: %s
  # The test containerd's own conflist keeps host-local leases in the
  # instance's dir, cleaned at every start; a rendered one would keep them
  # in /var/lib/cni/networks, where killed test runs leak them.
  manageCNIConfig: false
%ssources:
  staticPodPath: %s
  fileCheckFrequency: 5s
%sstatus:
  nodeStatusUpdateFrequency: 2s
%sserver:
  address: %s
  port: %d
  readOnlyPort: %d
  healthzPort: %d
%sgc:
  containerGCPeriod: 5s
%s%s`, name, n.StateDir, filepath.Join(dir, "logs"), n.ctrd.Subnet, nodeLines, n.BusListen, n.ctrd.Endpoint, n.ctrd.CNIConfDir,
		cgroupRoot, n.ctrd.BridgeName, n.ctrd.NetworkName, o.Runtime,
		n.StaticDir, "", o.Status, serverAddress, n.ServerPort, readOnlyPort, n.HealthzPort, o.Server, gc, o.Extra)
	if err := os.WriteFile(n.Config, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	n.Start()
	t.Cleanup(func() {
		n.Stop()
		n.cleanupPods()
		if t.Failed() {
			t.Logf("nodelet up output (tail):\n%s", Tail(n.Out.String(), 200))
		}
	})
	n.WaitReady()
	return n
}

// Tail is the last lines of s.
func Tail(s string, lines int) string {
	l := strings.Split(s, "\n")
	if len(l) > lines {
		l = l[len(l)-lines:]
	}
	return strings.Join(l, "\n")
}

func (n *Node) Start() {
	n.t.Helper()
	if n.Out == nil {
		n.Out = &testenv.Buffer{}
	}
	n.cmd = exec.Command(filepath.Join(env.BinDir, "nodelet"), "up", "--config", n.Config)
	w := io.Writer(n.Out)
	if os.Getenv("NODELET_TEST_LOG") != "" {
		w = io.MultiWriter(n.Out, os.Stderr)
	}
	n.cmd.Stdout, n.cmd.Stderr = w, w
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := n.cmd.Start(); err != nil {
		n.t.Fatal(err)
	}
	n.stopped = false
	n.exited = make(chan error, 1)
	go func(c *exec.Cmd, ch chan error) { ch <- c.Wait() }(n.cmd, n.exited)
}

// Stop stops the agent (SIGTERM to nodelet up). Pods keep running.
func (n *Node) Stop() {
	if n.stopped {
		return
	}
	n.stopped = true
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-n.exited:
	case <-time.After(90 * time.Second):
		_ = n.cmd.Process.Kill()
		<-n.exited
	}
}

// cleanupPods removes the sandboxes the node left in its containerd.
func (n *Node) cleanupPods() { RemovePodSandboxes(n.t, n.ctrd) }

// WaitReady waits until `nodelet up` reports every process ready.
func (n *Node) WaitReady() map[string]supervisor.ProcState {
	n.t.Helper()
	var last []supervisor.ProcState
	deadline := time.Now().Add(120 * time.Second)
	for time.Now().Before(deadline) {
		st, err := supervisor.ReadState(n.StateDir)
		if err == nil {
			last = st
			m := map[string]supervisor.ProcState{}
			ok := len(st) == len(component.Declared.Processes())
			for _, s := range st {
				m[s.Name] = s
				ok = ok && s.State == "ready"
			}
			if ok {
				return m
			}
		}
		select {
		case err := <-n.exited:
			n.t.Fatalf("nodelet up exited: %v\n%s", err, Tail(n.Out.String(), 100))
		case <-time.After(100 * time.Millisecond):
		}
	}
	n.t.Fatalf("node not ready: %+v", last)
	return nil
}

// WriteManifest writes a static pod manifest atomically (rename).
func (n *Node) WriteManifest(name, body string) {
	n.t.Helper()
	tmp := filepath.Join(n.StaticDir, "."+name+".tmp")
	if err := os.WriteFile(tmp, []byte(body), 0o644); err != nil {
		n.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(n.StaticDir, name)); err != nil {
		n.t.Fatal(err)
	}
}

// RemoveManifest deletes a static pod manifest.
func (n *Node) RemoveManifest(name string) {
	n.t.Helper()
	if err := os.Remove(filepath.Join(n.StaticDir, name)); err != nil {
		n.t.Fatal(err)
	}
}

// Pods reads /pods from the read-only API.
func (n *Node) Pods() (*corev1.PodList, error) {
	resp, err := http.Get("http://" + n.ReadOnly + "/pods")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return nil, fmt.Errorf("/pods: %s: %s", resp.Status, b)
	}
	var l corev1.PodList
	return &l, json.NewDecoder(resp.Body).Decode(&l)
}

// WaitPod polls /pods until a pod named name (static pods get -<node>)
// satisfies ok, and returns it.
func (n *Node) WaitPod(name string, timeout time.Duration, what string, ok func(*corev1.Pod) bool) *corev1.Pod {
	n.t.Helper()
	var last *corev1.Pod
	var lastErr error
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		l, err := n.Pods()
		lastErr = err
		if err == nil {
			last = nil
			for i := range l.Items {
				if l.Items[i].Name == name {
					last = &l.Items[i]
				}
			}
			if ok(last) {
				return last
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	b, _ := json.MarshalIndent(last, "", "  ")
	n.t.Fatalf("pod %s: timed out waiting for %s (err %v); last seen:\n%s", name, what, lastErr, b)
	return nil
}

// RunningReady says whether p is Running with an IP and Ready.
func RunningReady(p *corev1.Pod) bool {
	if p == nil || p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// CRISandboxes lists c's CRI sandboxes of the pod with uid (any state).
func CRISandboxes(t testing.TB, c *testenv.Containerd, uid string) []*runtimeapi.PodSandbox {
	t.Helper()
	rc := c.RuntimeClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := rc.Runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{
		LabelSelector: map[string]string{"io.kubernetes.pod.uid": uid}}})
	if err != nil {
		t.Fatal(err)
	}
	return resp.Items
}

// connect connects to the node's bus as component.
func (n *Node) Connect(component string) *bus.Conn {
	n.t.Helper()
	c, err := bus.Connect(bus.ConnectOptions{URL: bus.URLFor(n.BusListen), Component: component, StateDir: n.StateDir})
	if err != nil {
		n.t.Fatal(err)
	}
	n.t.Cleanup(c.NC.Close)
	return c
}

// explainStuck logs `nodelet explain` of every pod named in why (the pods a
// wait gave up on) and saves the node's whole output to a file, so that a
// failure says which stage holds each pod.
func (n *Node) ExplainStuck(why string) {
	c := n.Connect(bus.Tap)
	for _, f := range strings.Fields(why) {
		name, _, ok := strings.Cut(f, "=")
		if !ok {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		story, err := explain.Explain(ctx, c, name)
		cancel()
		if err != nil {
			n.t.Logf("explain %s: %v", name, err)
			continue
		}
		var b bytes.Buffer
		_ = story.Write(&b)
		n.t.Logf("explain %s:\n%s", name, b.String())
	}
	if f, err := os.CreateTemp("", "nodelet-e2e-output-*.log"); err == nil {
		_, _ = f.WriteString(n.Out.String())
		_ = f.Close()
		n.t.Logf("node output saved to %s", f.Name())
	}
}
