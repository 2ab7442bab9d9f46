package machine_test

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/e2e"
	"github.com/nodelet/nodelet/internal/testenv"
	"github.com/nodelet/nodelet/internal/testenv/eventually"
	"github.com/nodelet/nodelet/internal/version"
)

const x509ClientAuth = x509.ExtKeyUsageClientAuth

// kubeadmConfig is the configuration the control plane side's `kubeadm
// init phase` commands take, as `kubeadm init --config` would: the
// bootstrap token the bootstrap-token phase makes, the cluster's version
// and service range, and the KubeletConfiguration upload-config puts in
// kube-system/kubelet-config for every joiner. The kubelet's settings
// beyond kubeadm's defaults: the host's containerd runs runc with the
// cgroupfs driver (no systemd on the host to ask for slices), and the
// kubelet's ports are free ones, the host's network being shared; on a
// cgroup v1 host, failCgroupV1: false.
func kubeadmConfig(token string, port, healthzPort int) string {
	failCgroupV1 := ""
	if cgroupV1() {
		// The kubelet refuses a cgroup v1 host unless told (so does
		// nodelet as the kubelet).
		failCgroupV1 = "failCgroupV1: false\n"
	}
	return fmt.Sprintf(`apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
bootstrapTokens:
- token: %q
  description: "nodelet TestKubeadmJoin: kubeadm init phase bootstrap-token"
  ttl: 1h
nodeRegistration:
  criSocket: %s
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
kubernetesVersion: %s
networking:
  serviceSubnet: %s
---
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
port: %d
healthzPort: %d
%s`, token, ctrd.Endpoint, version.Kubernetes, testenv.ServiceClusterIPRange, port, healthzPort, failCgroupV1)
}

// randTokenID is a bootstrap token ID: 6 of [a-z0-9].
func randTokenID(t *testing.T) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 6)
	for i := range b {
		v, err := rand.Int(rand.Reader, big.NewInt(int64(len(alphabet))))
		if err != nil {
			t.Fatal(err)
		}
		b[i] = alphabet[v.Int64()]
	}
	return string(b)
}

// argAfter is the value after flag in args ("" if none).
func argAfter(args []string, flag string) string {
	for i, a := range args {
		if a == flag && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// csrNames says the CSR asks for node name's client certificate.
func csrNames(c certificatesv1.CertificateSigningRequest, name string) bool {
	blk, _ := pem.Decode(c.Spec.Request)
	if blk == nil {
		return false
	}
	req, err := x509.ParseCertificateRequest(blk.Bytes)
	return err == nil && req.Subject.CommonName == "system:node:"+name
}

// bootstrapCSR is the issued kubelet client CSR user made, nil if none.
func bootstrapCSR(ctx context.Context, t *testing.T, user string) *certificatesv1.CertificateSigningRequest {
	t.Helper()
	l, err := cp.AdminClient(t).CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range l.Items {
		if c.Spec.Username == user && c.Spec.SignerName == certificatesv1.KubeAPIServerClientKubeletSignerName && len(c.Status.Certificate) > 0 {
			return &l.Items[i]
		}
	}
	return nil
}

// kubeletUnit waits until kubelet.service is active with daemons children
// of its main process (nodelet up, run as /usr/bin/kubelet), all nodelet's.
func kubeletUnit(t *testing.T, m *testenv.Machine, daemons int) unitState {
	t.Helper()
	var s unitState
	var children []string
	eventually.True(t, 2*time.Minute, fmt.Sprintf("kubelet.service active with its %d nodelet daemons", daemons), func() bool {
		s = unitState{}
		for _, l := range strings.Split(m.MustRun(t, "systemctl", "show", "-p", "ActiveState,MainPID,NRestarts", "kubelet"), "\n") {
			k, v, _ := strings.Cut(strings.TrimSpace(l), "=")
			n, _ := strconv.Atoi(v)
			switch k {
			case "ActiveState":
				s.active = v
			case "MainPID":
				s.mainPID = n
			case "NRestarts":
				s.restarts = n
			}
		}
		if s.active != "active" || s.mainPID == 0 {
			return false
		}
		out, err := m.Run("sh", "-c", fmt.Sprintf(`for p in $(cat /proc/%d/task/*/children); do cat /proc/$p/comm; done`, s.mainPID))
		if err != nil {
			return false
		}
		children = strings.Fields(out)
		for _, c := range children {
			if !strings.HasPrefix(c, "nodelet-") {
				return false
			}
		}
		return len(children) == daemons
	})
	// nodelet as kubelet becomes the supervisor in the same process (it
	// execs nodeletd as nodelet-supervisor): systemd's main process.
	if exe := strings.TrimSpace(m.MustRun(t, "readlink", fmt.Sprintf("/proc/%d/exe", s.mainPID))); exe != "/usr/local/bin/nodeletd" {
		t.Errorf("kubelet.service's main process runs %s, want nodelet's supervisor (/usr/local/bin/nodeletd)", exe)
	}
	return s
}

func httpGet(url string) (string, error) {
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode != http.StatusOK {
		return string(b), fmt.Errorf("%s: %s", url, resp.Status)
	}
	return string(b), err
}

// sameContainer: the pod's one container is the one it was, running, never
// restarted.
func sameContainer(t *testing.T, before, after []*runtimeapi.Container) {
	t.Helper()
	if len(before) != 1 || len(after) != 1 || after[0].Id != before[0].Id || after[0].State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("the pod's containers changed: before %v, now %v", containerStates(before), containerStates(after))
	}
}

func containerStates(cs []*runtimeapi.Container) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Id[:12]+" "+c.State.String())
	}
	return out
}

// kubeadmNode makes the booted machine a node kubeadm can run the kubelet
// on: kubelet.service and 10-kubeadm.conf from deploy/kubeadm as the
// packages ship them, /usr/bin/kubelet a link to nodelet, what the shared
// test machine needs of nodelet in drop-ins of its own, the unit enabled;
// and it checks `kubelet --version` (kubeadm's KubeletVersion check).
func kubeadmNode(t *testing.T, m *testenv.Machine, repo, rootDir, logsDir, cgroupRoot string) {
	t.Helper()
	for file, dst := range map[string]string{
		"kubelet.service": "/usr/lib/systemd/system/kubelet.service",
		"10-kubeadm.conf": "/usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf",
	} {
		b, err := os.ReadFile(filepath.Join(repo, "deploy", "kubeadm", file))
		if err != nil {
			t.Fatal(err)
		}
		m.WriteFile(t, dst, b, 0o644)
	}
	// What this shared machine needs of nodelet beyond the kubelet's
	// settings, as NODELET_* variables in a drop-in of its own: a bus port
	// and a cgroup root no other node uses, and the test containerd's CNI
	// network (its conflist, not one nodelet renders).
	m.WriteFile(t, "/etc/systemd/system/kubelet.service.d/20-nodelet.conf", []byte(fmt.Sprintf(`[Service]
Environment="NODELET_BUS_LISTEN=127.0.0.1:%d"
Environment="NODELET_RUNTIME_CGROUPROOT=%s"
Environment="NODELET_RUNTIME_MANAGECNICONFIG=false"
Environment="NODELET_RUNTIME_CNICONFDIR=%s"
Environment="NODELET_RUNTIME_CNIBRIDGENAME=%s"
Environment="NODELET_RUNTIME_CNINETWORKNAME=%s"
Environment="NODELET_NODE_PODCIDR=%s"
Environment="NODELET_NODE_PODLOGSDIR=%s"
`, e2e.FreePort(t), cgroupRoot, ctrd.CNIConfDir, ctrd.BridgeName, ctrd.NetworkName, ctrd.Subnet, logsDir)), 0o644)
	// The drop-in's file for the operator's own flags: a root dir of its
	// own, bound from the host at the same path, since the host's
	// containerd mounts what the runtime puts there.
	m.WriteFile(t, "/etc/sysconfig/kubelet", []byte(fmt.Sprintf("KUBELET_EXTRA_ARGS=\"--root-dir=%s --cert-dir=%s/pki\"\n", rootDir, rootDir)), 0o644)
	m.MustRun(t, "ln", "-s", "/usr/local/bin/nodelet", "/usr/bin/kubelet")
	m.MustRun(t, "sh", "-c", `for d in /sys/fs/cgroup/*; do
		case $d in */systemd|*/unified) continue;; esac
		[ -L "$d" ] || mount -o remount,bind,rw "$d" || exit 1
	done`)
	m.MustRun(t, "systemctl", "daemon-reload")
	m.MustRun(t, "systemctl", "enable", "kubelet.service")
	if got, want := strings.TrimSpace(m.MustRun(t, "kubelet", "--version")), "Kubernetes "+version.Kubelet(); got != want {
		t.Fatalf("kubelet --version: %q, want %q", got, want)
	}
}
