// Package cluster runs a Kubernetes cluster of several nodes on this
// machine, offline, for the conformance suite and tests of what crosses
// nodes (scripts/cluster.sh, scripts/conformance.sh): a control plane on
// the host (etcd, kube-apiserver, kube-controller-manager with node IPAM,
// kube-scheduler), and per node a network and UTS namespace of its own with
// its own containerd, node agent (nodelet, or the kubelet on the same
// layout to compare), kube-proxy in iptables mode, and routes to the other
// nodes' pod ranges; then cluster DNS as kubeadm deploys it. It is a test
// harness: no shipped binary links it.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodelet/nodelet/internal/containerd"
	"github.com/nodelet/nodelet/internal/containerd/scratch"
	"github.com/nodelet/nodelet/internal/daemon"
	"github.com/nodelet/nodelet/internal/images"
	"github.com/nodelet/nodelet/internal/testenv"
)

// Agent is what runs as the node agent.
type Agent string

const (
	Nodelet Agent = "nodelet"
	Kubelet Agent = "kubelet"
)

// Options choose the cluster. The zero value needs Bins set, nothing else.
type Options struct {
	// Nodes is how many nodes. Default: 2 (what the scheduling and
	// DaemonSet specs of the suite need).
	Nodes int
	// Agent runs on every node. Default: Nodelet.
	Agent Agent
	// Work is the harness's scratch directory, removed by Stop. Default:
	// /var/lib/nodelet-cluster.
	Work string
	// Bins are the programs.
	Bins Binaries
	// Images are imported into every node's containerd (the cluster DNS
	// image among them when Bins.CoreDNS is empty).
	Images []images.Tarball
	// ContainerdMajor is every node's containerd: 2 (containerd 2.x, built
	// and cached by scripts/containerd2.sh on first use) or 1 (Debian's
	// 1.6). Default: NODELET_TEST_CONTAINERD's (testenv.ContainerdMajor),
	// 2 when it is unset.
	ContainerdMajor int
	// RegistryConfigPath is every containerd's registry hosts directory
	// (e.g. registry.k8s.io sent to a stand-in registry). Default: none.
	RegistryConfigPath string
	// OnBridge runs once the host's address on the bridge (HostIP) exists
	// and before any node starts: what the nodes reach on the host, such
	// as a registry, listens there (the host's loopback is not theirs).
	// Default: nothing.
	OnBridge func(ctx context.Context) error
	// DNSImage is the cluster DNS image's reference (one of Images).
	// Default: "" (no cluster DNS).
	DNSImage string
	// HostRootDir gives the node the host's /var/lib/kubelet as its root
	// dir (the kubelet's --root-dir, nodelet's node.rootDir), where driver
	// DaemonSets mount it by hostPath, as the e2e DRA specs' proxy does.
	// Only with Nodes 1: nodes cannot share it. The directory is removed at
	// Stop when the cluster made it. Default: false, every node has its own
	// <Work>/<node>/root.
	HostRootDir bool
	// APIServerArgs are more kube-apiserver flags (testenv's
	// ControlPlaneOptions.APIServerArgs). Default: none.
	APIServerArgs []string
	// LockWait is how long to wait for another cluster on this machine to
	// go (tests of packages run side by side). Default: 0 (fail at once).
	LockWait time.Duration
	// Log reports progress. Default: silent.
	Log func(format string, args ...any)
}

// Binaries are the programs a cluster runs.
type Binaries struct {
	// Nodelet is the directory of the nodelet binaries (nodelet up).
	Nodelet string
	// KubeControllerManager, KubeScheduler, KubeProxy and Kubelet are the
	// control plane's version's (scripts/controlplane.sh tools).
	KubeControllerManager, KubeScheduler, KubeProxy, Kubelet string
	// CoreDNS is the coredns binary (made into Options.DNSImage by the caller).
	CoreDNS string
}

// Cluster is a running cluster.
type Cluster struct {
	CP    *testenv.ControlPlane
	Nodes []*Node
	// Admin is a cluster admin's client.
	Admin kubernetes.Interface

	o    Options
	undo []func()
	once sync.Once
}

// Node is one node of the cluster.
type Node struct {
	Name, IP string
	// NetNS is the node's network namespace's name (ip netns exec NetNS …).
	NetNS string
	// Dir holds the node's state, logs and configuration.
	Dir        string
	Containerd *scratch.Containerd
	// PodCIDR is the range node IPAM gave the node.
	PodCIDR string
	// RootDir is the agent's root dir: the kubelet's --root-dir, nodelet's
	// node.rootDir (device plugin, DRA and CSI sockets; the kubelet's pod
	// volumes).
	RootDir string

	net           nodeNet
	cgroupRoot    string
	removeRootDir bool // RootDir is the host's and the cluster made it
	agent         *process
	proxy         *process
}

// Namespaces are the node's network and UTS namespaces, for a process that
// runs "on" the node.
func (n *Node) Namespaces() containerd.Namespaces {
	return containerd.Namespaces{Net: n.net.netnsPath(), UTS: n.net.uts}
}

// HostRootDir is the kubelet's default --root-dir, Options.HostRootDir's.
const HostRootDir = "/var/lib/kubelet"

// AgentLog is the node agent's log file.
func (n *Node) AgentLog() string { return filepath.Join(n.Dir, "agent.log") }

// Start brings the cluster up and returns once every node is Ready and,
// with a DNSImage, cluster DNS answers. On error everything started is taken
// down again. The processes die with the calling process (Pdeathsig); call
// Stop to take it all down and leave nothing behind.
func Start(ctx context.Context, o Options) (_ *Cluster, err error) {
	if o.Nodes <= 0 {
		o.Nodes = 2
	}
	if o.Agent == "" {
		o.Agent = Nodelet
	}
	if o.Work == "" {
		o.Work = "/var/lib/nodelet-cluster"
	}
	if o.Log == nil {
		o.Log = func(string, ...any) {}
	}
	if o.HostRootDir && o.Nodes != 1 {
		return nil, fmt.Errorf("HostRootDir: %s is one directory, so the cluster can have only one node, not %d", HostRootDir, o.Nodes)
	}
	if err := o.Bins.check(o.Agent); err != nil {
		return nil, err
	}
	// One cluster per machine: clusters share the bridge, the addresses
	// and the namespaces' names.
	lock, err := daemon.Lock(runDir, "cluster")
	for deadline := time.Now().Add(o.LockWait); err != nil && time.Now().Before(deadline); {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
		lock, err = daemon.Lock(runDir, "cluster")
	}
	if err != nil {
		return nil, fmt.Errorf("another cluster runs on this machine: %w", err)
	}
	c := &Cluster{o: o}
	c.undo = append(c.undo, func() { lock.Close() })
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	removeLeftovers(o.Work)
	if err := os.MkdirAll(o.Work, 0o755); err != nil {
		return nil, err
	}
	c.undo = append(c.undo, func() { _ = os.RemoveAll(o.Work) })

	if err := setUpBridge(); err != nil {
		return nil, err
	}
	c.undo = append(c.undo, tearDownBridge)
	if o.OnBridge != nil {
		if err := o.OnBridge(ctx); err != nil {
			return nil, err
		}
	}

	names := make([]string, o.Nodes)
	for i := range names {
		names[i] = "node-" + strconv.Itoa(i+1)
	}
	cp, stopCP, err := testenv.StartControlPlaneWith(testenv.ControlPlaneOptions{Nodes: names, Address: HostIP, APIServerArgs: o.APIServerArgs})
	if err != nil {
		return nil, fmt.Errorf("control plane: %w", err)
	}
	c.CP = cp
	c.undo = append(c.undo, stopCP)
	if c.Admin, err = kubernetes.NewForConfig(cp.AdminConfig); err != nil {
		return nil, err
	}
	ctl, err := cp.StartControllersWith(testenv.ControllersOptions{
		ControllerManager: o.Bins.KubeControllerManager, Scheduler: o.Bins.KubeScheduler, ClusterCIDR: ClusterCIDR})
	if err != nil {
		return nil, err
	}
	c.undo = append(c.undo, ctl.Stop)
	o.Log("control plane at %s with node IPAM (%s); logs in %s", cp.URL, ClusterCIDR, cp.Dir)

	// Nodes come up side by side: containerd's start and the images'
	// import take most of the time.
	c.Nodes = make([]*Node, o.Nodes)
	errs := make([]error, o.Nodes)
	var wg sync.WaitGroup
	for i := range c.Nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.Nodes[i], errs[i] = c.startNode(ctx, i+1, names[i])
		}()
	}
	wg.Wait()
	for _, n := range c.Nodes {
		if n != nil {
			c.undo = append(c.undo, n.stop)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if err := c.route(ctx); err != nil {
		return nil, err
	}
	for _, n := range c.Nodes {
		if err := c.startProxy(n); err != nil {
			return nil, err
		}
	}
	if err := c.waitReady(ctx, 3*time.Minute); err != nil {
		return nil, err
	}
	o.Log("%d %s nodes Ready", o.Nodes, o.Agent)
	if o.DNSImage != "" {
		if err := c.startDNS(ctx); err != nil {
			return nil, err
		}
		o.Log("cluster DNS at %s", DNSServiceIP)
	}
	return c, nil
}

// RemoveLeftovers removes what a killed cluster left (its processes died
// with it, the pods' shims and containers did not): containers, mounts,
// namespaces, the bridge and its rules, cgroups and the work directory.
// It refuses while a cluster runs.
func RemoveLeftovers(work string) error {
	lock, err := daemon.Lock(runDir, "cluster")
	if err != nil {
		return fmt.Errorf("a cluster runs on this machine: %w", err)
	}
	defer lock.Close()
	removeLeftovers(work)
	return nil
}

func removeLeftovers(work string) {
	scratch.Sweep()
	for _, m := range testenv.MountsUnder(work) {
		_ = syscall.Unmount(m, syscall.MNT_DETACH)
	}
	tearDownLeftovers()
	tearDownBridge()
	removeCgroups("/" + cgroupPrefix + "*")
	_ = os.RemoveAll(work)
}

// Stop takes the cluster down, in reverse order of Start, and removes
// everything it made; safe to call more than once.
func (c *Cluster) Stop() {
	c.once.Do(func() {
		for i := len(c.undo) - 1; i >= 0; i-- {
			c.undo[i]()
		}
	})
}

func (b Binaries) check(agent Agent) error {
	need := map[string]string{"kube-controller-manager": b.KubeControllerManager, "kube-scheduler": b.KubeScheduler,
		"kube-proxy": b.KubeProxy}
	switch agent {
	case Nodelet:
		need["nodelet"] = filepath.Join(b.Nodelet, "nodelet")
	case Kubelet:
		need["kubelet"] = b.Kubelet
	default:
		return fmt.Errorf("cluster: unknown agent %q (nodelet or kubelet)", agent)
	}
	for name, p := range need {
		if p == "" {
			return fmt.Errorf("cluster: no %s binary given", name)
		}
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("cluster: %s: %w", name, err)
		}
	}
	return nil
}

// waitReady waits for every node to be Ready.
func (c *Cluster) waitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var notReady []string
		for _, n := range c.Nodes {
			if err := n.agent.exitedErr(); err != nil {
				return err
			}
			node, err := c.Admin.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
			if err != nil {
				notReady = append(notReady, n.Name+": "+err.Error())
				continue
			}
			if ok, why := nodeReady(node); !ok {
				notReady = append(notReady, n.Name+": "+why)
			}
		}
		if len(notReady) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("nodes not Ready after %s: %v", timeout, notReady)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func nodeReady(n *corev1.Node) (bool, string) {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue, c.Reason + ": " + c.Message
		}
	}
	return false, "no Ready condition yet"
}
