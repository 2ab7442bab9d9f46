package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/internal/cni"
	"github.com/nodelet/nodelet/internal/containerd/scratch"
	"github.com/nodelet/nodelet/internal/images"
	"github.com/nodelet/nodelet/internal/testenv"
)

const (
	// cgroupPrefix starts every node's cgroup root (/<prefix><node>).
	cgroupPrefix = "nlc-"
	// cniBridge is the pods' bridge in every node's network namespace.
	cniBridge = "cbr0"
)

// startNode makes node i: its namespaces, containerd (images imported) and
// agent. The node is registered when it returns, not yet Ready: its pod
// range comes from node IPAM, and the routes after it.
func (c *Cluster) startNode(ctx context.Context, i int, name string) (*Node, error) {
	n := &Node{Name: name, Dir: filepath.Join(c.o.Work, name), cgroupRoot: "/" + cgroupPrefix + name}
	n.RootDir = filepath.Join(n.Dir, "root")
	if c.o.HostRootDir {
		n.RootDir = HostRootDir
		if _, err := os.Stat(HostRootDir); errors.Is(err, os.ErrNotExist) {
			n.removeRootDir = true
		}
	}
	var err error
	if n.net, err = setUpNode(i, name); err != nil {
		return nil, err
	}
	n.IP, n.NetNS = n.net.ip, n.net.netns
	if err := os.MkdirAll(n.Dir, 0o755); err != nil {
		n.stop()
		return nil, err
	}
	// The agents' pods land under the node's cgroup root, which the
	// kubelet requires to exist (nodelet makes its own).
	if err := makeCgroups(n.cgroupRoot); err != nil {
		n.stop()
		return nil, err
	}
	co := scratch.Options{
		Namespaces:         n.Namespaces(),
		NoCNIConfig:        true,
		RegistryConfigPath: c.o.RegistryConfigPath,
	}
	major := c.o.ContainerdMajor
	if major == 0 {
		if major, err = testenv.ContainerdMajor(); err != nil {
			n.stop()
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	if major >= 2 {
		bins, err := testenv.Containerd2()
		if err != nil {
			n.stop()
			return nil, fmt.Errorf("%s: containerd 2.x: %w", name, err)
		}
		co.Major, co.Binary = 2, bins.Containerd
	}
	n.Containerd, err = scratch.Start(co)
	if err != nil {
		n.stop()
		return nil, fmt.Errorf("%s: containerd: %w", name, err)
	}
	if err := importAll(ctx, n.Containerd.Address, c.o.Images); err != nil {
		n.stop()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	// dnsPolicy Default pods get this: nothing outside the cluster answers.
	if err := os.WriteFile(filepath.Join(n.Dir, "resolv.conf"), []byte("nameserver 127.0.0.1\n"), 0o644); err != nil {
		n.stop()
		return nil, err
	}
	switch c.o.Agent {
	case Kubelet:
		err = c.startKubelet(n)
	default:
		err = c.startNodelet(n)
	}
	if err != nil {
		n.stop()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	c.o.Log("%s: %s at %s (netns %s, containerd %s, log %s)", name, c.o.Agent, n.IP, n.NetNS, n.Containerd.Address, n.AgentLog())
	return n, nil
}

func importAll(ctx context.Context, address string, tars []images.Tarball) error {
	errs := make([]error, len(tars))
	var wg sync.WaitGroup
	for i, t := range tars {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = images.Import(ctx, address, "k8s.io", t.Path)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// stop takes the node down: kube-proxy, the agent (pods keep running),
// containerd with every pod, then what CRI leaves (mounts, pod cgroups) and
// the namespaces.
func (n *Node) stop() {
	n.proxy.stop(15 * time.Second)
	n.agent.stop(90 * time.Second)
	if n.Containerd != nil {
		n.Containerd.Stop()
	}
	for _, dir := range []string{n.Dir, n.RootDir} {
		for _, m := range testenv.MountsUnder(dir) {
			_ = syscall.Unmount(m, syscall.MNT_DETACH)
		}
	}
	if n.removeRootDir {
		_ = os.RemoveAll(n.RootDir)
	}
	removeCgroups(n.cgroupRoot)
	tearDownNode(n.net)
}

// route waits for node IPAM to give every node its pod range, writes the
// kubelet's conflist (nodelet renders its own: runtime.manageCNIConfig),
// and routes every node's range to it from the other nodes and the host.
// The service range goes from the host to the first node, whose kube-proxy
// serves it: kube-apiserver calls webhooks and aggregated APIs there.
func (c *Cluster) route(ctx context.Context) error {
	deadline := time.Now().Add(2 * time.Minute)
	for _, n := range c.Nodes {
		for n.PodCIDR == "" {
			if err := n.agent.exitedErr(); err != nil {
				return err
			}
			node, err := c.Admin.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
			if err == nil {
				n.PodCIDR = node.Spec.PodCIDR
			}
			if n.PodCIDR != "" {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s: no pod CIDR from node IPAM after 2m (registered: %v)", n.Name, err == nil)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(250 * time.Millisecond):
			}
		}
		if c.o.Agent == Kubelet {
			conf, err := cni.Render(cni.Options{NetworkName: cgroupPrefix + n.Name, BridgeName: cniBridge, Subnet: n.PodCIDR})
			if err != nil {
				return err
			}
			if err := cni.WriteAtomic(n.Containerd.CNIConfDir, cni.DefaultFileName, conf); err != nil {
				return err
			}
		}
	}
	for _, n := range c.Nodes {
		for _, other := range c.Nodes {
			if other != n {
				if err := route(n.NetNS, other.PodCIDR, other.IP); err != nil {
					return err
				}
			}
		}
		// What the node itself (and its host-network pods) sends to a
		// Service needs a route before kube-proxy's OUTPUT rules rewrite
		// it; without a default route, this is it. Unrewritten (no
		// endpoints), it ends at the host, which forwards nothing.
		if err := route(n.NetNS, testenv.ServiceClusterIPRange, HostIP); err != nil {
			return err
		}
		if err := route("", n.PodCIDR, n.IP); err != nil {
			return err
		}
		c.o.Log("%s: pods %s", n.Name, n.PodCIDR)
	}
	return route("", testenv.ServiceClusterIPRange, c.Nodes[0].IP)
}

// makeCgroups makes root in every cgroup v1 hierarchy (or the v2 one).
func makeCgroups(root string) error {
	mounts, _ := filepath.Glob("/sys/fs/cgroup/*")
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		mounts = []string{"/sys/fs/cgroup"}
	}
	for _, m := range mounts {
		if st, err := os.Stat(m); err != nil || !st.IsDir() {
			continue
		}
		if err := os.MkdirAll(filepath.Join(m, root), 0o755); err != nil {
			return err
		}
	}
	return nil
}

// removeCgroups removes the cgroups that match pattern (a node's root, or
// "/nlc-*" for every node's) and everything below them, deepest first, in
// every hierarchy.
func removeCgroups(pattern string) {
	mounts, _ := filepath.Glob("/sys/fs/cgroup/*")
	mounts = append(mounts, "/sys/fs/cgroup")
	for _, m := range mounts {
		tops, _ := filepath.Glob(filepath.Join(m, pattern))
		for _, top := range tops {
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
}
