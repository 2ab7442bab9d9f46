package cluster

import "path/filepath"

// What a tool that watches a running node needs to know about it (the soak,
// internal/tools/soak): its processes and where the agent, containerd and
// the CNI plugins keep their state. The paths are the ones agents.go and
// node.go give the node (the soak checks them against a nodelet node's
// rendered configuration before it trusts them).

// Agent is what runs as every node's agent.
func (c *Cluster) Agent() Agent { return c.o.Agent }

// AgentPID is the node agent's process id: `nodelet up` (the supervisor,
// whose state file names the daemons under it) or the kubelet.
func (n *Node) AgentPID() int { return n.agent.cmd.Process.Pid }

// ProxyPID is the node's kube-proxy's process id (0 before it starts).
func (n *Node) ProxyPID() int {
	if n.proxy == nil {
		return 0
	}
	return n.proxy.cmd.Process.Pid
}

// CgroupRoot is the node's cgroup root (the same path in every hierarchy):
// the agent's pod cgroups and containerd's container cgroups are below it.
func (n *Node) CgroupRoot() string { return n.cgroupRoot }

// NodeletConfig is the node's nodelet.yaml (only a nodelet node has one).
func (n *Node) NodeletConfig() string { return filepath.Join(n.Dir, "nodelet.yaml") }

// NodeletStateDir is nodelet's node.stateDir: the bus store, the daemons'
// sockets (run/<daemon>), the pods' volumes (pods/<uid>).
func (n *Node) NodeletStateDir() string { return filepath.Join(n.Dir, "state") }

// KubeletRootDir is the kubelet's --root-dir: the pods' volumes (pods/<uid>).
func (n *Node) KubeletRootDir() string { return n.RootDir }

// PodLogsDir is the agent's podLogsDir (<namespace>_<name>_<uid> per pod).
func (n *Node) PodLogsDir() string { return filepath.Join(n.Dir, "pods") }

// CNINetwork is the name of the node's CNI network: host-local keeps its
// leases in /var/lib/cni/networks/<name> (the conflist sets no dataDir).
func (n *Node) CNINetwork() string { return cgroupPrefix + n.Name }

// CNIBridge is the pods' bridge in the node's network namespace: one veth
// of it per pod sandbox.
func (n *Node) CNIBridge() string { return cniBridge }
