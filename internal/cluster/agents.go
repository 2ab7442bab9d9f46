package cluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/nodelet/nodelet/internal/testenv"
)

// The programs that run on a node, each in the node's namespaces and each
// with a configuration of the node's own. The nodelet node and the kubelet
// node differ only in the agent: same containerd, cgroup root, DNS, pod log
// dir and identity, so the suite's counts compare the agents alone.

// startNodelet runs `nodelet up` in API mode as the node.
func (c *Cluster) startNodelet(n *Node) error {
	cfg := fmt.Sprintf(`node:
  name: %s
  address: %s
  stateDir: %s
  rootDir: %s
  podLogsDir: %s
  resolvConf: %s
  kubeconfig: %s
  clusterDNS: [%s]
  clusterDomain: %s
bus:
  # The node's own loopback: every node's bus listens on the same port.
  listen: 127.0.0.1:4250
runtime:
  endpoint: %s
  # The harness's containerd already answers on the endpoint, so nodelet up uses it.
  manageContainerd: true
  cniConfDir: %s
  cgroupRoot: %s
  cniBridgeName: %s
  cniNetworkName: %s
server:
  # kube-apiserver's kubelet client certificate is signed by the cluster CA.
  authentication:
    x509:
      clientCAFile: %s
# A test machine's disk: testenv.DiskManagementOff.
gc:
%s`, n.Name, n.IP, filepath.Join(n.Dir, "state"), n.RootDir, filepath.Join(n.Dir, "pods"), filepath.Join(n.Dir, "resolv.conf"),
		c.CP.NodeKubeconfigs[n.Name], DNSServiceIP, ClusterDomain,
		n.Containerd.Endpoint, n.Containerd.CNIConfDir, n.cgroupRoot, cniBridge, cgroupPrefix+n.Name, c.CP.ClientCAFile,
		testenv.DiskManagementOff("  "))
	path := filepath.Join(n.Dir, "nodelet.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		return err
	}
	cmd := n.Namespaces().Command(filepath.Join(c.o.Bins.Nodelet, "nodelet"), "up", "--config", path)
	var err error
	n.agent, err = startProcess("nodelet up on "+n.Name, n.AgentLog(), cmd)
	return err
}

// startKubelet runs the kubelet as the node, configured as kubeadm
// configures it where this layout allows (cgroupfs: there is no systemd
// here to drive the systemd driver).
func (c *Cluster) startKubelet(n *Node) error {
	cfg := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: %s
cgroupDriver: cgroupfs
cgroupRoot: %s
failSwapOn: false
failCgroupV1: false
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
clusterDNS: [%s]
clusterDomain: %s
resolvConf: %s
podLogsDir: %s
rotateCertificates: false
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: %s
authorization:
  mode: Webhook
# A test machine's disk: testenv.DiskManagementOff.
%s`, n.Containerd.Endpoint, n.cgroupRoot, DNSServiceIP, ClusterDomain, filepath.Join(n.Dir, "resolv.conf"),
		filepath.Join(n.Dir, "pods"), c.CP.ClientCAFile, testenv.DiskManagementOff(""))
	path := filepath.Join(n.Dir, "kubelet.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		return err
	}
	// One kubelet at a time until its device plugin registration socket is
	// up: the path is fixed, whatever --root-dir says
	// (pluginapi.DevicePluginPath), and the kubelet's registration server
	// removes every socket in it before it binds its own
	// (devicemanager/plugin/v1beta1 server.Start), so two kubelets
	// starting together could both remove, and one then failed to bind,
	// "address already in use", and exited. One after the other, the later
	// one replaces the earlier's socket; no test here uses a device plugin
	// on a kubelet node. Whether this kubelet bound it is asked of the
	// kubelet's own sockets, not of the file: a kubelet of another test
	// (the bench's) may replace the file meanwhile, and a new socket file
	// may get the removed one's inode number, which had this wait see the
	// earlier kubelet's socket for a minute (CI, 2026-12-07).
	kubeletStart.Lock()
	defer kubeletStart.Unlock()
	cmd := n.Namespaces().Command(c.o.Bins.Kubelet, "--config", path,
		"--kubeconfig", c.CP.NodeKubeconfigs[n.Name],
		"--root-dir", n.RootDir,
		"--cert-dir", filepath.Join(n.Dir, "pki"),
		"--hostname-override", n.Name,
		"--node-ip", n.IP)
	var err error
	if n.agent, err = startProcess("kubelet on "+n.Name, n.AgentLog(), cmd); err != nil {
		return err
	}
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if err := n.agent.exitedErr(); err != nil {
			return err
		}
		ok, err := listensOnUnix(n.agent.cmd.Process.Pid, kubeletRegistrationSocket)
		if ok {
			return nil
		}
		if err != nil {
			return errors.Join(n.agent.exitedErr(), err)
		}
	}
	return fmt.Errorf("kubelet on %s: not listening on %s after a minute (log %s)", n.Name, kubeletRegistrationSocket, n.AgentLog())
}

// kubeletRegistrationSocket is the kubelet's device plugin registration
// socket (pluginapi.KubeletSocket in pluginapi.DevicePluginPath).
const kubeletRegistrationSocket = "/var/lib/kubelet/device-plugins/kubelet.sock"

// kubeletStart lets one kubelet start at a time (startKubelet).
var kubeletStart sync.Mutex

// startProxy runs kube-proxy in iptables mode on the node, as kubeadm's
// kube-proxy DaemonSet runs it (host network, the node's name), with the
// identity kubeadm gives it (system:node-proxier's).
func (c *Cluster) startProxy(n *Node) error {
	cfg := fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: %s
mode: iptables
clusterCIDR: %s
hostnameOverride: %s
bindAddress: 0.0.0.0
healthzBindAddress: 0.0.0.0:10256
metricsBindAddress: 127.0.0.1:10249
conntrack:
  # Leave the machine's conntrack table size alone.
  maxPerCore: 0
`, c.CP.ProxyKubeconfig, ClusterCIDR, n.Name)
	path := filepath.Join(n.Dir, "kube-proxy.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		return err
	}
	cmd := n.Namespaces().Command(c.o.Bins.KubeProxy, "--config", path)
	var err error
	n.proxy, err = startProcess("kube-proxy on "+n.Name, filepath.Join(n.Dir, "kube-proxy.log"), cmd)
	return err
}
