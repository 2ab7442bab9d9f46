package testenv_test

import (
	"github.com/nodelet/nodelet/internal/testenv/eventually"

	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/internal/testenv"
)

const nodeName = "testenv-node"

var cp *testenv.ControlPlane

func TestMain(m *testing.M) {
	var stop func()
	var err error
	cp, stop, err = testenv.StartControlPlane(nodeName)
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting control plane:", err)
		os.Exit(1)
	}
	code := m.Run()
	stop()
	os.Exit(code)
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return c
}

// ownNode makes sure the Node object of the node identity exists, creating
// it through the node identity (as a kubelet registers itself).
func ownNode(t *testing.T, node kubernetes.Interface) *corev1.Node {
	t.Helper()
	n, err := node.CoreV1().Nodes().Create(ctx(t), &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: nodeName, Labels: map[string]string{"kubernetes.io/hostname": nodeName}},
	}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		n, err = node.CoreV1().Nodes().Get(ctx(t), nodeName, metav1.GetOptions{})
	}
	if err != nil {
		t.Fatalf("node creating/reading its own Node: %v", err)
	}
	return n
}

func mirrorPod(name, ns, boundTo string, owner *corev1.Node) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Namespace:   ns,
			Annotations: map[string]string{corev1.MirrorPodAnnotationKey: "static-hash"},
		},
		Spec: corev1.PodSpec{
			NodeName:   boundTo,
			Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/none:1"}},
		},
	}
	if owner != nil {
		p.OwnerReferences = []metav1.OwnerReference{{
			APIVersion: "v1", Kind: "Node", Name: owner.Name, UID: owner.UID, Controller: ptr.To(true),
		}}
	}
	return p
}

// eventually retries f for up to 30 s: the Node authorizer learns about new
// pod-node edges from an informer, so a fresh binding takes a moment.
func waitNil(t *testing.T, what string, f func() error) {
	t.Helper()
	eventually.Nil(t, 30*time.Second, what, f)
}

func expectForbidden(t *testing.T, what string, err error) {
	t.Helper()
	if !apierrors.IsForbidden(err) {
		t.Errorf("%s: want Forbidden, got %v", what, err)
	} else {
		t.Logf("%s: forbidden as expected: %v", what, err)
	}
}

// (a) The node identity registers its Node and creates a mirror pod bound to
// itself; it reads both back, and sees and updates the status of a pod an
// admin bound to it.
func TestNodeIdentityCreatesNodeAndPod(t *testing.T) {
	node, admin := cp.NodeClient(t), cp.AdminClient(t)
	ns := cp.Namespace(t)

	n := ownNode(t, node)
	got, err := node.CoreV1().Nodes().Get(ctx(t), nodeName, metav1.GetOptions{})
	if err != nil || got.UID != n.UID {
		t.Fatalf("node reading its own Node: %v (uid %v, want %v)", err, got.UID, n.UID)
	}

	// NodeRestriction: a node may only create mirror pods, bound to itself,
	// with exactly one controller owner reference to its own Node.
	created, err := node.CoreV1().Pods(ns).Create(ctx(t), mirrorPod("mirror", ns, nodeName, n), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("node creating a mirror pod bound to itself: %v", err)
	}
	waitNil(t, "node reading its mirror pod back", func() error {
		p, err := node.CoreV1().Pods(ns).Get(ctx(t), "mirror", metav1.GetOptions{})
		if err == nil && p.UID != created.UID {
			err = fmt.Errorf("uid %s, want %s", p.UID, created.UID)
		}
		return err
	})

	// The usual kubelet flow: an admin (the scheduler) binds a pod to the
	// node; the node lists its pods and reports status.
	_, err = admin.CoreV1().Pods(ns).Create(ctx(t), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "bound"},
		Spec: corev1.PodSpec{
			NodeName:   nodeName,
			Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/none:1"}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("admin creating a pod bound to the node: %v", err)
	}
	pods, err := node.CoreV1().Pods("").List(ctx(t), metav1.ListOptions{FieldSelector: "spec.nodeName=" + nodeName})
	if err != nil {
		t.Fatalf("node listing its pods: %v", err)
	}
	names := map[string]bool{}
	for _, p := range pods.Items {
		if p.Namespace == ns {
			names[p.Name] = true
		}
	}
	if !names["mirror"] || !names["bound"] {
		t.Fatalf("node's pod list in %s = %v, want mirror and bound", ns, names)
	}
	waitNil(t, "node updating the status of a pod bound to it", func() error {
		p, err := node.CoreV1().Pods(ns).Get(ctx(t), "bound", metav1.GetOptions{})
		if err != nil {
			return err
		}
		p.Status.Phase = corev1.PodRunning
		_, err = node.CoreV1().Pods(ns).UpdateStatus(ctx(t), p, metav1.UpdateOptions{})
		return err
	})
	// The pod got the default ServiceAccount (ServiceAccount admission), and
	// the node may request a token for it bound to the pod.
	p, err := admin.CoreV1().Pods(ns).Get(ctx(t), "bound", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Status.Phase != corev1.PodRunning || p.Spec.ServiceAccountName != "default" {
		t.Fatalf("pod bound: phase %q serviceAccountName %q, want Running and default", p.Status.Phase, p.Spec.ServiceAccountName)
	}
	tokenRequest := func(audiences ...string) (*authenticationv1.TokenRequest, error) {
		return node.CoreV1().ServiceAccounts(ns).CreateToken(ctx(t), "default", &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{
				Audiences:         audiences,
				ExpirationSeconds: ptr.To[int64](3600),
				BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: p.Name, UID: p.UID},
			},
		}, metav1.CreateOptions{})
	}
	// No audience, as for the kube-api-access projected volume the
	// ServiceAccount admission plugin added: the token is for the API server.
	waitNil(t, "node requesting a service account token for its pod", func() error {
		tr, err := tokenRequest()
		if err == nil && tr.Status.Token == "" {
			err = fmt.Errorf("empty token")
		}
		return err
	})
	// ServiceAccountNodeAudienceRestriction: only audiences that the pod's
	// projected volumes name, even the issuer URL is refused.
	_, err = tokenRequest("https://kubernetes.default.svc")
	expectForbidden(t, "token for an audience the pod does not use", err)
	// The node can read the kube-root-ca.crt ConfigMap its pod mounts.
	waitNil(t, "node reading kube-root-ca.crt", func() error {
		cm, err := node.CoreV1().ConfigMaps(ns).Get(ctx(t), "kube-root-ca.crt", metav1.GetOptions{})
		if err == nil && cm.Data["ca.crt"] != string(cp.CAData) {
			err = fmt.Errorf("ca.crt differs from the control plane's CA")
		}
		return err
	})
}

// (b) What the Node authorizer and NodeRestriction refuse the node identity.
func TestNodeIdentityRestricted(t *testing.T) {
	node, admin := cp.NodeClient(t), cp.AdminClient(t)
	ns := cp.Namespace(t)
	own := ownNode(t, node)

	other, err := admin.CoreV1().Nodes().Create(ctx(t), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "other-node"}}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		other, err = admin.CoreV1().Nodes().Get(ctx(t), "other-node", metav1.GetOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}

	// Another node's Node object: not readable (authorizer), not modifiable
	// (NodeRestriction), not deletable, and no other Node may be created.
	_, err = node.CoreV1().Nodes().Get(ctx(t), other.Name, metav1.GetOptions{})
	expectForbidden(t, "get another node", err)
	_, err = node.CoreV1().Nodes().List(ctx(t), metav1.ListOptions{})
	expectForbidden(t, "list all nodes", err)
	o := other.DeepCopy()
	o.Labels = map[string]string{"hacked": "true"}
	_, err = node.CoreV1().Nodes().Update(ctx(t), o, metav1.UpdateOptions{})
	expectForbidden(t, "update another node", err)
	_, err = node.CoreV1().Nodes().Patch(ctx(t), other.Name, types.MergePatchType, []byte(`{"metadata":{"labels":{"hacked":"true"}}}`), metav1.PatchOptions{})
	expectForbidden(t, "patch another node", err)
	_, err = node.CoreV1().Nodes().UpdateStatus(ctx(t), o, metav1.UpdateOptions{})
	expectForbidden(t, "update another node's status", err)
	err = node.CoreV1().Nodes().Delete(ctx(t), other.Name, metav1.DeleteOptions{})
	expectForbidden(t, "delete another node", err)
	_, err = node.CoreV1().Nodes().Create(ctx(t), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "third-node"}}, metav1.CreateOptions{})
	expectForbidden(t, "create another node", err)
	// Nor may it taint itself or set node-restriction labels on itself.
	_, err = node.CoreV1().Nodes().Patch(ctx(t), nodeName, types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"node-restriction.kubernetes.io/x":"y"}}}`), metav1.PatchOptions{})
	expectForbidden(t, "set a node-restriction.kubernetes.io label on itself", err)

	// Pods: only mirror pods bound to itself and owned by its Node.
	_, err = node.CoreV1().Pods(ns).Create(ctx(t), mirrorPod("to-other", ns, other.Name, other), metav1.CreateOptions{})
	expectForbidden(t, "create a mirror pod bound to another node", err)
	_, err = node.CoreV1().Pods(ns).Create(ctx(t), mirrorPod("to-other-own-ref", ns, other.Name, own), metav1.CreateOptions{})
	expectForbidden(t, "create a mirror pod bound to another node, owned by itself", err)
	_, err = node.CoreV1().Pods(ns).Create(ctx(t), mirrorPod("no-owner", ns, nodeName, nil), metav1.CreateOptions{})
	expectForbidden(t, "create a mirror pod without an owner reference", err)
	plain := mirrorPod("plain", ns, nodeName, own)
	plain.Annotations = nil
	_, err = node.CoreV1().Pods(ns).Create(ctx(t), plain, metav1.CreateOptions{})
	expectForbidden(t, "create a non-mirror pod bound to itself", err)

	// A pod bound to another node: invisible and untouchable.
	elsewhere, err := admin.CoreV1().Pods(ns).Create(ctx(t), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "elsewhere"},
		Spec:       corev1.PodSpec{NodeName: other.Name, Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/none:1"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = node.CoreV1().Pods(ns).Get(ctx(t), elsewhere.Name, metav1.GetOptions{})
	expectForbidden(t, "get a pod bound to another node", err)
	_, err = node.CoreV1().Pods(ns).List(ctx(t), metav1.ListOptions{})
	expectForbidden(t, "list pods without a spec.nodeName selector", err)
	_, err = node.CoreV1().Pods("").List(ctx(t), metav1.ListOptions{FieldSelector: "spec.nodeName=" + other.Name})
	expectForbidden(t, "list another node's pods", err)
	e := elsewhere.DeepCopy()
	e.Status.Phase = corev1.PodFailed
	_, err = node.CoreV1().Pods(ns).UpdateStatus(ctx(t), e, metav1.UpdateOptions{})
	expectForbidden(t, "update the status of a pod bound to another node", err)
	err = node.CoreV1().Pods(ns).Delete(ctx(t), elsewhere.Name, metav1.DeleteOptions{})
	expectForbidden(t, "delete a pod bound to another node", err)

	// Objects not related to the node.
	_, err = node.CoreV1().ConfigMaps(ns).Get(ctx(t), "kube-root-ca.crt", metav1.GetOptions{})
	expectForbidden(t, "get a configmap no pod of its own uses", err)
	_, err = node.CoreV1().Secrets(ns).List(ctx(t), metav1.ListOptions{})
	expectForbidden(t, "list secrets", err)
	_, err = node.CoreV1().Namespaces().Create(ctx(t), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "x-"}}, metav1.CreateOptions{})
	expectForbidden(t, "create a namespace", err)
}

// (c) The admin can list namespaces.
func TestAdminListsNamespaces(t *testing.T) {
	ns := cp.Namespace(t)
	list, err := cp.AdminClient(t).CoreV1().Namespaces().List(ctx(t), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, n := range list.Items {
		have[n.Name] = true
	}
	for _, want := range []string{"default", "kube-system", ns} {
		if !have[want] {
			t.Errorf("namespace %q missing from %v", want, have)
		}
	}
	for _, name := range []string{"ServiceAccount default", "ConfigMap kube-root-ca.crt"} {
		var err error
		if strings.HasPrefix(name, "ServiceAccount") {
			_, err = cp.AdminClient(t).CoreV1().ServiceAccounts(ns).Get(ctx(t), "default", metav1.GetOptions{})
		} else {
			_, err = cp.AdminClient(t).CoreV1().ConfigMaps(ns).Get(ctx(t), "kube-root-ca.crt", metav1.GetOptions{})
		}
		if err != nil {
			t.Errorf("%s in %s: %v", name, ns, err)
		}
	}
}

// The aggregation layer is set up as kubeadm sets it up: aggregated API
// servers (the e2e suite's sample-apiserver) find the front proxy's CA and
// headers in extension-apiserver-authentication, and the CA is the one
// that signed kube-apiserver's proxy client certificate.
func TestFrontProxy(t *testing.T) {
	cm, err := cp.AdminClient(t).CoreV1().ConfigMaps("kube-system").Get(ctx(t), "extension-apiserver-authentication", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(filepath.Join(cp.Dir, "pki", "front-proxy-ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	if got := cm.Data["requestheader-client-ca-file"]; strings.TrimSpace(got) != strings.TrimSpace(string(ca)) {
		t.Errorf("requestheader-client-ca-file = %q, want the front proxy's CA", got)
	}
	for key, want := range map[string]string{"requestheader-allowed-names": `["front-proxy-client"]`,
		"requestheader-username-headers": `["X-Remote-User"]`, "requestheader-group-headers": `["X-Remote-Group"]`} {
		if got := cm.Data[key]; got != want {
			t.Errorf("%s = %q, want %q", key, got, want)
		}
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	pair, err := tls.LoadX509KeyPair(filepath.Join(cp.Dir, "pki", "front-proxy-client.crt"), filepath.Join(cp.Dir, "pki", "front-proxy-client.key"))
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil || leaf.Subject.CommonName != "front-proxy-client" {
		t.Errorf("proxy client certificate %q: %v", leaf.Subject.CommonName, err)
	}
}

// (d) /readyz answers ok, through the client and through kubectl with the
// written kubeconfigs.
func TestReadyz(t *testing.T) {
	body, err := cp.AdminClient(t).Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx(t))
	if err != nil || string(body) != "ok" {
		t.Fatalf("/readyz = %q, %v", body, err)
	}
	for _, kc := range []string{cp.AdminKubeconfig, cp.NodeKubeconfig} {
		out, err := exec.Command(cp.Kubectl, "--kubeconfig", kc, "get", "--raw", "/readyz").CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "ok" {
			t.Errorf("kubectl --kubeconfig %s get --raw /readyz = %q, %v", kc, out, err)
		}
	}
	out, err := exec.Command(cp.Kubectl, "--kubeconfig", cp.NodeKubeconfig, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}").CombinedOutput()
	if err != nil || string(out) != "system:node:"+nodeName {
		t.Errorf("kubectl auth whoami with node.kubeconfig = %q, %v", out, err)
	}
}

// scripts/controlplane.sh start / env / stop, with its own state dir.
func TestControlPlaneScript(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(root, "scripts", "controlplane.sh")
	state := t.TempDir()
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("bash", append([]string{script}, args...)...)
		cmd.Env = append(os.Environ(), "NODELET_NODE_NAME=script-node")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("controlplane.sh %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
		}
		t.Logf("controlplane.sh %s:\n%s%s", strings.Join(args, " "), stdout.String(), stderr.String())
		return stdout.String() + stderr.String()
	}
	t.Cleanup(func() {
		_ = exec.Command("bash", script, "stop", state).Run()
	})

	run("start", state)
	if out := run("start", state); !strings.Contains(out, "already running") {
		t.Errorf("second start did not say it is already running:\n%s", out)
	}
	env := run("env", state)
	for _, want := range []string{
		"export KUBECONFIG=" + filepath.Join(state, "admin.kubeconfig"),
		"export NODELET_NODE_KUBECONFIG=" + filepath.Join(state, "node.kubeconfig"),
		"export KUBECTL=" + cp.Kubectl,
	} {
		if !strings.Contains(env, want) {
			t.Errorf("env output lacks %q:\n%s", want, env)
		}
	}

	out, err := exec.Command(cp.Kubectl, "--kubeconfig", filepath.Join(state, "admin.kubeconfig"), "get", "--raw", "/readyz").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "ok" {
		t.Fatalf("kubectl get --raw /readyz = %q, %v", out, err)
	}
	out, err = exec.Command(cp.Kubectl, "--kubeconfig", filepath.Join(state, "node.kubeconfig"),
		"auth", "whoami", "-o", "jsonpath={.status.userInfo.username}").CombinedOutput()
	if err != nil || string(out) != "system:node:script-node" {
		t.Errorf("whoami with node.kubeconfig = %q, %v", out, err)
	}
	out, err = exec.Command(cp.Kubectl, "--kubeconfig", filepath.Join(state, "admin.kubeconfig"),
		"-n", "default", "get", "serviceaccount/default", "configmap/kube-root-ca.crt", "-o", "name").CombinedOutput()
	if err != nil {
		t.Errorf("default namespace not prepared: %s %v", out, err)
	}

	run("stop", state)
	if pids := procsMentioning(state); len(pids) > 0 {
		t.Fatalf("processes still running with state dir %s after stop: %v", state, pids)
	}
	if out := run("stop", state); !strings.Contains(out, "stopped") {
		t.Errorf("second stop: %s", out)
	}
}

// procsMentioning returns "pid: cmdline" of processes whose command line
// contains s.
func procsMentioning(s string) []string {
	var found []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		cmdline := strings.ReplaceAll(string(b), "\x00", " ")
		if strings.Contains(cmdline, s) {
			found = append(found, e.Name()+": "+cmdline)
		}
	}
	return found
}

// The control plane's processes die with the test binary even when it is
// killed with SIGKILL and cannot stop them (Pdeathsig). The test runs this
// test binary again as a child that starts its own control plane (TestMain)
// and blocks in TestHelperBlockWithControlPlane, then kills it.
func TestChildrenDieWithTestBinary(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperBlockWithControlPlane$", "-test.v")
	cmd.Env = append(os.Environ(), "TESTENV_HELPER_BLOCK=1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()

	dirc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "CONTROLPLANE_DIR="); ok {
				dirc <- d
			}
		}
		close(dirc)
	}()
	var dir string
	select {
	case d, ok := <-dirc:
		if !ok {
			t.Fatalf("child exited without starting a control plane; stderr:\n%s", stderr.String())
		}
		dir = d
	case <-time.After(2 * time.Minute):
		t.Fatal("child did not start a control plane in 2 minutes")
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })

	pids := procsMentioning(dir)
	if len(pids) < 2 {
		t.Fatalf("want etcd and kube-apiserver running in %s, found %v", dir, pids)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for {
		left := procsMentioning(dir) // zombies have an empty command line
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still running 10s after the test binary was killed: %v", left)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestHelperBlockWithControlPlane is the child of TestChildrenDieWithTestBinary.
func TestHelperBlockWithControlPlane(t *testing.T) {
	if os.Getenv("TESTENV_HELPER_BLOCK") != "1" {
		t.Skip("helper for TestChildrenDieWithTestBinary")
	}
	fmt.Printf("CONTROLPLANE_DIR=%s\n", cp.Dir)
	time.Sleep(5 * time.Minute)
}

// A watch of a quiet resource from the current revision works: the watch
// cache of a resource nobody writes catches up with writes to other
// resources (etcd's progress notifications; Debian's etcd 3.4.23 gets no
// progress requests from kube-apiserver), instead of the watch ending in
// "Too large resource version" after 3 s, as the conformance suite's
// CustomResourceDefinition Watch spec saw.
func TestWatchOfAQuietResource(t *testing.T) {
	admin := cp.AdminClient(t)
	ns := cp.Namespace(t)
	for i := range 3 {
		// Other writes move etcd's revision past the quiet cache's.
		if _, err := admin.CoreV1().ConfigMaps(ns).Create(ctx(t), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "bump-"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		w, err := admin.CoreV1().PodTemplates(ns).Watch(ctx(t), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("quiet-%d", i)
		if _, err := admin.CoreV1().PodTemplates(ns).Create(ctx(t), &corev1.PodTemplate{ObjectMeta: metav1.ObjectMeta{Name: name},
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		select {
		case ev, ok := <-w.ResultChan():
			if !ok || ev.Type != watch.Added {
				t.Fatalf("watch %d: %v %+v, want the template Added", i, ev.Type, ev.Object)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("watch %d: no event", i)
		}
		w.Stop()
	}
}

// APIServerArgs reach kube-apiserver after its own flags: a runtime-config
// serves the resource.k8s.io beta versions the default control plane does
// not (the DRA specs' "with v1beta2 API" need it).
func TestAPIServerArgs(t *testing.T) {
	served := func(c kubernetes.Interface, gv string) bool {
		t.Helper()
		_, err := c.Discovery().ServerResourcesForGroupVersion(gv)
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatalf("discovery of %s: %v", gv, err)
		}
		return err == nil
	}
	if served(cp.AdminClient(t), "resource.k8s.io/v1beta2") {
		t.Fatal("the default control plane already serves resource.k8s.io/v1beta2: the test proves nothing")
	}
	other, stop, err := testenv.StartControlPlaneWith(testenv.ControlPlaneOptions{
		APIServerArgs: []string{"--runtime-config=resource.k8s.io/v1beta2=true"}})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if !served(other.AdminClient(t), "resource.k8s.io/v1beta2") {
		t.Fatal("--runtime-config=resource.k8s.io/v1beta2=true did not reach kube-apiserver")
	}
}
