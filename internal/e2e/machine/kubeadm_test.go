package machine_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/internal/component"
	"github.com/nodelet/nodelet/internal/e2e"
	"github.com/nodelet/nodelet/internal/testenv"
	"github.com/nodelet/nodelet/internal/testenv/eventually"
	"github.com/nodelet/nodelet/internal/version"
)

// kubeadmIgnored are the preflight checks `kubeadm join` is told to
// ignore in the test, each because it cannot hold in this sandbox (a
// container on a machine other tests share), not because nodelet fails
// it; SystemVerification is added on a cgroup v1 host (cgroupV1Ignored).
var kubeadmIgnored = map[string]string{
	// PortOpenCheck of kubeadmconstants.KubeletPort, 10250 whatever the
	// KubeletConfiguration says: the test moves the kubelet's ports (port,
	// healthzPort) to free ones, since nodes of other tests share the
	// host's network; 10250 may be anyone's.
	"Port-10250": "the node's kubelet API is on a free port (KubeletConfiguration port); 10250 is the shared host's",
}

// cgroupV1Ignored: on a cgroup v1 host SystemVerification (system-validators'
// CgroupsValidator) is an error for any kubelet from v1.35, and its message
// says what to do: failCgroupV1: false in the KubeletConfiguration (which
// the test then sets) and skip this check.
const cgroupV1Ignored = "SystemVerification"

// cgroupV1 says the host mounts cgroup v1 hierarchies (no unified
// hierarchy at /sys/fs/cgroup).
func cgroupV1() bool {
	_, err := os.Stat("/sys/fs/cgroup/cgroup.controllers")
	return err != nil
}

// TestKubeadmJoin: `kubeadm join` with nodelet as the node agent, under a
// real systemd (a Debian 12 root booted with systemd-nspawn) with the
// kubelet unit and kubeadm's drop-in as the packages ship them
// (deploy/kubeadm) and /usr/bin/kubelet a link to nodelet. The control
// plane gets what `kubeadm init` leaves for joiners from kubeadm's own
// phases (upload-config, bootstrap-token) and `kubeadm token create`, and
// kube-controller-manager signs cluster-info (bootstrapsigner) and approves
// and signs the node's CSR (csrapproving, csrsigning). Then, in the
// machine, `kubeadm join` with the token and the CA's hash: the node
// TLS-bootstraps, registers, becomes Ready and runs a pod, and `kubectl
// logs` and `kubectl exec` reach it through kube-apiserver. A restart of
// kubelet.service restarts nodelet and not the pod; a stop stops every
// nodelet process and not the pod.
func TestKubeadmJoin(t *testing.T) {
	root := testenv.RequiresNspawn(t)
	kubeadm, err := testenv.Tool("kubeadm")
	if err != nil {
		t.Fatal(err)
	}
	kcm, err := testenv.Tool("kube-controller-manager")
	if err != nil {
		t.Fatal(err)
	}
	repo, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	tag, rootDir, logsDir := nodeDirs(t, "kubeadm")
	name := "kubeadm-join-" + tag
	cgroupRoot := "/nodelet-kubeadm-" + tag
	t.Cleanup(func() {
		e2e.RemovePodSandboxes(t, ctrd)
		e2e.RemoveCgroupDirs(cgroupRoot)
	})
	admin := cp.AdminClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	t.Cleanup(func() {
		// The Node, its CSRs: nothing of the join stays in the cluster.
		ctx := context.Background()
		_ = admin.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{})
		_ = admin.CoordinationV1().Leases("kube-node-lease").Delete(ctx, name, metav1.DeleteOptions{})
		l, err := admin.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
		if err == nil {
			for _, c := range l.Items {
				if c.Spec.Username == "system:node:"+name || strings.HasPrefix(c.Spec.Username, "system:bootstrap:") && c.Spec.SignerName == certificatesv1.KubeAPIServerClientKubeletSignerName && csrNames(c, name) {
					_ = admin.CertificatesV1().CertificateSigningRequests().Delete(ctx, c.Name, metav1.DeleteOptions{})
				}
			}
		}
	})

	// The control plane: what `kubeadm init` leaves for joiners.
	ctl, err := cp.StartControllersWith(testenv.ControllersOptions{ControllerManager: kcm,
		Controllers: []string{"csrapproving", "csrsigning", "bootstrapsigner"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ctl.Stop)
	port, healthzPort := e2e.FreePort(t), e2e.FreePort(t)
	cfgPath := filepath.Join(t.TempDir(), "kubeadm.yaml")
	initToken := randTokenID(t) + ".0123456789abcdef"
	if err := os.WriteFile(cfgPath, []byte(kubeadmConfig(initToken, port, healthzPort)), 0o600); err != nil {
		t.Fatal(err)
	}
	runKubeadm := func(args ...string) string {
		t.Helper()
		began := time.Now()
		cmd := exec.CommandContext(ctx, kubeadm, args...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("kubeadm %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		t.Logf("kubeadm %s: %s", strings.Join(args, " "), time.Since(began).Round(time.Millisecond))
		return string(out)
	}
	runKubeadm("init", "phase", "upload-config", "all", "--config", cfgPath, "--kubeconfig", cp.AdminKubeconfig)
	runKubeadm("init", "phase", "bootstrap-token", "--config", cfgPath, "--kubeconfig", cp.AdminKubeconfig)
	joinLine := strings.TrimSpace(runKubeadm("token", "create", "--print-join-command", "--ttl", "1h",
		"--description", "nodelet TestKubeadmJoin", "--kubeconfig", cp.AdminKubeconfig))
	joinArgs := strings.Fields(joinLine)
	if len(joinArgs) < 2 || joinArgs[0] != "kubeadm" || joinArgs[1] != "join" {
		t.Fatalf("kubeadm token create --print-join-command printed %q", joinLine)
	}
	token := argAfter(joinArgs, "--token")
	t.Cleanup(func() {
		for _, tok := range []string{token, initToken} {
			_ = exec.Command(kubeadm, "token", "delete", strings.Split(tok, ".")[0], "--kubeconfig", cp.AdminKubeconfig).Run()
		}
	})
	t.Logf("join command: %s", joinLine)

	// The machine: kubeadm's unit, nodelet as /usr/bin/kubelet.
	binds := []string{rootDir, logsDir, ctrd.Dir}
	bindRO := []string{binDir + ":/usr/local/bin", kubeadm + ":/usr/bin/kubeadm"}
	if _, err := os.Stat(ctrd.CNIBinDir); err == nil {
		bindRO = append(bindRO, ctrd.CNIBinDir)
	}
	began := time.Now()
	m := testenv.BootMachine(t, root, binds, bindRO)
	t.Logf("machine booted in %s", time.Since(began).Round(time.Millisecond))
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := m.Run("journalctl", "--no-pager", "-n", "200", "-u", "kubelet")
			t.Logf("journal of kubelet.service:\n%s", out)
		}
	})
	kubeadmNode(t, m, repo, rootDir, logsDir, cgroupRoot)

	// The join.
	var ignore []string
	for check, why := range kubeadmIgnored {
		ignore = append(ignore, check)
		t.Logf("ignoring preflight check %s: %s", check, why)
	}
	if cgroupV1() {
		ignore = append(ignore, cgroupV1Ignored)
		t.Logf("ignoring preflight check %s: a cgroup v1 host (the KubeletConfiguration says failCgroupV1: false, as the check's message asks)", cgroupV1Ignored)
	}
	args := append(joinArgs, "--node-name", name, "--cri-socket", ctrd.Endpoint,
		"--ignore-preflight-errors="+strings.Join(ignore, ","))
	began = time.Now()
	out, err := m.RunFor(8*time.Minute, args...)
	joinTook := time.Since(began)
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("kubeadm join took %s:\n%s", joinTook.Round(time.Millisecond), out)
	if !strings.Contains(out, "This node has joined the cluster") {
		t.Fatalf("kubeadm join did not say the node joined:\n%s", out)
	}

	// TLS bootstrap: the token's CSR, approved by csrapproving as
	// kubeadm's RBAC allows, and the node's client certificate from it.
	tokenUser := "system:bootstrap:" + strings.Split(token, ".")[0]
	csr := bootstrapCSR(ctx, t, tokenUser)
	if csr == nil {
		t.Fatalf("no issued CSR of %s", tokenUser)
	}
	for _, c := range csr.Status.Conditions {
		if c.Type == certificatesv1.CertificateApproved && c.Reason != "AutoApproved" {
			t.Errorf("CSR %s approved by %q, want the csrapproving controller's AutoApproved", csr.Name, c.Reason)
		}
	}
	if _, err := os.Stat(filepath.Join(fmt.Sprintf("/proc/%d/root", m.Leader), "/etc/kubernetes/bootstrap-kubelet.conf")); !os.IsNotExist(err) {
		t.Errorf("/etc/kubernetes/bootstrap-kubelet.conf is still there (%v): kubeadm removes it after the bootstrap", err)
	}
	kc, err := clientcmd.LoadFromFile(filepath.Join(fmt.Sprintf("/proc/%d/root", m.Leader), "/etc/kubernetes/kubelet.conf"))
	if err != nil {
		t.Fatalf("the kubelet's kubeconfig: %v", err)
	}
	var certFile string
	for _, a := range kc.AuthInfos {
		certFile = a.ClientCertificate
	}
	if certFile != filepath.Join(rootDir, "pki", "kubelet-client-current.pem") {
		t.Errorf("kubelet.conf's client certificate is %q, want <root-dir>/pki/kubelet-client-current.pem", certFile)
	}
	cert, _ := e2e.PEMCert(t, certFile)
	e2e.CheckNodeCert(t, cp.CAData, cert, name, x509ClientAuth)

	// Registered and Ready, as the kubelet it stands in for.
	e2e.NodeReadyFresh(ctx, t, admin, name, began, 3*time.Minute)
	n, err := admin.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n.Status.NodeInfo.KubeletVersion != version.Kubelet() || n.Status.DaemonEndpoints.KubeletEndpoint.Port != int32(port) {
		t.Errorf("node %s: kubeletVersion %q, kubelet port %d; want %q, %d", name, n.Status.NodeInfo.KubeletVersion,
			n.Status.DaemonEndpoints.KubeletEndpoint.Port, version.Kubelet(), port)
	}
	unit := kubeletUnit(t, m, len(component.Declared.Processes()))
	t.Logf("kubelet.service: main pid %d (nodelet up), %d daemons under it", unit.mainPID, len(component.Declared.Processes()))
	healthz := fmt.Sprintf("http://127.0.0.1:%d/healthz", healthzPort)
	if body, err := httpGet(healthz); err != nil || body != "ok" {
		t.Errorf("the kubelet's healthz %s: %q %v", healthz, body, err)
	}

	// A pod, and kubectl logs and exec through kube-apiserver.
	ns := cp.Namespace(t)
	pod := e2e.APIPod(nodeName, ns, "kubeadm-pod", "")
	pod.Spec.NodeName = name
	pod.Spec.Containers[0].Command = []string{"sh", "-c", "echo hello from a kubeadm node; trap 'exit 0' TERM; while true; do sleep 1; done"}
	pod, err = admin.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.CoreV1().Pods(ns).Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	})
	began = time.Now()
	eventually.True(t, 2*time.Minute, "the pod Running and Ready", func() bool {
		p, err := admin.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning && e2e.PodReady(p)
	})
	t.Logf("pod Running and Ready %s after its creation", time.Since(began).Round(time.Millisecond))
	kubectl := func(args ...string) string {
		t.Helper()
		out, err := exec.CommandContext(ctx, cp.Kubectl, append([]string{"--kubeconfig", cp.AdminKubeconfig, "-n", ns}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	eventually.True(t, 30*time.Second, "kubectl logs showing the container's line", func() bool {
		return strings.Contains(kubectl("logs", pod.Name), "hello from a kubeadm node")
	})
	if got := strings.TrimSpace(kubectl("exec", pod.Name, "--", "sh", "-c", "echo exec $((6*7))")); got != "exec 42" {
		t.Errorf("kubectl exec: %q, want %q", got, "exec 42")
	}
	before := e2e.CRIContainers(t, ctrd, string(pod.UID))

	// systemctl restart kubelet: a new nodelet, the same container.
	m.MustRun(t, "systemctl", "restart", "kubelet")
	restarted := kubeletUnit(t, m, len(component.Declared.Processes()))
	if restarted.mainPID == unit.mainPID {
		t.Errorf("kubelet.service kept main pid %d through a restart", unit.mainPID)
	}
	e2e.NodeReadyFresh(ctx, t, admin, name, time.Now(), 2*time.Minute)
	if body, err := httpGet(healthz); err != nil || body != "ok" {
		t.Errorf("after the restart, the kubelet's healthz: %q %v", body, err)
	}
	sameContainer(t, before, e2e.CRIContainers(t, ctrd, string(pod.UID)))

	// systemctl stop kubelet: every nodelet process goes, the pod stays.
	m.MustRun(t, "systemctl", "stop", "kubelet")
	if st := strings.Fields(m.MustRun(t, "systemctl", "show", "-p", "ActiveState,Result", "kubelet")); !slices.Contains(st, "ActiveState=inactive") || !slices.Contains(st, "Result=success") {
		t.Errorf("kubelet.service after stop: %q, want inactive and success", st)
	}
	if left, _ := m.Run("sh", "-c", "grep -l nodelet /proc/[0-9]*/comm 2>/dev/null"); strings.TrimSpace(left) != "" {
		t.Errorf("nodelet processes left after systemctl stop kubelet: %s", left)
	}
	sameContainer(t, before, e2e.CRIContainers(t, ctrd, string(pod.UID)))
}
