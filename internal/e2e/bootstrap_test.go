package e2e_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodelet/nodelet/internal/e2e"
	"github.com/nodelet/nodelet/internal/kubeclient"
	"github.com/nodelet/nodelet/internal/kubeletmetrics"
	"github.com/nodelet/nodelet/internal/testenv"
	"github.com/nodelet/nodelet/internal/testenv/eventually"
)

// bootstrapNode starts kube-controller-manager's CSR controllers (signing
// certificates for signingDuration) and a node that has only a bootstrap
// kubeconfig (a bootstrap token, with kubeadm's RBAC bindings for
// auto-approval) and the extra node and server lines.
func bootstrapNode(t *testing.T, name string, signingDuration time.Duration, nodeLines, serverLines string) (*e2e.Node, string) {
	t.Helper()
	testenv.RequiresRoot(t)
	kcm, err := testenv.Tool("kube-controller-manager")
	if err != nil {
		t.Fatal(err)
	}
	ctl, err := cp.StartControllersWith(testenv.ControllersOptions{ControllerManager: kcm,
		Controllers: []string{"csrapproving", "csrsigning"}, ClusterSigningDuration: signingDuration})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ctl.Stop)
	dir := t.TempDir()
	boot := filepath.Join(dir, "bootstrap.kubeconfig")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := cp.BootstrapKubeconfig(ctx, boot); err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(dir, "kubelet.kubeconfig")
	n := e2e.NewNode(t, e2e.NodeOptions{Name: name, ServerAddress: "0.0.0.0",
		Node:   fmt.Sprintf("  kubeconfig: %s\n  bootstrapKubeconfig: %s\n%s", kubeconfig, boot, nodeLines),
		Server: "  authentication:\n    x509:\n      clientCAFile: " + cp.ClientCAFile + "\n" + serverLines})
	return n, kubeconfig
}

// configPod is an API pod on node name that mounts a ConfigMap: running it
// takes sources (the pod), runtime (the ConfigMap, which the Node
// authorizer lets the node read only for its own pods) and status.
func configPod(ctx context.Context, t *testing.T, admin kubernetes.Interface, ns, name, node string) {
	t.Helper()
	if _, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"k": "v"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := e2e.APIPod(nodeName, ns, name, "")
	p.Spec.NodeName = node
	p.Spec.Volumes = []corev1.Volume{{Name: "cfg", VolumeSource: corev1.VolumeSource{
		ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: name}}}}}
	p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "cfg", MountPath: "/cfg"}}
	if _, err := admin.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 90*time.Second, "pod "+name+" Running and Ready in the API", func() bool {
		p, err := admin.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning && e2e.PodReady(p) && p.Status.PodIP != ""
	})
}

// servedCert is the certificate nodelet-server presents on port.
func servedCert(port int) (*x509.Certificate, error) {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		&tls.Config{InsecureSkipVerify: true}) //nolint:gosec // the test verifies the chain itself
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0], nil
}

// clientCSRs lists the node client CSRs of the node: those of the
// bootstrap token (system:bootstrap:<id>) and its renewals
// (system:node:<name>), issued ones only.
func clientCSRs(ctx context.Context, t *testing.T, admin kubernetes.Interface, name string) (bootstrap, renewals int) {
	t.Helper()
	l, err := admin.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range l.Items {
		if c.Spec.SignerName != certificatesv1.KubeAPIServerClientKubeletSignerName || len(c.Status.Certificate) == 0 {
			continue
		}
		switch {
		case c.Spec.Username == "system:node:"+name:
			renewals++
		case len(c.Spec.Groups) > 0 && contains(c.Spec.Groups, "system:bootstrappers"):
			bootstrap++
		}
	}
	return bootstrap, renewals
}

func contains(l []string, s string) bool {
	for _, v := range l {
		if v == s {
			return true
		}
	}
	return false
}

// approveServingCSRs approves, as a cluster admin would, every
// kubernetes.io/kubelet-serving CSR node name makes, until ctx ends; it
// returns how many it approved so far.
func approveServingCSRs(ctx context.Context, admin kubernetes.Interface, name string) func() int {
	var mu sync.Mutex
	n := 0
	go func() {
		for ctx.Err() == nil {
			l, err := admin.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
			if err == nil {
				for _, c := range l.Items {
					if c.Spec.SignerName != certificatesv1.KubeletServingSignerName || c.Spec.Username != "system:node:"+name || len(c.Status.Conditions) > 0 {
						continue
					}
					c.Status.Conditions = append(c.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
						Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue,
						Reason: "TestApproved", Message: "approved by the e2e test as an admin"})
					// An error (a conflict) is tried again on the next round.
					if _, err := admin.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, c.Name, &c, metav1.UpdateOptions{}); err == nil {
						mu.Lock()
						n++
						mu.Unlock()
					}
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}()
	return func() int {
		mu.Lock()
		defer mu.Unlock()
		return n
	}
}

// TestTLSBootstrapRotation is issue 22's node identity: a node with only a
// bootstrap kubeconfig gets its client certificate from a CSR that
// kube-controller-manager approves and signs (3 minutes of life here),
// registers, becomes Ready and runs an API pod; the certificate files are
// 0600; the certificate is renewed before it expires (a second CSR, a new
// serial) and, once the first one has expired, every daemon still works
// with the new one without having been restarted: the Lease is renewed
// (status), a new pod with a ConfigMap volume runs (sources, runtime,
// status) and its logs come through kube-apiserver (server's
// SubjectAccessReview). With serverTLSBootstrap, nodelet-server presents
// the kubelet-serving certificate an admin approved, and a renewed one.
func TestTLSBootstrapRotation(t *testing.T) {
	const name = "tls-rotation-node"
	admin := cp.AdminClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	approved := approveServingCSRs(ctx, admin, name)
	n, kubeconfig := bootstrapNode(t, name, 3*time.Minute, "  rotateCertificates: true\n", "  serverTLSBootstrap: true\n")
	start := time.Now()

	e2e.NodeReadyFresh(ctx, t, admin, name, start, 90*time.Second)
	if b, _ := clientCSRs(ctx, t, admin, name); b < 1 {
		t.Fatalf("no issued client CSR from the bootstrap token")
	}
	clientPath := kubeclient.ClientCertPath(n.StateDir)
	first, mode := e2e.PEMCert(t, clientPath)
	e2e.CheckNodeCert(t, cp.CAData, first, name, x509.ExtKeyUsageClientAuth)
	if mode != 0o600 {
		t.Fatalf("client certificate file mode %v, want 0600", mode)
	}
	if st, err := os.Stat(kubeconfig); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("node.kubeconfig %s: %v %v, want it written 0600", kubeconfig, st, err)
	}
	if st, err := os.Stat(kubeclient.CertDir(n.StateDir)); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("certificate directory: %v %v, want 0700", st, err)
	}
	t.Logf("client certificate serial %s valid %s to %s", first.SerialNumber, first.NotBefore.Format(time.TimeOnly), first.NotAfter.Format(time.TimeOnly))

	ns := cp.Namespace(t)
	configPod(ctx, t, admin, ns, "before", name)

	// The serving certificate: issued after the admin's approval.
	var served *x509.Certificate
	eventually.True(t, 90*time.Second, "nodelet-server presenting a kubelet-serving certificate of the cluster CA", func() bool {
		c, err := servedCert(n.ServerPort)
		if err != nil || c.Issuer.String() == c.Subject.String() {
			return false
		}
		served = c
		return true
	})
	e2e.CheckNodeCert(t, cp.CAData, served, name, x509.ExtKeyUsageServerAuth)
	if len(served.IPAddresses) == 0 {
		t.Fatalf("serving certificate has no IP SANs: %v %v", served.DNSNames, served.IPAddresses)
	}
	if approved() < 1 {
		t.Fatal("serving certificate presented but no serving CSR approved")
	}
	// The certificate managers' families (the kubelet's, with rotation).
	if n.ReadOnly != "" {
		resp, err := http.Get("http://" + n.ReadOnly + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fams := parseMetrics(t, string(body))
		for _, name := range kubeletmetrics.RequiredWith["certificate rotation"] {
			if fams[name] == nil {
				t.Errorf("metrics has no %s", name)
			}
		}
	}
	sf, smode := e2e.PEMCert(t, kubeclient.ServingCertPath(n.StateDir))
	if sf.SerialNumber.Cmp(served.SerialNumber) != 0 || smode != 0o600 {
		t.Fatalf("serving certificate file: serial %s mode %v, served serial %s", sf.SerialNumber, smode, served.SerialNumber)
	}

	// Renewal, before the first certificate expires.
	var second *x509.Certificate
	eventually.True(t, first.NotAfter.Sub(time.Now())+10*time.Second, "client certificate renewed", func() bool {
		c, _, err := e2e.ReadPEMCert(clientPath)
		if err != nil {
			return false // between the symlink's removal and its replacement
		}
		second = c
		return c.SerialNumber.Cmp(first.SerialNumber) != 0
	})
	if !time.Now().Before(first.NotAfter) {
		t.Fatalf("renewed at %s, after the first certificate expired (%s)", time.Now().Format(time.TimeOnly), first.NotAfter.Format(time.TimeOnly))
	}
	e2e.CheckNodeCert(t, cp.CAData, second, name, x509.ExtKeyUsageClientAuth)
	if _, r := clientCSRs(ctx, t, admin, name); r < 1 {
		t.Fatal("client certificate renewed without a CSR of the node's own identity")
	}
	t.Logf("renewed at %s: serial %s, the first expires at %s", time.Now().Format(time.TimeOnly), second.SerialNumber, first.NotAfter.Format(time.TimeOnly))
	eventually.True(t, 4*time.Minute, "serving certificate renewed", func() bool {
		c, err := servedCert(n.ServerPort)
		return err == nil && c.SerialNumber.Cmp(served.SerialNumber) != 0
	})

	// Past the first certificate's end: every daemon must be on a newer one.
	if d := time.Until(first.NotAfter); d > 0 {
		select {
		case <-time.After(d + 2*time.Second):
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
	}
	e2e.NodeReadyFresh(ctx, t, admin, name, first.NotAfter, 60*time.Second)
	configPod(ctx, t, admin, ns, "after", name)
	eventually.True(t, 30*time.Second, "logs of the new pod through kube-apiserver", func() bool {
		_, err := admin.CoreV1().Pods(ns).GetLogs("after", &corev1.PodLogOptions{}).DoRaw(ctx)
		if err != nil {
			t.Logf("logs: %v", err)
		}
		return err == nil
	})
	switched := map[string]bool{}
	// Each daemon that talks to kube-apiserver switched on its own.
	for _, l := range strings.Split(n.Out.String(), "\n") {
		if strings.Contains(l, "Certificate rotation detected") {
			for _, c := range []string{"sources", "runtime", "status", "server"} {
				if strings.Contains(l, "component="+c+" ") {
					switched[c] = true
				}
			}
		}
	}
	if len(switched) != 4 {
		t.Fatalf("daemons that picked up a renewed certificate: %v, want sources, runtime, status and server", switched)
	}
	for _, st := range n.WaitReady() {
		if st.Restarts != 0 {
			t.Fatalf("%s restarted %d times: the renewal must not need a restart", st.Name, st.Restarts)
		}
	}
}

// TestTLSBootstrapWithoutRotation is the kubelet's LoadClientCert path: no
// rotateCertificates, so the node waits for its certificate, writes
// node.kubeconfig pointing at it, registers and runs an API pod.
func TestTLSBootstrapWithoutRotation(t *testing.T) {
	const name = "tls-bootstrap-node"
	admin := cp.AdminClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	n, kubeconfig := bootstrapNode(t, name, 0, "", "")
	e2e.NodeReadyFresh(ctx, t, admin, name, start, 90*time.Second)
	c, mode := e2e.PEMCert(t, kubeclient.ClientCertPath(n.StateDir))
	e2e.CheckNodeCert(t, cp.CAData, c, name, x509.ExtKeyUsageClientAuth)
	if mode != 0o600 {
		t.Fatalf("client certificate file mode %v, want 0600", mode)
	}
	b, err := os.ReadFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if want := kubeclient.ClientCertPath(n.StateDir); !bytes.Contains(b, []byte(want)) {
		t.Fatalf("node.kubeconfig does not point at %s:\n%s", want, b)
	}
	if _, err := os.Stat(filepath.Join(kubeclient.CertDir(n.StateDir), "kubelet-client.key.tmp")); !os.IsNotExist(err) {
		t.Fatalf("the temporary key is left behind: %v", err)
	}
	configPod(ctx, t, admin, cp.Namespace(t), "app", name)
}
