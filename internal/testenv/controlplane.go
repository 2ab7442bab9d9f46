package testenv

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// ServiceClusterIPRange is the --service-cluster-ip-range of the control plane.
const ServiceClusterIPRange = "10.96.0.0/16"

// KubernetesServiceIP is the `kubernetes` Service's ClusterIP: the first of
// ServiceClusterIPRange.
const KubernetesServiceIP = "10.96.0.1"

// ControlPlane is a running etcd + kube-apiserver on loopback.
//
// Authentication is by static bearer tokens: the admin is in group
// system:masters; the node is "system:node:<NodeName>" in group system:nodes
// and is held to what the Node authorizer and the NodeRestriction admission
// plugin allow, as a kubelet would be. No controller-manager or scheduler
// runs: bind pods by setting spec.nodeName, and use Namespace to get a
// namespace with the ServiceAccount and ConfigMap the controllers would make.
type ControlPlane struct {
	// Dir holds certificates, tokens, kubeconfigs, logs and etcd's data. It
	// is removed when the control plane stops.
	Dir string
	// URL of the kube-apiserver, https://127.0.0.1:<port>.
	URL string
	// CAData is the PEM CA certificate that signed the serving certificate;
	// it is also the ca.crt of the kube-root-ca.crt ConfigMaps.
	CAData []byte
	// AdminConfig and NodeConfig are client configs for the two identities.
	AdminConfig, NodeConfig *rest.Config
	// AdminKubeconfig and NodeKubeconfig are kubeconfig files for them.
	AdminKubeconfig, NodeKubeconfig string
	// NodeName is the node the node identity belongs to.
	NodeName string
	// Kubectl is the path of a kubectl of the same version.
	Kubectl string
	// ClientCAFile is the cluster CA's certificate file: kube-apiserver's
	// kubelet client certificate is signed by it, so a node's
	// server.authentication.x509.clientCAFile is this file.
	ClientCAFile string
	// NodeKubeconfigs has a kubeconfig for every node of
	// ControlPlaneOptions.Nodes (NodeName's is NodeKubeconfig).
	NodeKubeconfigs map[string]string
	// ProxyKubeconfig is kube-proxy's identity, system:kube-proxy, which
	// the default ClusterRoleBinding system:node-proxier binds (as
	// kubeadm's kube-proxy addon does with its ServiceAccount).
	ProxyKubeconfig string

	etcd, apiserver *proc
	stopOnce        sync.Once
	// apiserverCmd and etcdCmd are the programs with their flags, for
	// StartAPIServer and StartEtcd; procMu guards the procs and restarts.
	apiserverCmd, etcdCmd []string
	etcdURL               string
	procMu                sync.Mutex
	restarts              int
}

// StartControlPlane starts etcd and kube-apiserver on free 127.0.0.1 ports in
// a new temporary directory, waits until the apiserver is ready and returns it
// with a function that stops it (apiserver first, then etcd) and removes the
// directory. Call it once per test binary, from TestMain, and call stop before
// os.Exit; should the binary die first, the children get SIGKILL from the
// kernel (Pdeathsig).
//
// kube-apiserver and kubectl are built by `scripts/controlplane.sh build`
// (and cached, see scripts/CONTROLPLANE.md) when missing, which takes several
// minutes the first time; etcd comes from $NODELET_ETCD or PATH. An empty
// nodeName means "testnode".
func StartControlPlane(nodeName string) (cp *ControlPlane, stop func(), err error) {
	return StartControlPlaneWith(ControlPlaneOptions{Nodes: []string{nodeName}})
}

// ControlPlaneOptions choose what StartControlPlaneWith runs. The zero value
// is StartControlPlane's: one node, "testnode", on loopback.
type ControlPlaneOptions struct {
	// Nodes are the node identities (system:node:<name>) to make, each with
	// a kubeconfig in NodeKubeconfigs; the first is NodeName. Default:
	// ["testnode"].
	Nodes []string
	// Address is the one kube-apiserver binds and advertises: the
	// `kubernetes` Service's endpoint, so pods reach it there. Default:
	// 127.0.0.1, and then the Service has no endpoints (no pod could
	// reach loopback).
	Address string
	// Port is the secure port. Default: a free one.
	Port int
	// APIServerArgs are more kube-apiserver flags, after the others (a
	// flag given twice: the later wins), e.g. a --runtime-config that
	// serves beta APIs. Default: none.
	APIServerArgs []string
}

// StartControlPlaneWith is StartControlPlane with options.
func StartControlPlaneWith(o ControlPlaneOptions) (cp *ControlPlane, stop func(), err error) {
	if len(o.Nodes) == 0 || o.Nodes[0] == "" {
		o.Nodes = []string{"testnode"}
	}
	if o.Address == "" {
		o.Address = "127.0.0.1"
	}
	bins, err := Binaries()
	if err != nil {
		return nil, nil, err
	}
	// Ports are picked free and then released, so another process may take
	// one in between: try again with new ports when a start fails.
	for attempt := 1; ; attempt++ {
		cp, err = startControlPlane(bins, o)
		if err == nil {
			return cp, cp.Stop, nil
		}
		if attempt == 3 {
			return nil, nil, err
		}
		fmt.Fprintf(os.Stderr, "testenv: starting control plane failed (attempt %d), retrying: %v\n", attempt, err)
	}
}

// Stop stops kube-apiserver, then etcd, and removes Dir. It may be called
// more than once.
func (cp *ControlPlane) Stop() {
	cp.stopOnce.Do(func() {
		cp.procMu.Lock()
		cp.apiserver.stop()
		cp.etcd.stop()
		cp.procMu.Unlock()
		_ = os.RemoveAll(cp.Dir)
	})
}

// StopAPIServer stops kube-apiserver and leaves etcd running: the control
// plane gone, as its nodes see an outage. StartAPIServer brings it back.
func (cp *ControlPlane) StopAPIServer() {
	cp.procMu.Lock()
	defer cp.procMu.Unlock()
	cp.apiserver.stop()
}

// StartAPIServer starts kube-apiserver again, with the same flags, port and
// certificates, and waits until it is ready; it does nothing while it runs.
func (cp *ControlPlane) StartAPIServer() error {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(cp.CAData)
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer hc.CloseIdleConnections()
	return cp.restart(&cp.apiserver, cp.apiserverCmd, func() bool { return httpGetOK(hc, cp.URL+"/readyz", "ok") })
}

// RestartAPIServer stops kube-apiserver and starts it again with its flags
// plus extra (later flags win, e.g. "--watch-cache=false"), on the same
// port and certificates, and waits until it is ready. Called with no extra
// flags it restores the original ones.
func (cp *ControlPlane) RestartAPIServer(extra ...string) error {
	cp.StopAPIServer()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(cp.CAData)
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer hc.CloseIdleConnections()
	cmd := append(append([]string(nil), cp.apiserverCmd...), extra...)
	return cp.restart(&cp.apiserver, cmd, func() bool { return httpGetOK(hc, cp.URL+"/readyz", "ok") })
}

// CompactEtcd writes a key (so the revision moves past every object a
// client has seen) and compacts etcd's history up to the current revision,
// physically, through etcd's JSON gateway: a watch from any earlier
// resourceVersion then fails with "too old resource version" (410 Gone)
// wherever kube-apiserver serves it from etcd rather than its watch cache
// (--watch-cache=false). It returns the revision compacted to.
func (cp *ControlPlane) CompactEtcd(ctx context.Context) (int64, error) {
	post := func(path, body string, out any) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, cp.etcdURL+path, strings.NewReader(body))
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("etcd %s: %s: %s", path, resp.Status, b)
		}
		if out != nil {
			return json.Unmarshal(b, out)
		}
		return nil
	}
	var put struct {
		Header struct {
			Revision string `json:"revision"`
		} `json:"header"`
	}
	// key "nodelet-testenv-compact", value "x", base64.
	if err := post("/v3/kv/put", `{"key":"bm9kZWxldC10ZXN0ZW52LWNvbXBhY3Q=","value":"eA=="}`, &put); err != nil {
		return 0, err
	}
	rev, err := strconv.ParseInt(put.Header.Revision, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("etcd put: revision %q: %w", put.Header.Revision, err)
	}
	if err := post("/v3/kv/compaction", fmt.Sprintf(`{"revision":"%d","physical":true}`, rev), nil); err != nil {
		return 0, err
	}
	return rev, nil
}

// StopEtcd stops etcd under a running kube-apiserver, which then answers
// with errors and timeouts: the store gone. StartEtcd brings it back.
func (cp *ControlPlane) StopEtcd() {
	cp.procMu.Lock()
	defer cp.procMu.Unlock()
	cp.etcd.stop()
}

// StartEtcd starts etcd again on its data dir and ports and waits until it
// is healthy; it does nothing while it runs.
func (cp *ControlPlane) StartEtcd() error {
	return cp.restart(&cp.etcd, cp.etcdCmd, func() bool {
		return httpGetOK(http.DefaultClient, cp.etcdURL+"/health", `"health":"true"`)
	})
}

// restart starts *p's program (cmd) again when it has exited and waits
// until ready.
func (cp *ControlPlane) restart(p **proc, cmd []string, ready func() bool) error {
	cp.procMu.Lock()
	defer cp.procMu.Unlock()
	select {
	case <-(*p).exited:
	default:
		return nil
	}
	cp.restarts++
	name := filepath.Base(cmd[0])
	np, err := startProc(filepath.Join(cp.Dir, fmt.Sprintf("%s-%d.log", name, cp.restarts)), cmd[0], cmd[1:]...)
	if err != nil {
		return err
	}
	*p = np
	if err := waitFor(60*time.Second, np, ready); err != nil {
		return fmt.Errorf("testenv: %s did not become ready again: %w", name, err)
	}
	return nil
}

// AdminClient returns a clientset acting as a cluster admin.
func (cp *ControlPlane) AdminClient(t testing.TB) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(cp.AdminConfig)
	if err != nil {
		t.Fatalf("admin client: %v", err)
	}
	return c
}

// NodeClient returns a clientset acting as system:node:<NodeName>.
func (cp *ControlPlane) NodeClient(t testing.TB) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(cp.NodeConfig)
	if err != nil {
		t.Fatalf("node client: %v", err)
	}
	return c
}

// Namespace creates a fresh namespace with ServiceAccount "default" and
// ConfigMap "kube-root-ca.crt" (what kube-controller-manager would add) and
// returns its name. The namespace is deleted at t.Cleanup; with no namespace
// controller running it then stays Terminating, which is harmless.
func (cp *ControlPlane) Namespace(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := cp.AdminClient(t)
	ns, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "test-"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = c.CoreV1().Namespaces().Delete(ctx, ns.Name, metav1.DeleteOptions{})
	})
	if err := cp.prepareNamespace(ctx, c, ns.Name); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// prepareNamespace creates ServiceAccount default and ConfigMap
// kube-root-ca.crt in namespace ns, if missing.
func (cp *ControlPlane) prepareNamespace(ctx context.Context, c kubernetes.Interface, ns string) error {
	_, err := c.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{
		ObjectMeta: metav1.ObjectMeta{Name: "default"},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating ServiceAccount %s/default: %w", ns, err)
	}
	_, err = c.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-root-ca.crt"},
		Data:       map[string]string{"ca.crt": string(cp.CAData)},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating ConfigMap %s/kube-root-ca.crt: %w", ns, err)
	}
	return nil
}

// ------------------------------------------------------------------ start

func startControlPlane(bins BinaryPaths, o ControlPlaneOptions) (_ *ControlPlane, err error) {
	nodeName := o.Nodes[0]
	removeOrphanDirs()
	dir, err := os.MkdirTemp("", tempDirPrefix)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return nil, err
	}
	cp := &ControlPlane{Dir: dir, NodeName: nodeName, Kubectl: bins.Kubectl}
	defer func() {
		if err != nil {
			cp.Stop()
		}
	}()

	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	etcdPort, peerPort, apiPort := ports[0], ports[1], ports[2]
	if o.Port != 0 {
		apiPort = o.Port
	}
	cp.URL = "https://" + net.JoinHostPort(o.Address, strconv.Itoa(apiPort))

	pki := filepath.Join(dir, "pki")
	if err := writePKI(pki, net.ParseIP(o.Address)); err != nil {
		return nil, fmt.Errorf("testenv: certificates: %w", err)
	}
	cp.ClientCAFile = filepath.Join(pki, "ca.crt")
	if cp.CAData, err = os.ReadFile(filepath.Join(pki, "ca.crt")); err != nil {
		return nil, err
	}
	adminToken, proxyToken := randHex(16), randHex(16)
	nodeTokens := map[string]string{}
	tokens := fmt.Sprintf("%s,nodelet-admin,nodelet-admin,\"system:masters\"\n%s,system:kube-proxy,system:kube-proxy\n",
		adminToken, proxyToken)
	for _, n := range o.Nodes {
		nodeTokens[n] = randHex(16)
		user := "system:node:" + n
		tokens += fmt.Sprintf("%s,%s,%s,\"system:nodes\"\n", nodeTokens[n], user, user)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokens.csv"), []byte(tokens), 0o600); err != nil {
		return nil, err
	}

	etcdURL := "http://127.0.0.1:" + strconv.Itoa(etcdPort)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(peerPort)
	cp.etcdCmd = []string{bins.Etcd,
		"--name=testenv",
		"--data-dir=" + filepath.Join(dir, "etcd"),
		"--listen-client-urls=" + etcdURL,
		"--advertise-client-urls=" + etcdURL,
		"--listen-peer-urls=" + peerURL,
		"--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=testenv=" + peerURL,
		"--logger=zap", "--log-outputs=stderr",
		// Debian's etcd (3.4.23) predates the progress-request fix
		// (3.4.31), so kube-apiserver never asks for progress and its
		// watch cache of a quiet resource (a new CRD's) advances only with
		// etcd's periodic progress notification, every 10 minutes by
		// default: a watch that needs the current revision then times out
		// after 3 s ("Too large resource version"), as the conformance
		// suite's CustomResourceDefinition Watch spec did. Every second
		// keeps the cache within the cacher's wait.
		"--experimental-watch-progress-notify-interval=1s",
	}
	cp.etcdURL = etcdURL
	cp.etcd, err = startProc(filepath.Join(dir, "etcd.log"), cp.etcdCmd[0], cp.etcdCmd[1:]...)
	if err != nil {
		return nil, err
	}
	if err := waitFor(30*time.Second, cp.etcd, func() bool {
		return httpGetOK(http.DefaultClient, etcdURL+"/health", `"health":"true"`)
	}); err != nil {
		return nil, fmt.Errorf("testenv: etcd did not become healthy: %w", err)
	}

	cp.apiserverCmd = []string{bins.KubeAPIServer,
		"--etcd-servers=" + etcdURL,
		"--bind-address=" + o.Address,
		"--secure-port=" + strconv.Itoa(apiPort),
		"--advertise-address=" + o.Address,
		// On loopback no pod could reach the `kubernetes` Service's
		// endpoint: leave it without one.
		"--endpoint-reconciler-type=" + map[bool]string{true: "none", false: "lease"}[net.ParseIP(o.Address).IsLoopback()],
		"--tls-cert-file=" + filepath.Join(pki, "apiserver.crt"),
		"--tls-private-key-file=" + filepath.Join(pki, "apiserver.key"),
		"--client-ca-file=" + filepath.Join(pki, "ca.crt"),
		"--token-auth-file=" + filepath.Join(dir, "tokens.csv"),
		// Bootstrap tokens (Secrets bootstrap-token-<id> in kube-system)
		// authenticate as system:bootstrap:<id> in system:bootstrappers,
		// as kubeadm turns them on: see BootstrapKubeconfig.
		"--enable-bootstrap-token-auth",
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--allow-privileged=true",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + filepath.Join(pki, "sa.pub"),
		"--service-account-signing-key-file=" + filepath.Join(pki, "sa.key"),
		"--service-cluster-ip-range=" + ServiceClusterIPRange,
		"--cert-dir=" + filepath.Join(dir, "apiserver-certs"),
		// How kube-apiserver reaches the kubelet API (nodelet-server), as
		// kubeadm starts it: the node's addresses in this order (never a
		// DNS lookup of the node's name), with a client certificate in
		// system:masters signed by the cluster CA.
		"--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname",
		"--kubelet-client-certificate=" + filepath.Join(pki, "apiserver-kubelet-client.crt"),
		"--kubelet-client-key=" + filepath.Join(pki, "apiserver-kubelet-client.key"),
		// The aggregation layer as kubeadm configures it: requests proxied
		// to an aggregated API server (the e2e suite's sample-apiserver)
		// carry the user in headers, vouched for by the front proxy's
		// client certificate.
		"--requestheader-client-ca-file=" + filepath.Join(pki, "front-proxy-ca.crt"),
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + filepath.Join(pki, "front-proxy-client.crt"),
		"--proxy-client-key-file=" + filepath.Join(pki, "front-proxy-client.key"),
	}
	cp.apiserverCmd = append(cp.apiserverCmd, o.APIServerArgs...)
	cp.apiserver, err = startProc(filepath.Join(dir, "kube-apiserver.log"), cp.apiserverCmd[0], cp.apiserverCmd[1:]...)
	if err != nil {
		return nil, err
	}

	cp.AdminConfig = cp.restConfig(adminToken)
	cp.NodeConfig = cp.restConfig(nodeTokens[nodeName])
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(cp.CAData)
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	if err := waitFor(60*time.Second, cp.apiserver, func() bool {
		return httpGetOK(hc, cp.URL+"/readyz", "ok")
	}); err != nil {
		return nil, fmt.Errorf("testenv: kube-apiserver did not become ready: %w", err)
	}
	hc.CloseIdleConnections()

	cp.AdminKubeconfig = filepath.Join(dir, "admin.kubeconfig")
	if err := cp.writeKubeconfig(cp.AdminKubeconfig, "nodelet-admin", adminToken); err != nil {
		return nil, err
	}
	cp.ProxyKubeconfig = filepath.Join(dir, "kube-proxy.kubeconfig")
	if err := cp.writeKubeconfig(cp.ProxyKubeconfig, "system:kube-proxy", proxyToken); err != nil {
		return nil, err
	}
	cp.NodeKubeconfigs = map[string]string{}
	for i, n := range o.Nodes {
		path := filepath.Join(dir, "node-"+n+".kubeconfig")
		if i == 0 {
			// The name tests and scripts have always used.
			path = filepath.Join(dir, "node.kubeconfig")
			cp.NodeKubeconfig = path
		}
		if err := cp.writeKubeconfig(path, "system:node:"+n, nodeTokens[n]); err != nil {
			return nil, err
		}
		cp.NodeKubeconfigs[n] = path
	}

	c, err := kubernetes.NewForConfig(cp.AdminConfig)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cp.prepareNamespace(ctx, c, metav1.NamespaceDefault); err != nil {
		return nil, err
	}
	return cp, nil
}

const (
	tempDirPrefix = "nodelet-testenv-cp-"
	ownerFile     = "owner.pid"
)

// removeOrphanDirs removes the directories of control planes whose test
// binary was killed before it could stop them (its children died with it
// through Pdeathsig, but the directory, with etcd's preallocated WAL, stays).
func removeOrphanDirs() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), tempDirPrefix+"*"))
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, ownerFile))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			_ = os.RemoveAll(d)
		}
	}
}

func (cp *ControlPlane) restConfig(token string) *rest.Config {
	return &rest.Config{
		Host:            cp.URL,
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{CAData: cp.CAData},
		QPS:             200,
		Burst:           400,
		Timeout:         30 * time.Second,
	}
}

func (cp *ControlPlane) writeKubeconfig(path, user, token string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["testenv"] = &clientcmdapi.Cluster{Server: cp.URL, CertificateAuthorityData: cp.CAData}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts[user] = &clientcmdapi.Context{Cluster: "testenv", AuthInfo: user, Namespace: metav1.NamespaceDefault}
	cfg.CurrentContext = user
	return clientcmd.WriteToFile(*cfg, path)
}

func httpGetOK(c *http.Client, url, want string) bool {
	resp, err := c.Get(url)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	return resp.StatusCode == http.StatusOK && strings.Contains(string(body), want)
}

// waitFor polls ok until it is true, p exits or the timeout passes.
func waitFor(timeout time.Duration, p *proc, ok func() bool) error {
	deadline := time.Now().Add(timeout)
	for {
		if ok() {
			return nil
		}
		select {
		case <-p.exited:
			return fmt.Errorf("%s exited (%v); last log lines:\n%s", filepath.Base(p.cmd.Path), p.waitErr, p.logTail())
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s; last log lines of %s:\n%s", timeout, filepath.Base(p.cmd.Path), p.logTail())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// freePorts returns n distinct free TCP ports on 127.0.0.1.
func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func randHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}
