package machine_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/internal/e2e"
	"github.com/nodelet/nodelet/internal/images"
	"github.com/nodelet/nodelet/internal/testenv"
	"github.com/nodelet/nodelet/internal/testenv/eventually"
	"github.com/nodelet/nodelet/internal/version"
)

// kubeadmDir is kubeadm's fixed directory (kubeadmconstants.KubernetesDir):
// the static pods' manifests, the kubeconfigs the components mount and the
// pki. The manifests' hostPath volumes name it, and the host's containerd
// (not the machine's root) resolves them, so the machine's /etc/kubernetes
// is the host's, bound at the same path, as the node's root dir is.
const kubeadmDir = "/etc/kubernetes"

// kubeadmDirMarker marks a /etc/kubernetes this test made (and may remove).
const kubeadmDirMarker = ".nodelet-kubeadm-init"

// kubeadmInitIgnored are the preflight checks `kubeadm init` is told to
// ignore, each because this sandbox makes it impossible, not nodelet.
var kubeadmInitIgnored = map[string]string{
	"Port-10250": kubeadmIgnored["Port-10250"],
	// A /etc/kubernetes/manifests the test made (empty): kubeadm's
	// DirAvailable check wants the directory absent or empty; the test binds
	// /etc/kubernetes from the host, so it exists.
	"DirAvailable--etc-kubernetes-manifests": "/etc/kubernetes is bound from the host so the host's containerd resolves the manifests' hostPath volumes; its manifests dir exists (empty)",
}

// kubeadmInitSkipped are the phases `kubeadm init` skips.
var kubeadmInitSkipped = map[string]string{
	// The two addons are ordinary workloads of the new cluster (a
	// DaemonSet, a Deployment), not the static pods this test is about;
	// CoreDNS and kube-proxy under nodelet are what the conformance
	// cluster runs (scripts/conformance).
	"addon/kube-proxy": "a DaemonSet of the new cluster, not a static pod; kube-proxy under nodelet is the conformance cluster's",
	"addon/coredns":    "a Deployment of the new cluster, not a static pod; CoreDNS under nodelet is the conformance cluster's",
}

// claimKubeadmDir makes /etc/kubernetes on the host for this test, or
// skips the test when the host has one of its own (a real kubeadm node's,
// never touched). A lock held until the test ends serialises test binaries
// that run TestKubeadmInit at once; with it held, a marked directory is a
// crashed run's.
func claimKubeadmDir(t *testing.T) {
	t.Helper()
	lock, err := os.OpenFile("/run/nodelet-kubeadm-init.lock", os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lock.Close() })
	if entries, err := os.ReadDir(kubeadmDir); err == nil {
		ours := false
		for _, e := range entries {
			ours = ours || e.Name() == kubeadmDirMarker
		}
		if len(entries) > 0 && !ours {
			t.Skipf("the host has a %s of its own; the test binds its /etc/kubernetes there and will not touch it", kubeadmDir)
		}
		if err := os.RemoveAll(kubeadmDir); err != nil {
			t.Fatal(err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(kubeadmDir, "manifests"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(kubeadmDir, kubeadmDirMarker), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(kubeadmDir) })
}

// controlPlaneImages builds the stand-ins of the control plane's images
// from the project's binaries and imports them, with the pause image under
// kubeadm's name for it, into the test containerd.
func controlPlaneImages(ctx context.Context, t *testing.T) {
	t.Helper()
	bins, err := testenv.Binaries()
	if err != nil {
		t.Fatal(err)
	}
	paths := map[string]string{"kube-apiserver": bins.KubeAPIServer}
	for _, c := range []string{"kube-controller-manager", "kube-scheduler", "etcd-static"} {
		if paths[c], err = testenv.Tool(c); err != nil {
			t.Fatal(err)
		}
	}
	began := time.Now()
	for c, bin := range paths {
		ref := "registry.k8s.io/" + c + ":" + version.Kubernetes
		if c == "etcd-static" {
			// kubeadm v1.37's etcd (constants.DefaultEtcdVersion), the
			// project's static build of it.
			c, ref = "etcd", "registry.k8s.io/etcd:"+kubeadmEtcdVersion
		}
		tb, err := images.BuildControlPlaneImage(ctx, bin, c, ref, images.DefaultCacheDir())
		if err != nil {
			t.Fatal(err)
		}
		if err := images.Import(ctx, ctrd.Address, "", tb.Path); err != nil {
			t.Fatal(err)
		}
	}
	// kubeadm's preflight ImagePull wants its pause image present (it
	// would pull it); the node's sandbox image is nodelet's own pause.
	pause := "registry.k8s.io/pause:3.10.2"
	_ = exec.CommandContext(ctx, "ctr", "--address", ctrd.Address, "-n", "k8s.io", "images", "rm", pause).Run()
	if out, err := exec.CommandContext(ctx, "ctr", "--address", ctrd.Address, "-n", "k8s.io", "images", "tag",
		images.PauseImage, pause).CombinedOutput(); err != nil {
		t.Fatalf("ctr images tag %s %s: %v\n%s", images.PauseImage, pause, err, out)
	}
	t.Logf("control plane images built and imported in %s", time.Since(began).Round(time.Millisecond))
}

// kubeadmEtcdVersion is the etcd image tag of kubeadm v1.37
// (kubeadmconstants.DefaultEtcdVersion, SupportedEtcdVersion[37]).
const kubeadmEtcdVersion = "3.7.0-0"

// kubeadmInitConfig: the node's name; the API endpoint on the test
// containerd's bridge address (kubeadm resolves a loopback advertise
// address to the host's default-route address, and the test listens on
// no network of the host's), with kube-apiserver bound there only and on a
// free port (the host's network is shared); the test containerd; the
// kubelet's root and cert dirs as kubelet flags kubeadm knows of
// (kubeadm-flags.env; kubelet-finalize finds the rotated client
// certificate in the cert dir); local etcd (a static pod too) with its data in dataDir (bound from the
// host at the same path: the host's containerd mounts it); and the
// KubeletConfiguration of the join test.
func kubeadmInitConfig(name, apiIP string, apiPort, port, healthzPort int, rootDir, dataDir string) string {
	failCgroupV1 := ""
	if cgroupV1() {
		failCgroupV1 = "failCgroupV1: false\n"
	}
	return fmt.Sprintf(`apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
localAPIEndpoint:
  advertiseAddress: %s
  bindPort: %d
nodeRegistration:
  name: %s
  criSocket: %s
  kubeletExtraArgs:
  - name: root-dir
    value: %s
  - name: cert-dir
    value: %s/pki
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
kubernetesVersion: %s
etcd:
  local:
    dataDir: %s
apiServer:
  extraArgs:
  - name: bind-address
    value: %s
---
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
port: %d
healthzPort: %d
%s`, apiIP, apiPort, name, ctrd.Endpoint, rootDir, rootDir, version.Kubernetes, dataDir, apiIP, port, healthzPort, failCgroupV1)
}

// TestKubeadmInit: `kubeadm init` with nodelet as the node agent, under a
// real systemd (the join test's Debian 12 machine and units). kubeadm
// writes the static pods of etcd, kube-apiserver, kube-controller-manager
// and kube-scheduler into /etc/kubernetes/manifests and waits for the
// kubelet to run them; nodelet runs them from stand-in images of the
// project's binaries (controlPlaneImages). Every phase but the two addons
// runs (kubeadmInitSkipped). Then the node is Ready in the new cluster, the
// static pods' mirror pods are Running and Ready, the new cluster's
// scheduler places a pod on the node (tolerating the control-plane taint)
// and nodelet runs it, and `kubeadm reset -f` takes it all down.
func TestKubeadmInit(t *testing.T) {
	root := testenv.RequiresNspawn(t)
	kubeadm, err := testenv.Tool("kubeadm")
	if err != nil {
		t.Fatal(err)
	}
	repo, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	claimKubeadmDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	controlPlaneImages(ctx, t)

	tag, rootDir, logsDir := nodeDirs(t, "kubeadm")
	name := "kubeadm-init-" + tag
	cgroupRoot := "/nodelet-kubeadm-" + tag
	t.Cleanup(func() {
		e2e.RemovePodSandboxes(t, ctrd)
		e2e.RemoveCgroupDirs(cgroupRoot)
	})
	ports := freePorts(t, 3)
	apiPort, port, healthzPort := ports[0], ports[1], ports[2]
	gw := ensureBridge(t)
	cfg := kubeadmInitConfig(name, gw, apiPort, port, healthzPort, rootDir, filepath.Join(rootDir, "etcd"))

	binds := []string{rootDir, logsDir, ctrd.Dir, kubeadmDir}
	bindRO := []string{binDir + ":/usr/local/bin", kubeadm + ":/usr/bin/kubeadm"}
	if _, err := os.Stat(ctrd.CNIBinDir); err == nil {
		bindRO = append(bindRO, ctrd.CNIBinDir)
	}
	began := time.Now()
	m := testenv.BootMachine(t, root, binds, bindRO)
	t.Logf("machine booted in %s", time.Since(began).Round(time.Millisecond))
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := m.Run("journalctl", "--no-pager", "-n", "300", "-u", "kubelet")
			t.Logf("journal of kubelet.service:\n%s", out)
		}
	})
	kubeadmNode(t, m, repo, rootDir, logsDir, cgroupRoot)
	m.WriteFile(t, "/root/kubeadm.yaml", []byte(cfg), 0o600)
	// The node's /etc/hosts, as Debian's netbase package writes it (the
	// minbase root has none): a hostNetwork pod's /etc/hosts is the
	// node's (the kubelet's nodeHostsFileContent), and without it neither
	// the kubelet nor nodelet can make one ("open /etc/hosts: no such file
	// or directory", CreateContainerConfigError).
	m.WriteFile(t, "/etc/hosts", []byte("127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n"), 0o644)

	var ignore, skip []string
	for check, why := range kubeadmInitIgnored {
		ignore = append(ignore, check)
		t.Logf("ignoring preflight check %s: %s", check, why)
	}
	if cgroupV1() {
		ignore = append(ignore, cgroupV1Ignored)
		t.Logf("ignoring preflight check %s: a cgroup v1 host (the KubeletConfiguration says failCgroupV1: false, as the check's message asks)", cgroupV1Ignored)
	}
	for phase, why := range kubeadmInitSkipped {
		skip = append(skip, phase)
		t.Logf("skipping phase %s: %s", phase, why)
	}
	args := []string{"kubeadm", "init", "--config", "/root/kubeadm.yaml", "--skip-phases=" + strings.Join(skip, ","),
		"--ignore-preflight-errors=" + strings.Join(ignore, ",")}
	began = time.Now()
	out, err := m.RunFor(6*time.Minute, args...)
	initTook := time.Since(began)
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("kubeadm init took %s:\n%s", initTook.Round(time.Millisecond), out)
	for _, want := range []string{"[wait-control-plane]", "[upload-config]", "[upload-certs]", "[mark-control-plane]",
		"[bootstrap-token]", "[kubelet-finalize]", "Your Kubernetes control-plane has initialized successfully",
		// wait-control-plane: the kubelet's healthz, then each component's
		// own health endpoint, the static pods nodelet runs.
		"[kubelet-check] The kubelet is healthy", "kube-apiserver is healthy", "kube-controller-manager is healthy",
		"kube-scheduler is healthy"} {
		if !strings.Contains(out, want) {
			t.Errorf("kubeadm init's output lacks %q", want)
		}
	}
	resetDone := false
	t.Cleanup(func() {
		if t.Failed() {
			// nodelet's own account of the pods, from its bus (the unit's
			// NODELET_* settings are the CLI's too), before the reset.
			for _, p := range []string{"kube-system/etcd-" + name, "kube-system/kube-apiserver-" + name, "default/kubeadm-init-pod"} {
				out, _ := m.Run("sh", "-c", fmt.Sprintf(`export $(sed -n 's/^Environment=\"\(NODELET_[^\"]*\)\"/\1/p' /etc/systemd/system/kubelet.service.d/20-nodelet.conf); nodelet explain --config %s/nodelet.yaml %s`, rootDir, p))
				t.Logf("nodelet explain %s:\n%s", p, out)
			}
		}
		if !resetDone {
			_, _ = m.RunFor(2*time.Minute, "kubeadm", "reset", "-f", "--cri-socket", ctrd.Endpoint)
		}
	})

	// The new cluster, through its admin.conf.
	admin := kubeadmAdmin(t)
	e2e.NodeReadyFresh(ctx, t, admin, name, began, 2*time.Minute)
	n, err := admin.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n.Status.NodeInfo.KubeletVersion != version.Kubelet() {
		t.Errorf("node %s: kubeletVersion %q, want %q", name, n.Status.NodeInfo.KubeletVersion, version.Kubelet())
	}
	if _, ok := n.Labels["node-role.kubernetes.io/control-plane"]; !ok {
		t.Errorf("node %s lacks mark-control-plane's label: %v", name, n.Labels)
	}
	tainted := false
	for _, tt := range n.Spec.Taints {
		tainted = tainted || tt.Key == "node-role.kubernetes.io/control-plane" && tt.Effect == corev1.TaintEffectNoSchedule
	}
	if !tainted {
		t.Errorf("node %s lacks mark-control-plane's taint: %v", name, n.Spec.Taints)
	}

	// The static pods' mirror pods: Running and Ready, critical, on the node.
	for _, c := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
		pod := c + "-" + name
		eventually.True(t, 2*time.Minute, "mirror pod kube-system/"+pod+" Running and Ready", func() bool {
			p, err := admin.CoreV1().Pods("kube-system").Get(ctx, pod, metav1.GetOptions{})
			return err == nil && p.Status.Phase == corev1.PodRunning && e2e.PodReady(p)
		})
		p, err := admin.CoreV1().Pods("kube-system").Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if cs := p.Status.ContainerStatuses; len(cs) == 1 && cs[0].State.Running != nil {
			t.Logf("%s: container running since %s after kubeadm init began (restarts %d)", c,
				cs[0].State.Running.StartedAt.Sub(began).Round(time.Second), cs[0].RestartCount)
		}
		if _, ok := p.Annotations[corev1.MirrorPodAnnotationKey]; !ok {
			t.Errorf("pod %s is not a mirror pod: %v", pod, p.Annotations)
		}
		if p.Spec.NodeName != name || p.Spec.PriorityClassName != "system-node-critical" || !p.Spec.HostNetwork {
			t.Errorf("mirror pod %s: node %q, priorityClassName %q, hostNetwork %v", pod, p.Spec.NodeName, p.Spec.PriorityClassName, p.Spec.HostNetwork)
		}
	}
	healthz := fmt.Sprintf("http://127.0.0.1:%d/healthz", healthzPort)
	if body, err := httpGet(healthz); err != nil || body != "ok" {
		t.Errorf("the kubelet's healthz %s: %q %v", healthz, body, err)
	}

	// A pod the new cluster's scheduler places on the node.
	pod := e2e.APIPod(nodeName, "default", "kubeadm-init-pod", "")
	pod.Spec.NodeName = "" // the scheduler's to choose
	pod.Spec.Tolerations = []corev1.Toleration{{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	pod.Spec.Containers[0].Command = []string{"sh", "-c", "echo hello from a kubeadm control plane; trap 'exit 0' TERM; while true; do sleep 1; done"}
	pod, err = admin.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.CoreV1().Pods("default").Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	})
	began = time.Now()
	var last *corev1.Pod
	t.Cleanup(func() {
		if t.Failed() && last != nil {
			t.Logf("pod %s: node %q, status %+v", last.Name, last.Spec.NodeName, last.Status)
		}
	})
	eventually.True(t, 2*time.Minute, "the scheduled pod Running and Ready on the node", func() bool {
		p, err := admin.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
		if err == nil {
			last = p
		}
		return err == nil && p.Spec.NodeName == name && p.Status.Phase == corev1.PodRunning && e2e.PodReady(p)
	})
	t.Logf("pod scheduled, Running and Ready %s after its creation", time.Since(began).Round(time.Millisecond))

	// kubeadm reset: the static pods and the kubelet's state go.
	began = time.Now()
	out, err = m.RunFor(3*time.Minute, "kubeadm", "reset", "-f", "--cri-socket", ctrd.Endpoint)
	resetDone = true
	if err != nil {
		t.Fatalf("kubeadm reset -f: %v\n%s", err, out)
	}
	t.Logf("kubeadm reset -f took %s", time.Since(began).Round(time.Millisecond))
	if left, _ := filepath.Glob(filepath.Join(kubeadmDir, "manifests", "*.yaml")); len(left) > 0 {
		t.Errorf("manifests left after kubeadm reset: %v", left)
	}
	// reset stops the kubelet and removes the pods' containers through CRI.
	if st, _ := m.Run("systemctl", "is-active", "kubelet"); strings.TrimSpace(st) != "inactive" {
		t.Errorf("kubelet.service after kubeadm reset: %q, want inactive", strings.TrimSpace(st))
	}
	if left := ctrdContainers(t); len(left) > 0 {
		t.Errorf("containers left after kubeadm reset: %v", left)
	}
}

// kubeadmAdmin is a client of the cluster kubeadm made, from its admin.conf.
func kubeadmAdmin(t *testing.T) kubernetes.Interface {
	t.Helper()
	rc, err := clientcmd.BuildConfigFromFlags("", filepath.Join(kubeadmDir, "admin.conf"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// ensureBridge makes the test containerd's CNI bridge with its gateway
// address now, as the CNI bridge plugin (isGateway) makes it on the first
// pod's ADD and keeps it as it finds it, and returns that address: the new
// cluster's API endpoint, there before kubeadm's preflight listens on it.
// The containerd's cleanup removes the bridge.
func ensureBridge(t *testing.T) string {
	t.Helper()
	p, err := netip.ParsePrefix(ctrd.Subnet)
	if err != nil {
		t.Fatal(err)
	}
	gw := p.Masked().Addr().Next()
	cidr := netip.PrefixFrom(gw, p.Bits()).String()
	script := fmt.Sprintf(`ip link show %[1]s >/dev/null 2>&1 || ip link add name %[1]s type bridge || exit 1
ip -4 addr show dev %[1]s | grep -qw %[2]s || ip addr add %[2]s dev %[1]s || exit 1
ip link set %[1]s up`, ctrd.BridgeName, cidr)
	if out, err := exec.Command("sh", "-c", script).CombinedOutput(); err != nil {
		t.Fatalf("bridge %s with %s: %v\n%s", ctrd.BridgeName, cidr, err, out)
	}
	return gw.String()
}

// freePorts are n distinct ports free on every address (kubeadm's
// preflight listens on ":port"), held until all are chosen.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", ":0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

// ctrdContainers are the names of the test containerd's containers.
func ctrdContainers(t *testing.T) []string {
	t.Helper()
	c := ctrd.RuntimeClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := c.Runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range resp.Containers {
		names = append(names, c.Metadata.Name)
	}
	return names
}
