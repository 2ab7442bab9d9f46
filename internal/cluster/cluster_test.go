package cluster

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodelet/nodelet/internal/images"
	"github.com/nodelet/nodelet/internal/testenv"
)

// TestTwoNodes: a cluster of two nodes — nodelet's, and the kubelet's on
// the same layout — where a pod on node-1 reaches, by the Service's DNS
// name, a pod on node-2 behind a Service (kube-proxy on node-1, routes
// between the nodes' pod ranges, cluster DNS); both nodes are Ready with a
// pod range of their own; and Stop leaves nothing behind.
func TestTwoNodes(t *testing.T) {
	testenv.RequiresRoot(t)
	bins := testBinaries(t)
	for _, agent := range []Agent{Nodelet, Kubelet} {
		t.Run(string(agent), func(t *testing.T) { twoNodes(t, agent, bins) })
	}
}

// The host's root dir is one directory: a cluster of more nodes than one
// cannot have it, and says so before it starts anything.
func TestHostRootDirNeedsOneNode(t *testing.T) {
	_, err := Start(context.Background(), Options{Nodes: 2, HostRootDir: true})
	if err == nil || !strings.Contains(err.Error(), "only one node, not 2") {
		t.Fatalf("Start(Nodes 2, HostRootDir) = %v, want a refusal naming the node count", err)
	}
}

func twoNodes(t *testing.T, agent Agent, bins Binaries) {
	work := filepath.Join(t.TempDir(), "work")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	o := Options{Nodes: 2, Agent: agent, Work: work, Bins: bins, LockWait: 20 * time.Minute,
		Images: []images.Tarball{fetchImage(ctx, t)}, Log: func(f string, a ...any) { t.Logf(f, a...) }}
	img, err := images.BuildCoreDNS(ctx, bins.CoreDNS, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	o.Images, o.DNSImage = append(o.Images, img), img.Ref
	c, err := Start(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			c.Stop()
		}
	}()
	cidrs := map[string]bool{}
	for _, n := range c.Nodes {
		node, err := c.Admin.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if ok, why := nodeReady(node); !ok || node.Spec.PodCIDR == "" || cidrs[node.Spec.PodCIDR] {
			t.Fatalf("%s: ready %v (%s), pod CIDR %q (others %v)", n.Name, ok, why, node.Spec.PodCIDR, cidrs)
		}
		cidrs[node.Spec.PodCIDR] = true
		checkDiskThresholds(ctx, t, c, n.Name)
		// Each agent has a root dir of its own: with one shared
		// /var/lib/kubelet the second nodelet node's kubelet.sock (the
		// device plugin Registration service) replaced the first's.
		if !strings.HasPrefix(n.RootDir, n.Dir+"/") {
			t.Errorf("%s: root dir %s is not the node's own", n.Name, n.RootDir)
		} else if sock := filepath.Join(n.RootDir, "device-plugins", "kubelet.sock"); agent == Nodelet {
			if _, err := os.Stat(sock); err != nil {
				t.Errorf("%s: %v", n.Name, err)
			}
		}
	}

	ns := "two-nodes"
	if _, err := c.Admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitDefaultServiceAccount(ctx, t, c, ns)
	server := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{
			NodeName: "node-2",
			Containers: []corev1.Container{{Name: "web", Image: images.BusyboxImage, ImagePullPolicy: corev1.PullNever,
				Command: []string{"sh", "-c", "mkdir -p /www && echo hello from $(hostname) > /www/index.html && exec httpd -f -p 8080 -h /www"},
				Ports:   []corev1.ContainerPort{{ContainerPort: 8080}}}},
		},
	}
	if _, err := c.Admin.CoreV1().Pods(ns).Create(ctx, server, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}
	svc, err = c.Admin.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	target := "web." + ns + ".svc." + ClusterDomain
	client := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "client"},
		Spec: corev1.PodSpec{
			NodeName:      "node-1",
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "client", Image: fetchRef, ImagePullPolicy: corev1.PullNever,
				Command: []string{"/fetch", "http://" + target + "/"}}},
		},
	}
	if _, err := c.Admin.CoreV1().Pods(ns).Create(ctx, client, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var phase corev1.PodPhase
	for deadline := time.Now().Add(3 * time.Minute); time.Now().Before(deadline); time.Sleep(time.Second) {
		p, err := c.Admin.CoreV1().Pods(ns).Get(ctx, "client", metav1.GetOptions{})
		if err == nil {
			phase = p.Status.Phase
		}
		if phase == corev1.PodSucceeded || phase == corev1.PodFailed {
			break
		}
	}
	out, err := c.Admin.CoreV1().Pods(ns).GetLogs("client", &corev1.PodLogOptions{}).DoRaw(ctx)
	if phase != corev1.PodSucceeded || !strings.Contains(string(out), "hello from web") {
		t.Fatalf("client on node-1 to %s: phase %s, log %q (%v)", target, phase, out, err)
	}

	var pids []int
	for _, n := range c.Nodes {
		pids = append(pids, n.Containerd.Pid(), n.agent.cmd.Process.Pid, n.proxy.cmd.Process.Pid)
	}
	c.Stop()
	stopped = true
	checkNothingLeft(t, c, work, pids)
}

const fetchRef = "nodelet.local/fetch:test"

// fetchImage is busybox with testdata/fetch, a static HTTP client with Go's
// resolver, as /fetch.
func fetchImage(ctx context.Context, t *testing.T) images.Tarball {
	t.Helper()
	dir := t.TempDir()
	src, err := filepath.Abs("testdata/fetch")
	if err != nil {
		t.Fatal(err)
	}
	if err := testenv.BuildStatic(dir, src); err != nil {
		t.Fatal(err)
	}
	bin, err := os.ReadFile(filepath.Join(dir, "fetch"))
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: "fetch", Mode: 0o755, Size: int64(len(bin)), Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write(bin); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	layer, err := tarball.LayerFromReader(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	base, err := images.BusyboxImageFrom(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(base, layer)
	if err != nil {
		t.Fatal(err)
	}
	tb, err := images.Write(img, fetchRef, filepath.Join(dir, "fetch.tar"))
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

// testBinaries builds (or takes from the cache) what a cluster runs.
func testBinaries(t *testing.T) Binaries {
	t.Helper()
	var b Binaries
	for name, dst := range map[string]*string{"kube-controller-manager": &b.KubeControllerManager,
		"kube-scheduler": &b.KubeScheduler, "kube-proxy": &b.KubeProxy, "coredns": &b.CoreDNS, "kubelet": &b.Kubelet} {
		p, err := testenv.Tool(name)
		if err != nil {
			t.Fatal(err)
		}
		*dst = p
	}
	b.Nodelet = filepath.Join(t.TempDir(), "bin")
	if err := testenv.BuildBinaries(b.Nodelet); err != nil {
		t.Fatal(err)
	}
	return b
}

func waitDefaultServiceAccount(ctx context.Context, t *testing.T, c *Cluster, ns string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if _, err := c.Admin.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{}); err == nil {
			return
		}
	}
	t.Fatalf("no ServiceAccount default in %s", ns)
}

// checkNothingLeft looks for anything of the cluster after Stop: its
// processes (pids) and any of its dirs', mounts, namespaces, the bridge,
// iptables rules, cgroups, routes and directories. (The containerds' slot
// dirs are not the cluster's alone: other tests take the slots next.)
func checkNothingLeft(t *testing.T, c *Cluster, work string, pids []int) {
	t.Helper()
	for _, pid := range pids {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			t.Errorf("process %d left running: %s", pid, bytes.ReplaceAll(b, []byte{0}, []byte{' '}))
		}
	}
	dirs := []string{work, c.CP.Dir}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.ReplaceAll(string(b), "\x00", " ")
		for _, d := range dirs {
			if strings.Contains(args, d) {
				t.Errorf("process %s left running: %s", e.Name(), args)
			}
		}
	}
	mounts := readMounts(t)
	for _, d := range dirs {
		for _, m := range mounts {
			if strings.Contains(m, d) {
				t.Errorf("mount left: %s", m)
			}
		}
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("dir %s left (%v)", d, err)
		}
	}
	if out, _ := exec.Command("ip", "netns", "list").Output(); strings.Contains(string(out), netnsPrefix) {
		t.Errorf("network namespaces left: %s", out)
	}
	if out, err := exec.Command("ip", "link", "show", BridgeName).CombinedOutput(); err == nil {
		t.Errorf("bridge left: %s", out)
	}
	if out, _ := exec.Command("ip", "route").Output(); strings.Contains(string(out), BridgeName) {
		t.Errorf("routes left: %s", out)
	}
	if rules, _ := exec.Command("iptables-save").Output(); strings.Contains(string(rules), fenceComment) {
		t.Errorf("iptables rules left:\n%s", rules)
	}
	if cgs, _ := filepath.Glob("/sys/fs/cgroup/*/" + cgroupPrefix + "*"); len(cgs) > 0 {
		t.Errorf("cgroups left: %q", cgs)
	}
	if uts, _ := filepath.Glob(filepath.Join(runDir, "*.uts")); len(uts) > 0 {
		t.Errorf("UTS namespaces left: %q", uts)
	}
}

func readMounts(t *testing.T) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}

// checkDiskThresholds: the agent runs with disk pressure and image GC off
// (testenv.DiskManagementOff), as its /configz says through the API server's proxy;
// with the defaults a busy shared disk tainted every node and nothing
// scheduled.
func checkDiskThresholds(ctx context.Context, t *testing.T, c *Cluster, node string) {
	t.Helper()
	b, err := c.Admin.CoreV1().RESTClient().Get().Resource("nodes").Name(node).SubResource("proxy", "configz").DoRaw(ctx)
	if err != nil {
		t.Errorf("%s: /configz: %v", node, err)
		return
	}
	var z struct {
		KubeletConfig struct {
			EvictionHard                map[string]string `json:"evictionHard"`
			ImageGCHighThresholdPercent int               `json:"imageGCHighThresholdPercent"`
		} `json:"kubeletconfig"`
	}
	if err := json.Unmarshal(b, &z); err != nil {
		t.Errorf("%s: /configz: %v: %s", node, err, b)
		return
	}
	kc := z.KubeletConfig
	for _, sig := range []string{"nodefs.available", "nodefs.inodesFree", "imagefs.available"} {
		if v, ok := kc.EvictionHard[sig]; ok && v != "0%" {
			t.Errorf("%s: evictionHard %s = %q, want 0%% or none", node, sig, v)
		}
	}
	if kc.ImageGCHighThresholdPercent != 100 {
		t.Errorf("%s: imageGCHighThresholdPercent = %d, want 100 (off)", node, kc.ImageGCHighThresholdPercent)
	}
}
