package plugins_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
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

// The sample device plugin's resource and devices
// (test/images/sample-device-plugin).
const sampleResource = "example.com/resource"

// sampleDaemonSet is the kubelet e2e suite's own DaemonSet of the sample
// device plugin (test/e2e/testing-manifests/sample-device-plugin), read
// from the Kubernetes module, with its hostPaths under the node's rootDir
// (the paths inside the container stay the kubelet's), the offline image,
// and a node selector for this node alone (the shared control plane may
// hold other tests' Nodes).
func sampleDaemonSet(t *testing.T, ns, rootDir string) *appsv1.DaemonSet {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		t.Fatal(err)
	}
	manifest := filepath.Join(strings.TrimSpace(string(out)), "k8s.io", "kubernetes@v1.37.2",
		"test", "e2e", "testing-manifests", "sample-device-plugin", "sample-device-plugin.yaml")
	b, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	var ds appsv1.DaemonSet
	if err := yaml.UnmarshalStrict(b, &ds); err != nil {
		t.Fatal(err)
	}
	ds.Namespace = ns
	spec := &ds.Spec.Template.Spec
	for i := range spec.Volumes {
		hp := spec.Volumes[i].HostPath
		switch {
		case hp == nil:
		case strings.HasPrefix(hp.Path, "/var/lib/kubelet/"):
			hp.Path = filepath.Join(rootDir, strings.TrimPrefix(hp.Path, "/var/lib/kubelet/"))
		case hp.Path == "/var/run/cdi":
			hp.Path = filepath.Join(rootDir, "cdi")
		}
	}
	spec.NodeSelector = map[string]string{"kubernetes.io/hostname": nodeName}
	// No API access needed, and no token volume left mounted when the
	// node stops before the pod is torn down.
	spec.AutomountServiceAccountToken = new(bool)
	spec.TerminationGracePeriodSeconds = new(int64)
	c := &spec.Containers[0]
	c.Image, c.ImagePullPolicy = images.SampleDevicePluginImage, corev1.PullNever
	return &ds
}

// devicePod asks for n of the sample resource, bound to the node.
func devicePod(ns, name string, n int64) *corev1.Pod {
	p := e2e.APIPod(nodeName, ns, name, "")
	q := *resource.NewQuantity(n, resource.DecimalSI)
	p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{sampleResource: q}
	return p
}

// TestSampleDevicePlugin runs the Kubernetes project's sample device
// plugin (test/images/sample-device-plugin, built offline from the module)
// as the kubelet e2e suite's DaemonSet on a nodelet node joined to a real
// kube-apiserver, the DaemonSet controller and the scheduler placing it:
// the Node advertises example.com/resource (2) in capacity and
// allocatable; a pod asking for two gets both devices (the plugin's
// mounts of /tmp/Dev-1 and /tmp/Dev-2); one more is refused as the
// kubelet refuses it (UnexpectedAdmissionError). Then SIGKILL of every
// nodelet daemon in turn, of the plugin's container, and a full agent
// restart: no allocation lost or handed twice, no container restarted.
func TestSampleDevicePlugin(t *testing.T) {
	testenv.RequiresRoot(t)
	bins := map[string]string{}
	for _, name := range []string{"kube-controller-manager", "kube-scheduler", "sample-device-plugin"} {
		p, err := testenv.Tool(name)
		if err != nil {
			t.Fatal(err)
		}
		bins[name] = p
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	tb, err := images.BuildSampleDevicePlugin(ctx, bins["sample-device-plugin"], "")
	if err != nil {
		t.Fatal(err)
	}
	if err := images.Import(ctx, ctrd.Address, "k8s.io", tb.Path); err != nil {
		t.Fatal(err)
	}
	ctl, err := cp.StartControllersWith(testenv.ControllersOptions{ControllerManager: bins["kube-controller-manager"],
		Scheduler: bins["kube-scheduler"], Controllers: []string{"daemonset"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ctl.Stop)
	// The plugin's mounts name host paths it made in its own /tmp:
	// containerd makes them on the host as directories.
	for _, d := range []string{"/tmp/Dev-1", "/tmp/Dev-2"} {
		if _, err := os.Lstat(d); os.IsNotExist(err) {
			t.Cleanup(func() { _ = os.Remove(d) })
		}
	}

	root := filepath.Join(t.TempDir(), "kubelet")
	n := e2e.NewNode(t, e2e.NodeOptions{API: true, Node: "  rootDir: " + root + "\n"})
	admin := cp.AdminClient(t)
	ns := cp.Namespace(t)
	created := time.Now()
	if _, err := admin.AppsV1().DaemonSets(ns).Create(ctx, sampleDaemonSet(t, ns, root), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	plugin := func() *corev1.Pod {
		l, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=sample-device-plugin"})
		if err != nil || len(l.Items) != 1 {
			return nil
		}
		return &l.Items[0]
	}
	eventually.True(t, 3*time.Minute, "the sample device plugin's DaemonSet pod Running on the node", func() bool {
		p := plugin()
		return p != nil && p.Spec.NodeName == nodeName && p.Status.Phase == corev1.PodRunning
	})
	advertised := func(want int64) func() bool {
		return func() bool {
			node, err := admin.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
			if err != nil {
				return false
			}
			c, a := node.Status.Capacity[sampleResource], node.Status.Allocatable[sampleResource]
			return c.Value() == want && a.Value() == want
		}
	}
	eventually.True(t, 2*time.Minute, "the Node's capacity and allocatable of "+sampleResource+" at 2", advertised(2))
	t.Logf("the plugin's DaemonSet pod Running and %s advertised %s after the DaemonSet was created", sampleResource, time.Since(created).Round(10*time.Millisecond))

	pods := admin.CoreV1().Pods(ns)
	if _, err := pods.Create(ctx, devicePod(ns, "two", 2), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	two := waitAPIPod(t, ctx, admin, ns, "two", "Running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	cs := e2e.CRIContainers(t, ctrd, string(two.UID))
	if len(cs) != 1 {
		t.Fatalf("containers of pod two: %+v", cs)
	}
	id := cs[0].Id
	// The sample plugin answers Allocate with a mount of /tmp/<device ID>
	// per device: the busybox image's /tmp is empty otherwise.
	if out := execIn(t, id, "ls -d /tmp/Dev-*"); out != "/tmp/Dev-1\n/tmp/Dev-2\n" {
		t.Fatalf("pod two sees %q, want both devices' mounts", out)
	}
	tap := n.Connect(bus.Tap)
	record := func() *schemas.PodDevices {
		rec, _, err := bus.Get[schemas.PodDevices](ctx, tap, bus.BucketDevices, "pods."+string(two.UID))
		if err != nil {
			t.Fatal(err)
		}
		return rec
	}
	first := record()
	if first == nil || len(first.Containers) != 1 || !slices.Equal(first.Containers[0].Resources[0].DeviceIDs, []string{"Dev-1", "Dev-2"}) {
		t.Fatalf("pod two's allocation: %+v", first)
	}

	refused := 0
	refuse := func(why string) {
		t.Helper()
		refused++
		name := fmt.Sprintf("one-more-%d", refused)
		if _, err := pods.Create(ctx, devicePod(ns, name, 1), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		p := waitAPIPod(t, ctx, admin, ns, name, "Failed", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
		const want = "Pod was rejected: Allocate failed due to requested number of devices unavailable for example.com/resource. Requested: 1, Available: 0, which is unexpected"
		if p.Status.Reason != "UnexpectedAdmissionError" || p.Status.Message != want {
			t.Fatalf("%s: %s: %s %q, want UnexpectedAdmissionError %q", why, name, p.Status.Reason, p.Status.Message, want)
		}
	}
	refuse("at first")

	// resourcesRev is the revision of the devices bucket's resources key.
	resourcesRev := func() uint64 {
		_, rev, err := bus.Get[schemas.DeviceResources](ctx, tap, bus.BucketDevices, bus.KeyDevices)
		if err != nil {
			t.Fatal(err)
		}
		return rev
	}
	// intact: pod two keeps its container (never restarted) and its
	// allocation (the same record, not allocated again), and the Node
	// advertises both devices again.
	intact := func(after string, since uint64) {
		t.Helper()
		// Registered again (a restarted nodelet-devices knows the resource
		// but none of its devices until then: a pod would be refused "no
		// healthy devices present", as by a restarted kubelet). After a
		// restart of nodelet-devices the key must be newer than before it:
		// the process says READY once it reaches the bus, before it
		// republishes the key, and the old one still says both devices
		// are healthy.
		eventually.True(t, 2*time.Minute, after+": the plugin registered, both devices healthy", func() bool {
			r, rev, err := bus.Get[schemas.DeviceResources](ctx, tap, bus.BucketDevices, bus.KeyDevices)
			return err == nil && r != nil && rev > since && len(r.Resources) == 1 && len(r.Resources[0].Healthy) == 2 && r.Resources[0].Endpoint != ""
		})
		eventually.True(t, 2*time.Minute, after+": "+sampleResource+" advertised again", advertised(2))
		eventually.True(t, 2*time.Minute, after+": pod two Running with its container never restarted", func() bool {
			p, err := pods.Get(ctx, "two", metav1.GetOptions{})
			return err == nil && p.Status.Phase == corev1.PodRunning && len(p.Status.ContainerStatuses) == 1 &&
				p.Status.ContainerStatuses[0].RestartCount == 0 && p.Status.ContainerStatuses[0].ContainerID == "containerd://"+id
		})
		if cs := e2e.CRIContainers(t, ctrd, string(two.UID)); len(cs) != 1 || cs[0].Id != id || cs[0].State != runtimeapi.ContainerState_CONTAINER_RUNNING {
			t.Fatalf("%s: pod two's containers %+v (was %s)", after, cs, id)
		}
		if rec := record(); rec == nil || !rec.AllocatedAt.Equal(first.AllocatedAt) || !slices.Equal(rec.Containers[0].Resources[0].DeviceIDs, []string{"Dev-1", "Dev-2"}) {
			t.Fatalf("%s: pod two's allocation %+v, was %+v", after, rec, first)
		}
		refuse(after)
	}

	kill := func(name string) {
		t.Helper()
		st := n.WaitReady()
		if err := syscall.Kill(st[name].PID, syscall.SIGKILL); err != nil {
			t.Fatalf("kill %s: %v", name, err)
		}
		eventually.True(t, 2*time.Minute, name+" restarted", func() bool {
			now, err := supervisor.ReadState(n.StateDir)
			if err != nil {
				return false
			}
			for _, p := range now {
				if p.Name == name && (p.PID == st[name].PID || p.State != "ready") {
					return false
				}
			}
			return true
		})
	}
	pluginBefore := plugin()
	if pluginBefore == nil {
		t.Fatal("no plugin pod")
	}
	for _, d := range bus.Daemons {
		began := time.Now()
		var since uint64
		if d == bus.Devices {
			since = resourcesRev()
		}
		kill(d)
		intact("SIGKILL of "+d, since)
		t.Logf("SIGKILL of %s: back, allocation intact, one more pod refused in %s", d, time.Since(began).Round(10*time.Millisecond))
	}
	began := time.Now()
	kill("bus")
	intact("SIGKILL of the bus", 0)
	t.Logf("SIGKILL of the bus: back, allocation intact, one more pod refused in %s", time.Since(began).Round(10*time.Millisecond))
	if p := plugin(); p == nil || p.UID != pluginBefore.UID || p.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Fatalf("the plugin's pod restarted while nodelet's daemons did: %+v", p)
	}

	// The plugin's container killed: it restarts, registers again (a new
	// socket), and the devices stay with pod two.
	pcs := e2e.CRIContainers(t, ctrd, string(pluginBefore.UID))
	if len(pcs) != 1 {
		t.Fatalf("the plugin's containers: %+v", pcs)
	}
	began = time.Now()
	since := resourcesRev()
	pid := containerPID(t, pcs[0].Id)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 2*time.Minute, "the plugin's container restarted", func() bool {
		p := plugin()
		return p != nil && p.Status.Phase == corev1.PodRunning && len(p.Status.ContainerStatuses) == 1 &&
			p.Status.ContainerStatuses[0].RestartCount == 1 && p.Status.ContainerStatuses[0].State.Running != nil
	})
	intact("SIGKILL of the plugin's container", since)
	t.Logf("SIGKILL of the plugin's container: restarted, registered again, allocation intact, one more pod refused in %s", time.Since(began).Round(10*time.Millisecond))

	// The whole agent.
	began = time.Now()
	since = resourcesRev()
	n.Stop()
	n.Start()
	n.WaitReady()
	intact("a restart of the agent", since)
	t.Logf("the agent stopped and started: allocation intact, one more pod refused in %s", time.Since(began).Round(10*time.Millisecond))
	t.Logf("%d pods refused as the kubelet refuses them, pod two's container %s never restarted", refused, id[:12])
}

// waitAPIPod waits until the API's pod is ok.
func waitAPIPod(t *testing.T, ctx context.Context, c kubernetes.Interface, ns, name, what string, ok func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	var p *corev1.Pod
	eventually.True(t, 2*time.Minute, "pod "+name+" "+what+" in the API", func() bool {
		var err error
		p, err = c.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		return err == nil && ok(p)
	})
	return p
}

// containerPID is the container's init process on the host, from CRI's
// verbose status (containerd's info.pid).
func containerPID(t *testing.T, id string) int {
	t.Helper()
	return containerPIDIn(t, ctrd, id)
}

// containerPIDIn is containerPID on containerd ctr.
func containerPIDIn(t *testing.T, ctr *testenv.Containerd, id string) int {
	t.Helper()
	c := ctr.RuntimeClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := c.Runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id, Verbose: true})
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		Pid int `json:"pid"`
	}
	if err := json.Unmarshal([]byte(resp.Info["info"]), &info); err != nil || info.Pid == 0 {
		t.Fatalf("container %s's pid: %v %q", id, err, resp.Info["info"])
	}
	return info.Pid
}
