package plugins_test

import (
	"context"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"sigs.k8s.io/yaml"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/e2e"
	"github.com/nodelet/nodelet/internal/images"
	"github.com/nodelet/nodelet/internal/supervisor"
	"github.com/nodelet/nodelet/internal/testenv"
	"github.com/nodelet/nodelet/internal/testenv/eventually"
	"github.com/nodelet/nodelet/schemas"
)

// The DRA test driver's name (its --drivername default).
const testDriver = "test-driver.cdi.k8s.io"

// draExample reads one of the DRA test driver's example manifests
// (test/e2e/dra/test-driver/deploy/example) from the Kubernetes module and
// decodes its documents, after replacing old with new in its text.
func draExample(t *testing.T, name string, oldnew ...string) []runtime.Object {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), "k8s.io", "kubernetes@v1.37.2",
		"test", "e2e", "dra", "test-driver", "deploy", "example", name))
	if err != nil {
		t.Fatal(err)
	}
	text := strings.NewReplacer(oldnew...).Replace(string(b))
	var objs []runtime.Object
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(text, -1) {
		if strings.TrimSpace(regexp.MustCompile(`(?m)^#.*$`).ReplaceAllString(doc, "")) == "" {
			continue
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode([]byte(doc), nil, nil)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		objs = append(objs, obj)
	}
	return objs
}

// createDRAPermissions creates plugin-permissions.yaml's ServiceAccount,
// ClusterRole, ClusterRoleBinding and ValidatingAdmissionPolicy (+binding)
// for the driver in ns: its cluster-wide objects named after ns, deleted
// when the test ends.
func createDRAPermissions(t *testing.T, ctx context.Context, admin kubernetes.Interface, ns string) {
	t.Helper()
	objs := draExample(t, "plugin-permissions.yaml",
		"dra-kubelet-plugin-namespace", ns, "dra-kubelet-plugin-driver-name", testDriver)
	suffix := func(name string) string { return name + "-" + ns }
	for _, o := range objs {
		var err error
		switch o := o.(type) {
		case *corev1.ServiceAccount:
			_, err = admin.CoreV1().ServiceAccounts(ns).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRole:
			o.Name = suffix(o.Name)
			_, err = admin.RbacV1().ClusterRoles().Create(ctx, o, metav1.CreateOptions{})
			t.Cleanup(func() { _ = admin.RbacV1().ClusterRoles().Delete(context.Background(), o.Name, metav1.DeleteOptions{}) })
		case *rbacv1.ClusterRoleBinding:
			o.Name, o.RoleRef.Name = suffix(o.Name), suffix(o.RoleRef.Name)
			_, err = admin.RbacV1().ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{})
			t.Cleanup(func() {
				_ = admin.RbacV1().ClusterRoleBindings().Delete(context.Background(), o.Name, metav1.DeleteOptions{})
			})
		case *admissionv1.ValidatingAdmissionPolicy:
			o.Name = suffix(o.Name)
			_, err = admin.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, o, metav1.CreateOptions{})
			t.Cleanup(func() {
				_ = admin.AdmissionregistrationV1().ValidatingAdmissionPolicies().Delete(context.Background(), o.Name, metav1.DeleteOptions{})
			})
		case *admissionv1.ValidatingAdmissionPolicyBinding:
			o.Name, o.Spec.PolicyName = suffix(o.Name), suffix(o.Spec.PolicyName)
			_, err = admin.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, o, metav1.CreateOptions{})
			t.Cleanup(func() {
				_ = admin.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(context.Background(), o.Name, metav1.DeleteOptions{})
			})
		default:
			t.Fatalf("plugin-permissions.yaml: unexpected %T", o)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// draDriverDaemonSet is testdata/dra-test-driver.yaml in ns with the
// kubelet's paths moved to the node's rootDir and the CDI dir to cdi, on
// both sides of each mount (the driver registers its socket's path as it
// sees it, and writes CDI specs the runtime reads: the paths must be the
// host's), and a node selector for this node alone.
//
// hostNetwork and KUBERNETES_SERVICE_HOST/PORT: the test's kube-apiserver
// listens on loopback and its `kubernetes` Service has no endpoint (no
// kube-proxy either), so the driver's in-cluster client reaches it as a
// host process would; it still authenticates with its ServiceAccount's
// token, bound to its pod and node, as plugin-permissions.yaml's
// admission policy needs.
func draDriverDaemonSet(t *testing.T, ns, rootDir, cdi string) *appsv1.DaemonSet {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "dra-test-driver.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var ds appsv1.DaemonSet
	if err := yaml.UnmarshalStrict(b, &ds); err != nil {
		t.Fatal(err)
	}
	move := func(p string) string {
		switch {
		case strings.HasPrefix(p, "/var/lib/kubelet/"):
			return filepath.Join(rootDir, strings.TrimPrefix(p, "/var/lib/kubelet/"))
		case p == "/var/run/cdi":
			return cdi
		}
		return p
	}
	ds.Namespace = ns
	spec := &ds.Spec.Template.Spec
	for i := range spec.Volumes {
		if hp := spec.Volumes[i].HostPath; hp != nil {
			hp.Path = move(hp.Path)
		}
	}
	c := &spec.Containers[0]
	for i := range c.VolumeMounts {
		c.VolumeMounts[i].MountPath = move(c.VolumeMounts[i].MountPath)
	}
	for i, a := range c.Args {
		if k, v, ok := strings.Cut(a, "="); ok {
			c.Args[i] = k + "=" + move(v)
		}
	}
	u, err := url.Parse(cp.URL)
	if err != nil {
		t.Fatal(err)
	}
	spec.HostNetwork = true
	c.Env = append(c.Env, corev1.EnvVar{Name: "KUBERNETES_SERVICE_HOST", Value: u.Hostname()},
		corev1.EnvVar{Name: "KUBERNETES_SERVICE_PORT", Value: u.Port()})
	spec.NodeSelector = map[string]string{"kubernetes.io/hostname": nodeName}
	spec.TerminationGracePeriodSeconds = new(int64)
	return &ds
}

// TestDRATestDriver runs the Kubernetes e2e suite's own DRA test driver
// (test/e2e/dra/test-driver, built offline from the module) as a DaemonSet
// on a nodelet node joined to a real kube-apiserver, with the DaemonSet
// and resourceclaim controllers and the scheduler, on containerd 2 (CDI):
// the driver registers and publishes its ResourceSlice; the examples' pod
// with an inline claim and a pod with the example ResourceClaim are
// scheduled, allocated, prepared by nodelet-devices and see the driver's
// CDI device (its env variables); a claim the driver refuses to prepare
// (opaque parameters that are not strings) keeps its pod from starting
// with the kubelet's FailedPrepareDynamicResources event; a SIGKILL of
// nodelet-devices loses no prepared claim and restarts no container; a
// deleted pod's claim is unprepared (the driver's CDI spec gone, the
// claim's reservedFor emptied); a SIGKILL of the driver's container:
// restarted, registered again, the claimed pod's container untouched, and
// its claim still unprepared when it is deleted.
func TestDRATestDriver(t *testing.T) {
	testenv.RequiresRoot(t)
	began := time.Now()
	bins := map[string]string{}
	for _, name := range []string{"kube-controller-manager", "kube-scheduler", "dra-test-driver"} {
		p, err := testenv.Tool(name)
		if err != nil {
			t.Fatal(err)
		}
		bins[name] = p
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	tb, err := images.BuildDRATestDriver(ctx, bins["dra-test-driver"], "")
	if err != nil {
		t.Fatal(err)
	}
	// CDI needs containerd 2: the package's unless NODELET_TEST_CONTAINERD=1,
	// then one of the test's own with a CDI spec dir of its own.
	ctr, cdi := ctrd, cdiDir
	if major, _ := testenv.ContainerdMajor(); major < 2 {
		cdi = t.TempDir()
		ctr = testenv.NewContainerd(t, testenv.ContainerdOptions{Major: 2, CDISpecDirs: []string{cdi}})
	}
	if err := images.Import(ctx, ctr.Address, "k8s.io", tb.Path); err != nil {
		t.Fatal(err)
	}
	ctl, err := cp.StartControllersWith(testenv.ControllersOptions{ControllerManager: bins["kube-controller-manager"],
		Scheduler: bins["kube-scheduler"], Controllers: []string{"daemonset", "resourceclaim-controller", "root-ca-certificate-publisher-controller"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ctl.Stop)

	root := filepath.Join(t.TempDir(), "kubelet")
	n := e2e.NewNode(t, e2e.NodeOptions{API: true, Node: "  rootDir: " + root + "\n", Containerd: ctr})
	admin := cp.AdminClient(t)
	ns := cp.Namespace(t)
	t.Logf("tools, image, containerd 2, controllers and node ready in %s", time.Since(began).Round(10*time.Millisecond))
	// Before the node stops: the driver's pod torn down, its token volume
	// (a tmpfs) unmounted by the node (a stopped node leaves its pods and
	// their mounts; the temp dir would not go). No garbage collector runs:
	// the DaemonSet's pod is deleted by hand.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = admin.AppsV1().DaemonSets(ns).Delete(ctx, "dra-test-driver", metav1.DeleteOptions{})
		_ = admin.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
		eventually.True(t, time.Minute, "the namespace's pods gone", func() bool {
			l, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
			return err == nil && len(l.Items) == 0
		})
	})
	t.Cleanup(func() {
		if t.Failed() {
			dumpNamespace(t, admin, ns, filepath.Join(n.Dir, "logs"))
		}
	})

	// kube-apiserver's TaintNodesByCondition admission gives a new Node
	// node.kubernetes.io/not-ready:NoSchedule, which the node lifecycle
	// controller removes once the Node is Ready; that controller does not
	// run here (it would taint and evict the shared control plane's other
	// tests' Nodes), so the test removes it as the controller would.
	eventually.True(t, time.Minute, "the Node Ready, its not-ready taint removed", func() bool {
		node, err := admin.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil || !slices.ContainsFunc(node.Status.Conditions, func(c corev1.NodeCondition) bool {
			return c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue
		}) {
			return false
		}
		taints := slices.DeleteFunc(slices.Clone(node.Spec.Taints), func(t corev1.Taint) bool { return t.Key == corev1.TaintNodeNotReady })
		if len(taints) == len(node.Spec.Taints) {
			return true
		}
		node.Spec.Taints = taints
		_, err = admin.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
		return false
	})

	// The driver, its permissions and the example DeviceClass (named
	// after the namespace: DeviceClasses are cluster-wide).
	createDRAPermissions(t, ctx, admin, ns)
	class := "example-" + ns
	for _, o := range draExample(t, "deviceclass.yaml") {
		dc := o.(*resourceapi.DeviceClass)
		dc.Name = class
		if _, err := admin.ResourceV1().DeviceClasses().Create(ctx, dc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = admin.ResourceV1().DeviceClasses().Delete(context.Background(), class, metav1.DeleteOptions{})
		})
	}
	created := time.Now()
	if _, err := admin.AppsV1().DaemonSets(ns).Create(ctx, draDriverDaemonSet(t, ns, root, cdi), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods := admin.CoreV1().Pods(ns)
	driverPod := func() *corev1.Pod {
		l, err := pods.List(ctx, metav1.ListOptions{LabelSelector: "app=dra-test-driver"})
		if err != nil || len(l.Items) != 1 {
			return nil
		}
		return &l.Items[0]
	}
	registrations := func() int {
		k := 0
		for _, l := range strings.Split(n.Out.String(), "\n") {
			if strings.Contains(l, "Registered DRA driver") && strings.Contains(l, testDriver) {
				k++
			}
		}
		return k
	}
	eventually.True(t, 2*time.Minute, "the driver registered with nodelet-devices", func() bool { return registrations() == 1 })
	registered := time.Since(created)
	eventually.True(t, time.Minute, "the driver's ResourceSlice for the node", func() bool {
		l, err := admin.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{
			FieldSelector: "spec.nodeName=" + nodeName + ",spec.driver=" + testDriver})
		return err == nil && len(l.Items) == 1 && len(l.Items[0].Spec.Devices) == 4 && l.Items[0].Spec.Pool.Name == nodeName
	})
	t.Logf("the driver registered %s and its ResourceSlice published %s after the DaemonSet was created",
		registered.Round(10*time.Millisecond), time.Since(created).Round(10*time.Millisecond))

	// The examples: pod-inline.yaml's pod (a claim from its template, with
	// opaque parameters a=b; busybox for agnhost: the node has no agnhost),
	// a pod of resourceclaim.yaml's claim, and a claim the driver refuses.
	busybox := func(p *corev1.Pod) {
		for i := range p.Spec.Containers {
			p.Spec.Containers[i].Image, p.Spec.Containers[i].ImagePullPolicy = images.BusyboxImage, corev1.PullNever
			p.Spec.Containers[i].Command = []string{"sh", "-c", "set && trap 'exit 0' TERM; while true; do sleep 1; done"}
		}
		p.Spec.AutomountServiceAccountToken = new(bool)
	}
	podsCreated := time.Now()
	var inline *corev1.Pod
	for _, o := range draExample(t, "pod-inline.yaml", "namespace: default", "namespace: "+ns, "deviceClassName: example", "deviceClassName: "+class) {
		switch o := o.(type) {
		case *resourceapi.ResourceClaimTemplate:
			if _, err := admin.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, o, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		case *corev1.Pod:
			busybox(o)
			if inline, err = pods.Create(ctx, o, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	claims := admin.ResourceV1().ResourceClaims(ns)
	claimPod := func(name, claimName string) *corev1.Pod {
		p := e2e.APIPod(nodeName, ns, name, "")
		p.Spec.NodeName = "" // the scheduler allocates the claim
		p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "resource", ResourceClaimName: &claimName}}
		p.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "resource"}}
		busybox(p)
		p, err := pods.Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, o := range draExample(t, "resourceclaim.yaml", "deviceClassName: example", "deviceClassName: "+class) {
		good := o.(*resourceapi.ResourceClaim)
		good.Namespace = ns
		if _, err := claims.Create(ctx, good, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// The driver takes string values only (extractParameters decodes
		// a map[string]string): a number fails NodePrepareResources. The
		// test driver's own failure injection
		// (SetNodePrepareResourcesFailureMode) is a method for the e2e
		// suite's in-process driver, not reachable from outside.
		bad := good.DeepCopy()
		bad.Name = "broken"
		bad.Spec.Devices.Config = []resourceapi.DeviceClaimConfiguration{{DeviceConfiguration: resourceapi.DeviceConfiguration{
			Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: testDriver, Parameters: runtime.RawExtension{Raw: []byte(`{"a":1}`)}}}}}
		if _, err := claims.Create(ctx, bad, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	claimed := claimPod("claimed", "example")
	broken := claimPod("broken", "broken")

	running := func(p *corev1.Pod) *corev1.Pod {
		t.Helper()
		return waitAPIPod(t, ctx, admin, ns, p.Name, "Running on the node", func(p *corev1.Pod) bool {
			return p.Status.Phase == corev1.PodRunning && p.Spec.NodeName == nodeName
		})
	}
	inline, claimed = running(inline), running(claimed)
	t.Logf("both claimed pods scheduled, allocated, prepared and Running %s after they were created", time.Since(podsCreated).Round(10*time.Millisecond))

	// What the driver's CDI spec injects: claim_<claim>_<request>=true and
	// user_<key>=<value> of the claim's opaque parameters.
	envName := func(claim, request string) string {
		return regexp.MustCompile(`[^a-zA-Z0-9]`).ReplaceAllString("claim_"+claim+"_"+request, "_")
	}
	container := func(p *corev1.Pod, name string) string {
		t.Helper()
		for _, c := range criContainersIn(t, ctr, string(p.UID)) {
			if c.Metadata.Name == name {
				return c.Id
			}
		}
		t.Fatalf("pod %s has no container %s", p.Name, name)
		return ""
	}
	if len(inline.Status.ResourceClaimStatuses) != 1 || inline.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
		t.Fatalf("the inline pod's claim: %+v", inline.Status.ResourceClaimStatuses)
	}
	inlineClaim := *inline.Status.ResourceClaimStatuses[0].ResourceClaimName
	env := execInC(t, ctr, container(inline, "with-resource"), "env | grep -E '^(user|admin|claim)_' | sort")
	if want := envName(inlineClaim, "my-device") + "=true\nuser_a=b\n"; env != want {
		t.Fatalf("the inline pod's container with the claim sees %q, want %q", env, want)
	}
	if env := execInC(t, ctr, container(inline, "without-resource"), "env | grep -E '^(user|admin|claim)_' || true"); env != "" {
		t.Fatalf("the inline pod's container without the claim sees %q", env)
	}
	claimedID := container(claimed, "app")
	if env := execInC(t, ctr, claimedID, "env | grep -E '^(user|admin|claim)_'"); env != envName("example", "req-0")+"=true\n" {
		t.Fatalf("the pod of claim example sees %q", env)
	}
	example, err := claims.Get(ctx, "example", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	exampleSpec := filepath.Join(cdi, testDriver+"-"+string(example.UID)+"-req-0.json")
	if _, err := os.Stat(exampleSpec); err != nil {
		t.Fatalf("the driver's CDI spec of claim example: %v", err)
	}

	// The refused claim: no sandbox, the kubelet's event.
	eventually.True(t, time.Minute, "FailedPrepareDynamicResources for the broken claim", func() bool {
		evs, err := admin.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + broken.Name})
		if err != nil {
			return false
		}
		for _, e := range evs.Items {
			if e.Reason == "FailedPrepareDynamicResources" && e.Type == corev1.EventTypeWarning &&
				strings.HasPrefix(e.Message, "Failed to prepare dynamic resources: prepare dynamic resources: NodePrepareResources failed for ResourceClaim broken: ") &&
				strings.Contains(e.Message, "decoding user parameters") {
				return true
			}
		}
		return false
	})
	if sb := criSandboxesIn(t, ctr, string(broken.UID)); len(sb) != 0 {
		t.Fatalf("the pod whose claim failed has sandboxes: %+v", sb)
	}
	if p, err := pods.Get(ctx, broken.Name, metav1.GetOptions{}); err != nil || p.Status.Phase != corev1.PodPending || p.Spec.NodeName != nodeName {
		t.Fatalf("the pod whose claim failed: %v %v", p.Status.Phase, err)
	}

	// intact: both claimed pods keep their containers (never restarted)
	// and nodelet-devices its record of their prepared claims.
	tap := n.Connect(bus.Tap)
	record := func(p *corev1.Pod) *schemas.PodClaims {
		t.Helper()
		rec, _, err := bus.Get[schemas.PodClaims](ctx, tap, bus.BucketDevices, "claims."+string(p.UID))
		if err != nil {
			t.Fatal(err)
		}
		return rec
	}
	ids := map[string][]string{}
	recs := map[string]*schemas.PodClaims{}
	for _, p := range []*corev1.Pod{inline, claimed} {
		for _, c := range criContainersIn(t, ctr, string(p.UID)) {
			ids[p.Name] = append(ids[p.Name], c.Id)
		}
		slices.Sort(ids[p.Name])
		if recs[p.Name] = record(p); recs[p.Name] == nil || !recs[p.Name].Prepared || len(recs[p.Name].Claims) != 1 {
			t.Fatalf("pod %s's claims record: %+v", p.Name, recs[p.Name])
		}
	}
	intact := func(after string, ps ...*corev1.Pod) {
		t.Helper()
		for _, p := range ps {
			eventually.True(t, time.Minute, after+": pod "+p.Name+" Running, no container restarted", func() bool {
				p, err := pods.Get(ctx, p.Name, metav1.GetOptions{})
				if err != nil || p.Status.Phase != corev1.PodRunning || len(p.Status.ContainerStatuses) != len(p.Spec.Containers) {
					return false
				}
				for _, s := range p.Status.ContainerStatuses {
					if s.RestartCount != 0 || s.State.Running == nil {
						return false
					}
				}
				return true
			})
			var now []string
			for _, c := range criContainersIn(t, ctr, string(p.UID)) {
				if c.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
					t.Fatalf("%s: pod %s's container %+v", after, p.Name, c)
				}
				now = append(now, c.Id)
			}
			slices.Sort(now)
			if !slices.Equal(now, ids[p.Name]) {
				t.Fatalf("%s: pod %s's containers %v, were %v", after, p.Name, now, ids[p.Name])
			}
			if rec := record(p); rec == nil || !rec.Prepared || !rec.UpdatedAt.Equal(recs[p.Name].UpdatedAt) {
				t.Fatalf("%s: pod %s's claims record %+v, was %+v", after, p.Name, rec, recs[p.Name])
			}
		}
	}

	// SIGKILL of nodelet-devices.
	st := n.WaitReady()
	killed := time.Now()
	if err := syscall.Kill(st["devices"].PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, time.Minute, "nodelet-devices restarted", func() bool {
		now, err := supervisor.ReadState(n.StateDir)
		if err != nil {
			return false
		}
		for _, p := range now {
			if p.Name == "devices" && (p.PID == st["devices"].PID || p.State != "ready") {
				return false
			}
		}
		return true
	})
	intact("SIGKILL of nodelet-devices", inline, claimed)
	t.Logf("SIGKILL of nodelet-devices: back, both prepared claims kept, no container restarted, in %s", time.Since(killed).Round(10*time.Millisecond))

	// Deleted: the claim is unprepared.
	deleted := time.Now()
	for _, p := range []*corev1.Pod{claimed, broken} {
		if err := pods.Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	eventually.True(t, time.Minute, "claim example unprepared: the driver's CDI spec gone", func() bool {
		_, err := os.Stat(exampleSpec)
		return os.IsNotExist(err)
	})
	unprepared := time.Since(deleted)
	eventually.True(t, time.Minute, "claim example's reservedFor emptied", func() bool {
		cl, err := claims.Get(ctx, "example", metav1.GetOptions{})
		return err == nil && len(cl.Status.ReservedFor) == 0
	})
	eventually.True(t, time.Minute, "the deleted pods' claims records gone", func() bool {
		return record(claimed) == nil && record(broken) == nil
	})
	t.Logf("pod of claim example deleted: claim unprepared (CDI spec gone) in %s, reservedFor emptied in %s",
		unprepared.Round(10*time.Millisecond), time.Since(deleted).Round(10*time.Millisecond))

	// SIGKILL of the driver's container: restarted, registered again (a
	// new socket), and the inline pod untouched.
	dp := driverPod()
	if dp == nil {
		t.Fatal("no driver pod")
	}
	dcs := criContainersIn(t, ctr, string(dp.UID))
	if len(dcs) != 1 {
		t.Fatalf("the driver's containers: %+v", dcs)
	}
	// nodelet-devices' restart above registered the driver again too:
	// count from here.
	before := registrations()
	killed = time.Now()
	if err := syscall.Kill(containerPIDIn(t, ctr, dcs[0].Id), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, time.Minute, "the driver's container restarted", func() bool {
		p := driverPod()
		return p != nil && p.UID == dp.UID && p.Status.Phase == corev1.PodRunning && len(p.Status.ContainerStatuses) == 1 &&
			p.Status.ContainerStatuses[0].RestartCount == 1 && p.Status.ContainerStatuses[0].State.Running != nil
	})
	eventually.True(t, time.Minute, "the driver registered again", func() bool { return registrations() > before })
	intact("SIGKILL of the driver's container", inline)
	t.Logf("SIGKILL of the driver's container: restarted and registered again in %s, the inline pod's claim kept", time.Since(killed).Round(10*time.Millisecond))

	// The inline pod deleted: nodelet-devices unprepares its claim with
	// the restarted driver (which forgot what it prepared: the test driver
	// keeps that in memory, and so leaves that CDI spec behind), and the
	// resourceclaim controller releases the generated claim (deleting it
	// is the garbage collector's, which does not run here).
	if err := pods.Delete(ctx, inline.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, time.Minute, "the inline pod's claims record gone", func() bool { return record(inline) == nil })
	eventually.True(t, time.Minute, "the inline pod's generated claim released", func() bool {
		cl, err := claims.Get(ctx, inlineClaim, metav1.GetOptions{})
		return err != nil || len(cl.Status.ReservedFor) == 0
	})
	t.Logf("TestDRATestDriver took %s", time.Since(began).Round(10*time.Millisecond))
}

// criContainersIn, criSandboxesIn, execInC and containerPIDIn are
// criContainers, criSandboxes, execIn and containerPID on containerd c.
func criContainersIn(t testing.TB, c *testenv.Containerd, uid string) []*runtimeapi.Container {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := c.RuntimeClient(t).Runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
		LabelSelector: map[string]string{"io.kubernetes.pod.uid": uid}}})
	if err != nil {
		t.Fatal(err)
	}
	return resp.Containers
}

func criSandboxesIn(t testing.TB, c *testenv.Containerd, uid string) []*runtimeapi.PodSandbox {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := c.RuntimeClient(t).Runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{
		LabelSelector: map[string]string{"io.kubernetes.pod.uid": uid}}})
	if err != nil {
		t.Fatal(err)
	}
	return resp.Items
}

func execInC(t *testing.T, c *testenv.Containerd, id, script string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := c.RuntimeClient(t).Runtime.ExecSync(ctx, e2e.ExecReq(id, []string{"sh", "-c", script}))
	if err != nil || resp.ExitCode != 0 {
		t.Fatalf("exec %q: %v %s %s", script, err, resp.GetStdout(), resp.GetStderr())
	}
	return string(resp.Stdout)
}

// dumpNamespace logs what a failed test left in ns: its pods' statuses,
// its events, and the tail of each container's log under logsDir.
func dumpNamespace(t *testing.T, admin kubernetes.Interface, ns, logsDir string) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if l, err := admin.AppsV1().DaemonSets(ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, d := range l.Items {
			b, _ := yaml.Marshal(d.Status)
			t.Logf("daemonset %s:\n%s", d.Name, b)
		}
	}
	if node, err := admin.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{}); err == nil {
		t.Logf("node %s: labels %v taints %v unschedulable %v", node.Name, node.Labels, node.Spec.Taints, node.Spec.Unschedulable)
	}
	for _, f := range []string{"kube-controller-manager.log", "kube-scheduler.log"} {
		if b, err := os.ReadFile(filepath.Join(cp.Dir, f)); err == nil {
			t.Logf("%s:\n%s", f, e2e.Tail(string(b), 30))
		}
	}
	if l, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); err == nil {
		t.Logf("%d pods in %s", len(l.Items), ns)
		for _, p := range l.Items {
			b, _ := yaml.Marshal(p.Status)
			t.Logf("pod %s on %q:\n%s", p.Name, p.Spec.NodeName, b)
		}
	}
	if l, err := admin.CoreV1().Events(ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, e := range l.Items {
			t.Logf("event %s/%s %s %s: %s", e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Type, e.Reason, e.Message)
		}
	}
	logs, _ := filepath.Glob(filepath.Join(logsDir, "*", "*", "*.log"))
	for _, f := range logs {
		if b, err := os.ReadFile(f); err == nil {
			t.Logf("%s:\n%s", f, e2e.Tail(string(b), 40))
		}
	}
}
