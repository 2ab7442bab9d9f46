package soak

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"k8s.io/client-go/kubernetes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubetypes "k8s.io/kubelet/pkg/types"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/cluster"
	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/internal/containerd"
	"github.com/nodelet/nodelet/internal/containerd/scratch"
	"github.com/nodelet/nodelet/internal/daemon"
	"github.com/nodelet/nodelet/internal/supervisor"
	"github.com/nodelet/nodelet/internal/tools/bench"
)

// CRI labels of a pod's sandboxes and containers (the kubelet's).
const (
	labelPodName      = kubetypes.KubernetesPodNameLabel
	labelPodNamespace = kubetypes.KubernetesPodNamespaceLabel
)

var errNoStatusMetrics = errors.New("nodelet-status's metrics have no nodelet_events_posted_total")

// nodeView reads one node of a running cluster from the host: its agent's
// processes, its containerd through CRI, and what pods leave in its
// namespaces, dirs and cgroups; for nodelet also its bus.
type nodeView struct {
	agent cluster.Agent
	n     *cluster.Node
	admin kubernetes.Interface
	conn  *grpc.ClientConn
	cri   runtimeapi.RuntimeServiceClient
	// stateDir is nodelet's state dir ("" for the kubelet), podsDir the
	// agent's pods dir (one per pod: its volumes).
	stateDir, podsDir string
	cgroupRoot        string
	hostLocal         string
	bus               *busReader
	status            *daemon.RemoteGatherer
	events            *received
	sockets           map[string]*http.Client
}

func openNode(ctx context.Context, c *cluster.Cluster, n *cluster.Node) (_ *nodeView, err error) {
	v := &nodeView{agent: c.Agent(), n: n, admin: c.Admin, sockets: map[string]*http.Client{},
		hostLocal: filepath.Join("/var/lib/cni/networks", n.CNINetwork())}
	v.cgroupRoot = filepath.Join("/sys/fs/cgroup/memory", n.CgroupRoot())
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		v.cgroupRoot = filepath.Join("/sys/fs/cgroup", n.CgroupRoot())
	}
	if v.conn, err = containerd.Dial(n.Containerd.Address); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			v.Close()
		}
	}()
	v.cri = runtimeapi.NewRuntimeServiceClient(v.conn)
	if v.agent == cluster.Kubelet {
		v.podsDir = filepath.Join(n.KubeletRootDir(), "pods")
	} else {
		cfg, err := config.LoadFile(n.NodeletConfig())
		if err != nil {
			return nil, err
		}
		// The harness's accessors are what the soak trusts: hold them to
		// the configuration the node runs with.
		for _, p := range [][2]string{{cfg.Node.StateDir, n.NodeletStateDir()}, {cfg.Node.PodLogsDir, n.PodLogsDir()},
			{cfg.Runtime.CgroupRoot, n.CgroupRoot()}, {cfg.Runtime.CNINetworkName, n.CNINetwork()},
			{cfg.Runtime.CNIBridgeName, n.CNIBridge()}} {
			if p[0] != p[1] {
				return nil, fmt.Errorf("%s: the node's configuration says %q where the harness says %q", n.Name, p[0], p[1])
			}
		}
		v.stateDir = cfg.Node.StateDir
		v.podsDir = filepath.Join(v.stateDir, "pods")
		v.status = daemon.NewRemoteGatherer(v.stateDir, bus.Status)
		if v.bus, err = dialBus(v.stateDir, filepath.Join("/run/netns", n.NetNS), cfg.Bus.Listen); err != nil {
			return nil, err
		}
	}
	if v.events, err = watchEvents(ctx, c.Admin, n.Name); err != nil {
		return nil, err
	}
	return v, nil
}

func (v *nodeView) Close() {
	if v.bus != nil {
		v.bus.Close()
	}
	if v.conn != nil {
		_ = v.conn.Close()
	}
}

// procs names the node's processes: the agent's (the supervisor and its
// daemons from its state file, or the kubelet), containerd and kube-proxy.
func (v *nodeView) procs() (map[string]int, map[string]bool, error) {
	pids := map[string]int{"containerd": v.n.Containerd.Pid(), "kube-proxy": v.n.ProxyPID()}
	agent := map[string]bool{}
	if v.agent == cluster.Kubelet {
		pids["kubelet"], agent["kubelet"] = v.n.AgentPID(), true
		return pids, agent, nil
	}
	pids["supervisor"], agent["supervisor"] = v.n.AgentPID(), true
	st, err := supervisor.ReadState(v.stateDir)
	if err != nil {
		return pids, agent, err
	}
	for _, p := range st {
		pids[p.Name], agent[p.Name] = p.PID, true
	}
	return pids, agent, nil
}

// sample takes the node's figures now; what cannot be read is left zero
// and named in the error.
func (v *nodeView) sample(ctx context.Context) (Sample, error) {
	var errs []error
	s := Sample{Procs: map[string]Proc{}}
	pids, agent, err := v.procs()
	errs = append(errs, err)
	for name, pid := range pids {
		p, err := readProc(pid)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
			continue
		}
		p.Agent = agent[name]
		p.Goroutines = v.goroutines(ctx, name)
		s.Procs[name] = p
	}
	inv, err := v.inventory(ctx, false)
	errs = append(errs, err)
	s.Node = inv.counts
	if v.bus != nil {
		s.Bus, err = v.bus.streams(ctx)
		errs = append(errs, err)
	}
	ev, err := v.tallyEvents(s.Bus)
	errs = append(errs, err)
	s.Events = &ev
	return s, errors.Join(errs...)
}

// tallyEvents is the node's events so far; for nodelet with the bus's
// producer streams (streams, when already read) and status's counters.
func (v *nodeView) tallyEvents(streams map[string]Stream) (Events, error) {
	ev := v.events.tally()
	if v.bus == nil {
		return ev, nil
	}
	var err error
	if streams == nil {
		if streams, err = v.bus.streams(context.Background()); err != nil {
			return ev, err
		}
	}
	ev.Produced = produced(streams)
	ev.Posted, ev.Dropped, err = statusCounters(v.status)
	return ev, err
}

// inventoried is an Inventory with its counts.
type inventoried struct {
	Inventory
	counts Counts
}

// inventory reads what pods leave on the node; withKeys also lists the
// bus's live keys (a read of every bucket: only at rest).
func (v *nodeView) inventory(ctx context.Context, withKeys bool) (inventoried, error) {
	var inv inventoried
	var errs []error
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if cs, err := v.cri.ListContainers(cctx, &runtimeapi.ListContainersRequest{}); err != nil {
		errs = append(errs, fmt.Errorf("CRI ListContainers: %w", err))
	} else {
		for _, c := range cs.Containers {
			inv.Containers = append(inv.Containers, fmt.Sprintf("%.12s %s/%s %s %s", c.Id, c.Labels[labelPodNamespace],
				c.Labels[labelPodName], c.GetMetadata().GetName(), c.State))
			if c.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
				inv.counts.ContainersRunning++
			}
		}
	}
	if sbs, err := v.cri.ListPodSandbox(cctx, &runtimeapi.ListPodSandboxRequest{}); err != nil {
		errs = append(errs, fmt.Errorf("CRI ListPodSandbox: %w", err))
	} else {
		for _, sb := range sbs.Items {
			inv.Sandboxes = append(inv.Sandboxes, fmt.Sprintf("%.12s %s/%s %s", sb.Id, sb.GetMetadata().GetNamespace(),
				sb.GetMetadata().GetName(), sb.State))
			if sb.State == runtimeapi.PodSandboxState_SANDBOX_READY {
				inv.counts.SandboxesReady++
			}
		}
	}
	if f, err := os.Open("/proc/self/mountinfo"); err != nil {
		errs = append(errs, err)
	} else {
		inv.Mounts, err = ParseMountinfo(f, []string{v.n.Dir, v.n.Containerd.Dir, v.n.Containerd.Root})
		f.Close()
		errs = append(errs, err)
	}
	var err error
	inv.PodCgroups, inv.counts.Cgroups, err = Cgroups(v.cgroupRoot)
	errs = append(errs, err)
	inv.IPs, err = HostLocalLeases(v.hostLocal)
	errs = append(errs, err)
	if out, err := exec.CommandContext(cctx, "ip", "netns", "exec", v.n.NetNS, "iptables-save").Output(); err != nil {
		errs = append(errs, fmt.Errorf("iptables-save in %s: %w", v.n.NetNS, err))
	} else {
		rules, err := ParseIPTablesSave(bytes.NewReader(out))
		errs = append(errs, err)
		inv.counts.IPTables, inv.counts.CNIRules = iptablesCounts(rules)
		inv.IPTables = podRules(rules)
	}
	inv.Veths, err = bridgePorts(cctx, v.n.NetNS, v.n.CNIBridge())
	errs = append(errs, err)
	inv.PodLogDirs, err = dirNames(v.n.PodLogsDir())
	errs = append(errs, err)
	inv.PodDirs, err = dirNames(v.podsDir)
	errs = append(errs, err)
	inv.CNINetns = cniNetns()
	if withKeys && v.bus != nil {
		inv.BusKeys, err = v.bus.liveKeys(ctx)
		errs = append(errs, err)
	}
	for _, l := range [][]string{inv.Containers, inv.Sandboxes, inv.Mounts, inv.PodCgroups, inv.IPs, inv.Veths,
		inv.PodLogDirs, inv.PodDirs, inv.BusKeys, inv.CNINetns} {
		sort.Strings(l)
	}
	c := &inv.counts
	c.Containers, c.Sandboxes, c.Mounts, c.PodCgroups = len(inv.Containers), len(inv.Sandboxes), len(inv.Mounts), len(inv.PodCgroups)
	c.IPs, c.Veths, c.PodLogDirs, c.PodDirs = len(inv.IPs), len(inv.Veths), len(inv.PodLogDirs), len(inv.PodDirs)
	c.CNINetns, c.BusKeys = len(inv.CNINetns), len(inv.BusKeys)
	c.Shims = len(scratch.ShimPIDs(v.n.Containerd.Address))
	return inv, errors.Join(errs...)
}

// rest is the node at rest: a sample and its inventory with the bus's keys.
func (v *nodeView) rest(ctx context.Context) (*Rest, error) {
	s, err := v.sample(ctx)
	inv, ierr := v.inventory(ctx, true)
	s.Node = inv.counts
	return &Rest{Sample: s, Inventory: inv.Inventory}, errors.Join(err, ierr)
}

// bridgePorts lists the interfaces enslaved to bridge in netns (none when
// the bridge does not exist yet).
func bridgePorts(ctx context.Context, netns, bridge string) ([]string, error) {
	out, err := exec.CommandContext(ctx, "ip", "-n", netns, "-o", "link", "show", "master", bridge).CombinedOutput()
	if err != nil {
		if bytes.Contains(out, []byte("does not exist")) || bytes.Contains(out, []byte("Cannot find device")) {
			return nil, nil
		}
		return nil, fmt.Errorf("ip link show master %s: %w: %s", bridge, err, bytes.TrimSpace(out))
	}
	return ParseLinkNames(out), nil
}

// ParseLinkNames reads the interface names of `ip -o link show` lines
// ("7: veth1234@if2: <…"), without the peer's suffix.
func ParseLinkNames(out []byte) []string {
	var names []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		name := strings.TrimSuffix(f[1], ":")
		name, _, _ = strings.Cut(name, "@")
		names = append(names, name)
	}
	return names
}

// goroutines asks a process how many goroutines it runs: a nodelet
// daemon through the Go runtime's profile on its metrics socket (the
// socket nodelet-server federates /metrics from; the daemons' own
// registries have no go_* series, the profile is served for every one);
// the kubelet through its /metrics, by way of the API server's node proxy.
// -1 for the others.
func (v *nodeView) goroutines(ctx context.Context, name string) int {
	switch {
	case v.agent == cluster.Kubelet && name == "kubelet":
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		b, err := v.admin.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", v.n.Name, "proxy", "metrics").DoRaw(cctx)
		if err != nil {
			return -1
		}
		if g, ok := MetricValue(b, "go_goroutines"); ok {
			return int(g)
		}
	case v.stateDir != "" && name != "supervisor" && name != "containerd" && name != "kube-proxy":
		c := v.socketClient(name)
		resp, err := c.Get("http://" + name + "/debug/pprof/goroutine?debug=1")
		if err != nil {
			return -1
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
		if g, err := GoroutineTotal(b); err == nil {
			return g
		}
	}
	return -1
}

func (v *nodeView) socketClient(component string) *http.Client {
	if c, ok := v.sockets[component]; ok {
		return c
	}
	sock := daemon.MetricsSocket(v.stateDir, component)
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}}}
	v.sockets[component] = c
	return c
}

// MetricValue reads an unlabelled sample of the Prometheus text format
// ("go_goroutines 123").
func MetricValue(text []byte, name string) (float64, bool) {
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), name+" ")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			return 0, false
		}
		x, err := strconv.ParseFloat(f[0], 64)
		return x, err == nil
	}
	return 0, false
}

// readProc reads one process's memory, fds and threads.
func readProc(pid int) (Proc, error) {
	if pid <= 0 {
		return Proc{}, errors.New("not running")
	}
	p := Proc{PID: pid, Goroutines: -1}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return p, err
	}
	m, err := bench.ParseStatus(status)
	if err != nil {
		return p, err
	}
	p.RSS = m.RSS
	p.Threads = statusField(status, "Threads")
	p.PSS, p.PSSAnon, err = bench.ReadPSS(pid)
	if err != nil {
		return p, err
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return p, err
	}
	p.FDs = len(fds)
	if p.CPU, err = readCPU(pid); err != nil {
		return p, err
	}
	p.DiskRead, p.DiskWrite, err = readIO(pid)
	p.IO = err == nil
	return p, err
}

// readIO is a process's bytes read from and written to storage
// (proc(5) /proc/<pid>/io): read_bytes, and write_bytes less
// cancelled_write_bytes (dirty pages of a file truncated before
// writeback never reach the disk).
func readIO(pid int) (read, written uint64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return 0, 0, err
	}
	f := map[string]uint64{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		if n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64); err == nil {
			f[k] = n
		}
	}
	for _, k := range []string{"read_bytes", "write_bytes", "cancelled_write_bytes"} {
		if _, ok := f[k]; !ok {
			return 0, 0, fmt.Errorf("/proc/%d/io: no %s", pid, k)
		}
	}
	return f["read_bytes"], f["write_bytes"] - min(f["cancelled_write_bytes"], f["write_bytes"]), nil
}

// userHZ is the unit of /proc/<pid>/stat's times (USER_HZ, 100 on every
// Linux architecture Go runs on).
const userHZ = 100

// readCPU is a process's utime + stime, in seconds (proc(5): fields 14
// and 15 of /proc/<pid>/stat, counted after the command's closing paren,
// which may itself hold spaces).
func readCPU(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command", pid)
	}
	// After ") ": field 3 (state) is f[0], so field n is f[n-3].
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	utime, err1 := strconv.ParseUint(f[11], 10, 64)
	stime, err2 := strconv.ParseUint(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return float64(utime+stime) / userHZ, nil
}

// statusField reads an integer field of /proc/<pid>/status ("Threads:\t12").
func statusField(status []byte, key string) int {
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), key+":"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}
