package e2e

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/internal/testenv"
	"github.com/nodelet/nodelet/internal/testenv/eventually"
)

// Env is what every test of one e2e binary shares: nodelet's binaries,
// built once; a private containerd; a control plane.
type Env struct {
	// NodeName is the control plane's node: a node's name by default.
	NodeName string
	BinDir   string
	Ctrd     *testenv.Containerd
	// CDIDir is containerd's CDI spec directory (2.x resolves CDI devices
	// from it; 1.6 has no CDI).
	CDIDir string
	CP     *testenv.ControlPlane
}

// env is the binary's Env, for NewNode.
var env Env

// Setup builds the binaries and starts containerd and a control plane
// whose node is nodeName; stop undoes it all. A TestMain calls it once
// before m.Run.
func Setup(nodeName string) (_ Env, stop func(), err error) {
	env = Env{NodeName: nodeName}
	var undo []func()
	stop = func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
	defer func() {
		if err != nil {
			stop()
		}
	}()
	if env.BinDir, err = os.MkdirTemp("", "nodelet-e2e-bin-"); err != nil {
		return env, nil, err
	}
	undo = append(undo, func() { os.RemoveAll(env.BinDir) })
	if err = testenv.BuildBinaries(env.BinDir); err != nil {
		return env, nil, err
	}
	if env.CDIDir, err = os.MkdirTemp("", "nodelet-e2e-cdi-"); err != nil {
		return env, nil, err
	}
	undo = append(undo, func() { os.RemoveAll(env.CDIDir) })
	if env.Ctrd, err = testenv.StartContainerd(testenv.ContainerdOptions{CDISpecDirs: []string{env.CDIDir}}); err != nil {
		return env, nil, fmt.Errorf("containerd: %w", err)
	}
	undo = append(undo, env.Ctrd.Stop)
	cp, stopCP, err := testenv.StartControlPlane(nodeName)
	if err != nil {
		return env, nil, fmt.Errorf("control plane: %w", err)
	}
	env.CP = cp
	undo = append(undo, stopCP)
	return env, stop, nil
}

// Main is a test binary's TestMain body: Setup, then use gets the Env
// (each package keeps its parts under short names), then m runs; the exit
// code for os.Exit.
func Main(m *testing.M, nodeName string, use func(Env)) int {
	env, stop, err := Setup(nodeName)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer stop()
	use(env)
	return m.Run()
}

// FreePort is a TCP port on 127.0.0.1 that nothing listens on now.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// RemoveCgroupDirs removes root and the cgroups under it (emptied by the
// node's runtime) in every cgroup v1 hierarchy and the unified one.
func RemoveCgroupDirs(root string) {
	dirs, _ := filepath.Glob("/sys/fs/cgroup/*" + root)
	dirs = append(dirs, "/sys/fs/cgroup"+root)
	for _, d := range dirs {
		var all []string
		_ = filepath.WalkDir(d, func(p string, e os.DirEntry, err error) error {
			if err == nil && e.IsDir() {
				all = append(all, p)
			}
			return nil
		})
		for i := len(all) - 1; i >= 0; i-- {
			_ = os.Remove(all[i])
		}
	}
}

// RemovePodSandboxes stops and removes every sandbox in c: what a node's
// runtime left behind.
func RemovePodSandboxes(t testing.TB, c *testenv.Containerd) {
	rc := c.RuntimeClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	resp, err := rc.Runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return
	}
	for _, sb := range resp.Items {
		_, _ = rc.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb.Id})
		_, _ = rc.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb.Id})
	}
}

// APIPod is a busybox pod on node that sleeps until TERM, requesting cpu
// when it is not empty.
func APIPod(node, ns, name, cpu string) *corev1.Pod {
	c := corev1.Container{
		Name: "app", Image: "nodelet.local/busybox:1.35", ImagePullPolicy: corev1.PullNever,
		Command: []string{"sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"},
	}
	if cpu != "" {
		c.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{
			NodeName: node, Containers: []corev1.Container{c},
			TerminationGracePeriodSeconds: ptr.To[int64](5),
			AutomountServiceAccountToken:  ptr.To(false),
		},
	}
}

// SleeperManifest is a static pod manifest that sleeps for an hour.
func SleeperManifest(name string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: sleep
    image: nodelet.local/busybox:1.35
    imagePullPolicy: Never
    command: [sleep, "3600"]
`, name)
}

// PodReady says whether p's Ready condition is True.
func PodReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// NodeReadyFresh waits until the node is Ready and its Lease was renewed
// after since: the node's own client works now (nothing else writes them).
func NodeReadyFresh(ctx context.Context, t *testing.T, admin kubernetes.Interface, name string, since time.Time, timeout time.Duration) {
	t.Helper()
	defer func(begin time.Time) {
		t.Logf("node %s Ready and fresh %s after asking", name, time.Since(begin).Round(time.Second))
	}(time.Now())
	eventually.True(t, timeout, fmt.Sprintf("node %s Ready with its Lease renewed after %s", name, since.Format(time.TimeOnly)), func() bool {
		node, err := admin.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false
		}
		ready := false
		for _, c := range node.Status.Conditions {
			ready = ready || (c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue)
		}
		l, err := admin.CoordinationV1().Leases("kube-node-lease").Get(ctx, name, metav1.GetOptions{})
		return ready && err == nil && l.Spec.RenewTime != nil && l.Spec.RenewTime.After(since)
	})
}

// PEMCert reads the certificate of a PEM pair file and its mode.
func PEMCert(t *testing.T, path string) (*x509.Certificate, os.FileMode) {
	t.Helper()
	c, mode, err := ReadPEMCert(path)
	if err != nil {
		t.Fatal(err)
	}
	return c, mode
}

// ReadPEMCert is PEMCert for a poll: a rotation replaces the
// "-current.pem" symlink by removing it and making a new one (client-go
// certificate FileStore updateSymlink, as the kubelet does), so a reader
// can find it missing for an instant.
func ReadPEMCert(path string) (*x509.Certificate, os.FileMode, error) {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return nil, 0, err
	}
	st, err := os.Stat(real)
	if err != nil {
		return nil, 0, err
	}
	b, err := os.ReadFile(real)
	if err != nil {
		return nil, 0, err
	}
	for {
		var blk *pem.Block
		if blk, b = pem.Decode(b); blk == nil {
			return nil, 0, fmt.Errorf("%s holds no certificate", path)
		}
		if blk.Type == "CERTIFICATE" {
			c, err := x509.ParseCertificate(blk.Bytes)
			if err != nil {
				return nil, 0, fmt.Errorf("%s: %w", path, err)
			}
			return c, st.Mode().Perm(), nil
		}
	}
}

// CheckNodeCert checks c is node name's certificate for usage, issued by
// the cluster CA (PEM caData).
func CheckNodeCert(t *testing.T, caData []byte, c *x509.Certificate, name string, usage x509.ExtKeyUsage) {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caData)
	if _, err := c.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
		t.Fatalf("certificate %s not issued by the cluster CA for %v: %v", c.Subject, usage, err)
	}
	if c.Subject.CommonName != "system:node:"+name || len(c.Subject.Organization) != 1 || c.Subject.Organization[0] != "system:nodes" {
		t.Fatalf("certificate subject %s, want CN=system:node:%s, O=system:nodes", c.Subject, name)
	}
}

// CRIContainers lists c's CRI containers of the pod with uid (any state).
func CRIContainers(t testing.TB, c *testenv.Containerd, uid string) []*runtimeapi.Container {
	t.Helper()
	rc := c.RuntimeClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := rc.Runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
		LabelSelector: map[string]string{"io.kubernetes.pod.uid": uid}}})
	if err != nil {
		t.Fatal(err)
	}
	return resp.Containers
}

// CRIPod is what CRI says of one pod.
type CRIPod struct {
	ReadySandboxes int
	Sandboxes      int
	ContainerID    string // the running container
	RestartCount   int
	Running        int
}

// CRIView reads every pod in c from CRI, by pod UID.
func CRIView(t testing.TB, c *testenv.Containerd) map[string]*CRIPod {
	t.Helper()
	rc := c.RuntimeClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out := map[string]*CRIPod{}
	get := func(uid string) *CRIPod {
		if out[uid] == nil {
			out[uid] = &CRIPod{}
		}
		return out[uid]
	}
	sbs, err := rc.Runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sbs.Items {
		p := get(s.Labels["io.kubernetes.pod.uid"])
		p.Sandboxes++
		if s.State == runtimeapi.PodSandboxState_SANDBOX_READY {
			p.ReadySandboxes++
		}
	}
	cs, err := rc.Runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ct := range cs.Containers {
		if ct.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
			continue
		}
		p := get(ct.Labels["io.kubernetes.pod.uid"])
		p.Running++
		p.ContainerID = ct.Id
		p.RestartCount, _ = strconv.Atoi(ct.Annotations["io.kubernetes.container.restartCount"])
	}
	return out
}

// WebManifest is a static pod serving HTTP on 8080, Ready by its probe.
const WebManifest = `apiVersion: v1
kind: Pod
metadata:
  name: web
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: httpd
    image: nodelet.local/busybox:1.35
    imagePullPolicy: Never
    command: [httpd, -f, -p, "8080", -h, /www]
    ports: [{containerPort: 8080, name: http}]
    readinessProbe:
      httpGet: {path: /, port: http}
      periodSeconds: 1
`

// ExecReq is a CRI ExecSync of cmd in container id, with a 10 s timeout.
func ExecReq(id string, cmd []string) *runtimeapi.ExecSyncRequest {
	return &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: cmd, Timeout: 10}
}
