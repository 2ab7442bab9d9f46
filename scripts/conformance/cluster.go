package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodelet/nodelet/internal/images"
	"github.com/nodelet/nodelet/internal/testenv"
)

// cluster is what the suite runs against.
type cluster struct {
	cp     *testenv.ControlPlane
	ctrd   *testenv.Containerd
	images []string // refs of the stand-ins served and imported
}

// startCluster brings up, in order, everything the suite needs, and appends
// to undo how to take each part down again.
func startCluster(ctx context.Context, o options, undo *[]func()) (*cluster, error) {
	c := &cluster{}
	if err := addNodeLink(o.link, o.nodeIP); err != nil {
		return nil, err
	}
	*undo = append(*undo, func() { deleteLink(o.link) })
	log("node address %s on link %s", o.nodeIP, o.link)

	tars, err := images.BuildConformanceImages(ctx, images.ConformanceInputs{
		Agnhost: filepath.Join(o.k8sBin, "agnhost"),
		Nnp:     filepath.Join(o.k8sBin, "nnp"),
		Pause:   filepath.Join(o.nodeletBin, "nodelet-pause"),
		Shell:   "/bin/bash-static",
	}, filepath.Join(o.k8sBin, "images"))
	if err != nil {
		return nil, fmt.Errorf("e2e image stand-ins: %w", err)
	}
	reg, err := serveRegistry(ctx, tars)
	if err != nil {
		return nil, err
	}
	*undo = append(*undo, reg.close)
	hostsDir := filepath.Join(o.work, "registry-hosts")
	if err := reg.writeHosts(hostsDir); err != nil {
		return nil, err
	}
	log("registry.k8s.io stand-in at %s with %d images", reg.addr, len(tars))

	c.ctrd, err = testenv.StartContainerd(testenv.ContainerdOptions{RegistryConfigPath: hostsDir})
	if err != nil {
		return nil, fmt.Errorf("containerd: %w", err)
	}
	// After containerd has removed every sandbox, what nodelet mounted for
	// pods and the pod cgroups (CRI never removes them) go too.
	var leftovers func()
	*undo = append(*undo, func() {
		c.ctrd.Stop()
		if leftovers != nil {
			leftovers()
		}
	})
	for _, t := range tars {
		if err := images.Import(ctx, c.ctrd.Address, "k8s.io", t.Path); err != nil {
			return nil, err
		}
		c.images = append(c.images, t.Ref)
	}
	log("containerd %s (bridge %s, subnet %s), %d stand-ins imported", c.ctrd.Address, c.ctrd.BridgeName, c.ctrd.Subnet, len(tars))

	var stopCP func()
	c.cp, stopCP, err = testenv.StartControlPlane(o.nodeName)
	if err != nil {
		return nil, fmt.Errorf("control plane: %w", err)
	}
	*undo = append(*undo, stopCP)
	ctl, err := c.cp.StartControllers(filepath.Join(o.k8sBin, "kube-controller-manager"), filepath.Join(o.k8sBin, "kube-scheduler"))
	if err != nil {
		return nil, err
	}
	*undo = append(*undo, ctl.Stop)
	log("control plane %s with kube-controller-manager and kube-scheduler (logs in %s)", c.cp.URL, c.cp.Dir)

	// Pods never send traffic off the machine: nothing routes their
	// packets beyond the pod subnet and the node itself (no kube-proxy
	// serves the service range either), and their DNS goes nowhere.
	if err := fenceEgress(c.ctrd.Subnet); err != nil {
		return nil, err
	}
	*undo = append(*undo, func() { unfenceEgress(c.ctrd.Subnet) })

	n, err := startNode(ctx, o, c)
	if err != nil {
		return nil, err
	}
	leftovers = n.removeLeftovers
	*undo = append(*undo, n.stop)
	if err := n.waitReady(ctx, c.cp); err != nil {
		return nil, err
	}
	log("node %s Ready", o.nodeName)
	return c, nil
}

// node is `nodelet up` in API mode.
type node struct {
	dir, stateDir, cgroupRoot string
	cmd                       *exec.Cmd
	exited                    chan struct{} // closed when nodelet up has exited
	exitErr                   error
	out                       string
}

func startNode(ctx context.Context, o options, c *cluster) (*node, error) {
	n := &node{dir: filepath.Join(o.work, "node"), cgroupRoot: "/nodelet-conformance"}
	n.stateDir = filepath.Join(n.dir, "state")
	n.out = filepath.Join(o.work, "nodelet.log")
	if err := os.MkdirAll(n.dir, 0o755); err != nil {
		return nil, err
	}
	resolv := filepath.Join(n.dir, "resolv.conf")
	if err := os.WriteFile(resolv, []byte("nameserver 127.0.0.1\n"), 0o644); err != nil {
		return nil, err
	}
	busPort, err := freePort()
	if err != nil {
		return nil, err
	}
	cfg := fmt.Sprintf(`node:
  name: %s
  address: %s
  stateDir: %s
  podLogsDir: %s
  podCIDR: %s
  resolvConf: %s
  kubeconfig: %s
bus:
  listen: 127.0.0.1:%d
runtime:
  endpoint: %s
  # testenv's containerd already answers on the endpoint, so nodelet up uses it.
  manageContainerd: true
  cniConfDir: %s
  cgroupRoot: %s
  cniBridgeName: %s
  cniNetworkName: %s
  # testenv's own conflist keeps its IPAM leases in the instance's dir.
  manageCNIConfig: false
server:
  # kube-apiserver's kubelet client certificate is signed by the cluster CA.
  authentication:
    x509:
      clientCAFile: %s
`, o.nodeName, o.nodeIP, n.stateDir, filepath.Join(n.dir, "pods"), c.ctrd.Subnet, resolv, c.cp.NodeKubeconfig, busPort,
		c.ctrd.Endpoint, c.ctrd.CNIConfDir, n.cgroupRoot, c.ctrd.BridgeName, c.ctrd.NetworkName, c.cp.ClientCAFile)
	path := filepath.Join(n.dir, "nodelet.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	logf, err := os.Create(n.out)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	n.cmd = exec.Command(filepath.Join(o.nodeletBin, "nodelet"), "up", "--config", path)
	n.cmd.Stdout, n.cmd.Stderr = logf, logf
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := n.cmd.Start(); err != nil {
		return nil, err
	}
	n.exited = make(chan struct{})
	go func() {
		n.exitErr = n.cmd.Wait()
		close(n.exited)
	}()
	log("nodelet up pid %d (config %s, log %s)", n.cmd.Process.Pid, path, n.out)
	return n, nil
}

// waitReady waits for the Node object to be Ready.
func (n *node) waitReady(ctx context.Context, cp *testenv.ControlPlane) error {
	client, err := kubernetes.NewForConfig(cp.AdminConfig)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(3 * time.Minute)
	var last string
	for time.Now().Before(deadline) {
		node, err := client.CoreV1().Nodes().Get(ctx, cp.NodeName, metav1.GetOptions{})
		if err == nil {
			for _, c := range node.Status.Conditions {
				if c.Type == corev1.NodeReady {
					if c.Status == corev1.ConditionTrue {
						return nil
					}
					last = c.Reason + ": " + c.Message
				}
			}
		} else {
			last = err.Error()
		}
		select {
		case <-n.exited:
			return fmt.Errorf("nodelet up exited (%v): %s", n.exitErr, lastLine(n.out))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	return fmt.Errorf("node %s not Ready after 3m (%s); see %s", cp.NodeName, last, n.out)
}

// lastLine is the last line of the file at path, and its name.
func lastLine(path string) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1] + " (log " + path + ")"
}

// stop stops the agent; pods keep running until containerd's teardown.
func (n *node) stop() {
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-n.exited:
	case <-time.After(90 * time.Second):
		_ = n.cmd.Process.Kill()
		<-n.exited
	}
}

// removeLeftovers unmounts what nodelet-runtime mounted for pods (volumes
// under the state dir) and removes the pod cgroups, with every container
// gone.
func (n *node) removeLeftovers() {
	for _, m := range testenv.MountsUnder(n.dir) {
		_ = syscall.Unmount(m, syscall.MNT_DETACH)
	}
	removeCgroups(n.cgroupRoot)
}

// removeCgroups removes root and everything below it in every cgroup v1
// hierarchy (or the v2 one), deepest first.
func removeCgroups(root string) {
	mounts, _ := filepath.Glob("/sys/fs/cgroup/*")
	mounts = append(mounts, "/sys/fs/cgroup")
	for _, m := range mounts {
		top := filepath.Join(m, root)
		var dirs []string
		_ = filepath.WalkDir(top, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			_ = syscall.Rmdir(dirs[i])
		}
	}
}

func addNodeLink(name, ip string) error {
	deleteLink(name) // a killed earlier run's
	for _, args := range [][]string{
		{"link", "add", name, "type", "bridge"},
		{"addr", "add", ip + "/32", "dev", name},
		{"link", "set", name, "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			deleteLink(name)
			return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, out)
		}
	}
	return nil
}

// fenceEgress rejects what pods of subnet send anywhere but the subnet
// (forwarded traffic: what they send to the node itself is not forwarded).
func fenceEgress(subnet string) error {
	unfenceEgress(subnet) // a killed earlier run's
	if out, err := exec.Command("iptables", fenceRule("-I", subnet)...).CombinedOutput(); err != nil {
		return fmt.Errorf("iptables: %w: %s", err, out)
	}
	return nil
}

func unfenceEgress(subnet string) {
	for exec.Command("iptables", fenceRule("-D", subnet)...).Run() == nil {
	}
}

func fenceRule(op, subnet string) []string {
	return []string{"-w", op, "FORWARD", "-s", subnet, "!", "-d", subnet, "-m", "comment", "--comment", "nodelet-conformance",
		"-j", "REJECT"}
}

func deleteLink(name string) {
	_ = exec.Command("ip", "link", "delete", name).Run()
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// runSuite runs the e2e binary against the cluster, its output to logFile.
func runSuite(ctx context.Context, o options, c *cluster, logFile string) error {
	f, err := os.Create(logFile)
	if err != nil {
		return err
	}
	defer f.Close()
	suiteArgs := append([]string{
		"--provider=local",
		"--kubeconfig=" + c.cp.AdminKubeconfig,
		"--kubectl-path=" + c.cp.Kubectl,
		"--report-dir=" + filepath.Dir(o.report),
		"--disable-log-dump",
	}, o.extraE2EArgs...)
	var cmd *exec.Cmd
	if o.procs == 1 {
		cmd = exec.CommandContext(ctx, o.e2e, append([]string{
			"--ginkgo.focus=" + o.focus,
			"--ginkgo.skip=" + o.skip,
			"--ginkgo.json-report=" + o.report,
			"--ginkgo.timeout=" + o.timeout.String(),
			"--ginkgo.no-color",
			"--ginkgo.v",
		}, suiteArgs...)...)
	} else {
		// The ginkgo runner spreads the specs over processes and merges
		// their reports into one.
		cmd = exec.CommandContext(ctx, filepath.Join(o.k8sBin, "ginkgo"), append([]string{
			"--procs=" + strconv.Itoa(o.procs),
			"--focus=" + o.focus,
			"--skip=" + o.skip,
			"--output-dir=" + filepath.Dir(o.report),
			"--json-report=" + filepath.Base(o.report),
			"--timeout=" + o.timeout.String(),
			"--no-color",
			"-v",
			o.e2e, "--",
		}, suiteArgs...)...)
	}
	cmd.Stdout, cmd.Stderr = io.MultiWriter(f, newProgress(os.Stdout)), f
	cmd.Env = append(os.Environ(), "KUBECONFIG="+c.cp.AdminKubeconfig)
	// Its own process group: the ginkgo runner's suite processes are
	// interrupted with it and never outlive the run.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGINT) }
	cmd.WaitDelay = 30 * time.Second
	err = cmd.Run()
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return nil // failed specs: the report says which
	}
	return err
}
