package cluster

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// The cluster's network on this machine. Every node is a network namespace
// with one veth into a bridge of the host's; the host holds the bridge's
// first address, where kube-apiserver listens, and routes each node's pod
// range to that node, as a routed CNI (or the cloud's route controller)
// would. No node has a default route, and the host rejects whatever comes
// off the bridge for anywhere else: nothing a pod sends leaves the machine.
const (
	// BridgeName is the host's bridge the nodes hang off.
	BridgeName = "nlcl0"
	// NodeSubnet is the bridge's subnet: the host is .1, node i .(10+i).
	NodeSubnet = "10.201.0.0/24"
	// HostIP is the host's address on the bridge: kube-apiserver's.
	HostIP = "10.201.0.1"
	// ClusterCIDR is kube-controller-manager's --cluster-cidr: each node
	// gets a /24 of it as spec.podCIDR.
	ClusterCIDR = "10.244.0.0/16"
	// DNSServiceIP is the kube-dns Service's ClusterIP, the nodes'
	// clusterDNS (kubeadm's: the tenth address of the service range).
	DNSServiceIP = "10.96.0.10"
	// ClusterDomain is the nodes' clusterDomain.
	ClusterDomain = "cluster.local"
	// netnsPrefix names the nodes' network namespaces (/run/netns/<prefix><node>).
	netnsPrefix = "nlc-"
	// fenceComment tags the host's iptables rules of the cluster.
	fenceComment = "nodelet-cluster"
	// runDir holds the nodes' UTS namespaces and the machine-wide lock.
	runDir = "/run/nodelet-cluster"
)

// nodeIP is node i's address on the bridge (i from 1).
func nodeIP(i int) string {
	a := netip.MustParsePrefix(NodeSubnet).Addr().As4()
	a[3] = byte(10 + i)
	return netip.AddrFrom4(a).String()
}

// run runs a command and names it in the error.
func run(name string, args ...string) error {
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// inNetns runs a command in node's network namespace.
func inNetns(netns string, name string, args ...string) error {
	return run("ip", append([]string{"netns", "exec", netns, name}, args...)...)
}

// setUpBridge makes the host's bridge with HostIP and the rules that keep
// the cluster's traffic on it.
func setUpBridge() error {
	tearDownBridge() // a killed earlier run's
	prefix := netip.MustParsePrefix(NodeSubnet)
	for _, args := range [][]string{
		{"link", "add", BridgeName, "type", "bridge"},
		{"addr", "add", HostIP + "/" + fmt.Sprint(prefix.Bits()), "dev", BridgeName},
		{"link", "set", BridgeName, "up"},
	} {
		if err := run("ip", args...); err != nil {
			return err
		}
	}
	for _, r := range fenceRules() {
		if err := run("iptables", append([]string{"-w", "-I"}, r...)...); err != nil {
			return err
		}
	}
	return nil
}

// fenceRules are the host's FORWARD rules: between nodes on the bridge
// (bridged frames pass FORWARD with br_netfilter) anything goes; off the
// bridge, or onto it from elsewhere, nothing.
func fenceRules() [][]string {
	tag := []string{"-m", "comment", "--comment", fenceComment}
	return [][]string{
		append([]string{"FORWARD", "-i", BridgeName, "!", "-o", BridgeName}, append(tag, "-j", "REJECT")...),
		append([]string{"FORWARD", "-o", BridgeName, "!", "-i", BridgeName}, append(tag, "-j", "REJECT")...),
		append([]string{"FORWARD", "-i", BridgeName, "-o", BridgeName}, append(tag, "-j", "ACCEPT")...),
	}
}

func tearDownBridge() {
	for _, r := range fenceRules() {
		for exec.Command("iptables", append([]string{"-w", "-D"}, r...)...).Run() == nil {
		}
	}
	_ = exec.Command("ip", "link", "delete", BridgeName).Run()
}

// nodeNet is one node's namespaces.
type nodeNet struct {
	name  string // the node's name, also its hostname
	ip    string
	netns string // name under /run/netns
	uts   string // bind-mounted UTS namespace
}

func (n nodeNet) netnsPath() string { return filepath.Join("/run/netns", n.netns) }

// setUpNode makes node i's network namespace (loopback, eth0 on the bridge,
// forwarding on, no default route) and UTS namespace (hostname = name).
func setUpNode(i int, name string) (nodeNet, error) {
	n := nodeNet{name: name, ip: nodeIP(i), netns: netnsPrefix + name, uts: filepath.Join(runDir, name+".uts")}
	tearDownNode(n) // a killed earlier run's
	hostEnd := fmt.Sprintf("nlcv%d", i)
	prefix := netip.MustParsePrefix(NodeSubnet)
	steps := [][]string{
		{"ip", "netns", "add", n.netns},
		{"ip", "link", "add", hostEnd, "type", "veth", "peer", "name", "eth0", "netns", n.netns},
		{"ip", "link", "set", hostEnd, "master", BridgeName, "up"},
		{"ip", "netns", "exec", n.netns, "ip", "link", "set", "lo", "up"},
		{"ip", "netns", "exec", n.netns, "ip", "addr", "add", n.ip + "/" + fmt.Sprint(prefix.Bits()), "dev", "eth0"},
		{"ip", "netns", "exec", n.netns, "ip", "link", "set", "eth0", "up"},
		// A node routes its pods' traffic; bridged pod traffic passes
		// iptables, as kube-proxy needs (kubeadm's preflight checks both).
		{"ip", "netns", "exec", n.netns, "sysctl", "-qw", "net.ipv4.ip_forward=1"},
	}
	for _, s := range steps {
		if err := run(s[0], s[1:]...); err != nil {
			tearDownNode(n)
			return n, err
		}
	}
	if _, err := os.Stat("/proc/sys/net/bridge/bridge-nf-call-iptables"); err == nil {
		// Per namespace on recent kernels; where it is global it is on.
		_ = inNetns(n.netns, "sysctl", "-qw", "net.bridge.bridge-nf-call-iptables=1")
	}
	if err := os.MkdirAll(runDir, 0o755); err != nil {
		return n, err
	}
	if err := os.WriteFile(n.uts, nil, 0o644); err != nil {
		return n, err
	}
	if err := run("unshare", "--uts="+n.uts, "hostname", name); err != nil {
		tearDownNode(n)
		return n, err
	}
	return n, nil
}

// tearDownLeftovers removes the namespaces of every node a killed earlier
// run left.
func tearDownLeftovers() {
	entries, _ := os.ReadDir("/run/netns")
	for _, e := range entries {
		if name, ok := strings.CutPrefix(e.Name(), netnsPrefix); ok {
			tearDownNode(nodeNet{name: name, netns: e.Name(), uts: filepath.Join(runDir, name+".uts")})
		}
	}
}

func tearDownNode(n nodeNet) {
	_ = exec.Command("ip", "netns", "delete", n.netns).Run()
	if n.uts != "" {
		_ = exec.Command("umount", n.uts).Run()
		_ = os.Remove(n.uts)
	}
}

// route sends dst through via, in netns (or on the host when netns is "").
func route(netns, dst, via string) error {
	args := []string{"route", "replace", dst, "via", via}
	if netns == "" {
		return run("ip", append(args, "dev", BridgeName)...)
	}
	return inNetns(netns, "ip", args...)
}
