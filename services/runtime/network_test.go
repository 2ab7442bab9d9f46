package runtime

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/cni"
	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/schemas"
)

func (h *harness) runtimeState() *schemas.RuntimeState {
	h.t.Helper()
	st, _, err := bus.Get[schemas.RuntimeState](h.ctx, h.status, bus.BucketRuntime, bus.KeyRuntimeState)
	if err != nil {
		h.t.Fatal(err)
	}
	return st
}

// A conflist naming a plugin that is not installed: the network is not
// ready (the plugin is named), pod-network pods wait with a clear reason
// and no sandbox, a hostNetwork pod runs; fixing the conflist lets the
// waiting pod start.
func TestBrokenCNIConfig(t *testing.T) {
	h := newHarness(t, harnessOptions{noStart: true})
	conf := filepath.Join(h.ctrd.CNIConfDir, cni.DefaultFileName)
	good, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	var list map[string]any
	if err := json.Unmarshal(good, &list); err != nil {
		t.Fatal(err)
	}
	list["plugins"] = append(list["plugins"].([]any), map[string]any{"type": "nosuchplugin"})
	broken, _ := json.MarshalIndent(list, "", "  ")
	if err := cni.WriteAtomic(h.ctrd.CNIConfDir, cni.DefaultFileName, broken); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cni.WriteAtomic(h.ctrd.CNIConfDir, cni.DefaultFileName, good) })
	h.start(nil)

	var st *schemas.RuntimeState
	waitFor(t, time.Minute, "network not ready", func() (bool, string) {
		st = h.runtimeState()
		return st != nil && st.RuntimeReady && !st.NetworkReady, "state: " + jsonOf(st)
	})
	if !strings.Contains(st.Message, `"nosuchplugin"`) || st.Reason != reasonNetworkPlugin {
		t.Fatalf("runtime state does not name the plugin: %s", jsonOf(st))
	}

	podNet := newPod("podnet", busybox("app", "exec sleep 3600"))
	hostNet := newPod("hostnet", busybox("app", "exec sleep 3600"))
	hostNet.Spec.HostNetwork = true
	h.run(podNet)
	h.run(hostNet)
	h.waitObserved(hostNet, 2*time.Minute, "running", func(o *schemas.PodObserved) bool { return running(o, "app") })
	o := h.waitObserved(podNet, time.Minute, "waiting for the network", func(o *schemas.PodObserved) bool {
		return o.Reason == reasonNetworkNotReady
	})
	if !strings.Contains(o.Message, "nosuchplugin") || waitingReason(o, "app") != reasonContainerCreating {
		t.Fatalf("waiting pod: %s", describe(o))
	}
	if n := len(h.sandboxes(podNet.UID)); n != 0 {
		t.Fatalf("%d sandboxes made while the network is broken", n)
	}

	if err := cni.WriteAtomic(h.ctrd.CNIConfDir, cni.DefaultFileName, good); err != nil {
		t.Fatal(err)
	}
	o = h.waitObserved(podNet, 2*time.Minute, "running after the fix", func(o *schemas.PodObserved) bool { return running(o, "app") })
	if o.Reason != "" || len(o.Sandbox.IPs) == 0 {
		t.Fatalf("after the fix: %s", describe(o))
	}
	if st := h.runtimeState(); !st.NetworkReady {
		t.Fatalf("runtime state after the fix: %s", jsonOf(st))
	}
}

// With runtime.manageCNIConfig, nodelet renders the conflist for the pod
// CIDR into the conf dir, and publishes the range.
func TestManagedCNIConfig(t *testing.T) {
	dir := t.TempDir()
	h := newHarness(t, harnessOptions{configure: func(c *config.Config) {
		c.Runtime.ManageCNIConfig = true
		c.Runtime.CNIConfDir = dir
		c.Node.PodCIDR = "10.77.0.0/16"
	}})
	var st *schemas.RuntimeState
	waitFor(t, time.Minute, "runtime state", func() (bool, string) {
		st = h.runtimeState()
		return st != nil && st.NetworkReady, jsonOf(st)
	})
	if st.PodCIDR != "10.77.0.0/16" || st.RuntimeName != "containerd" {
		t.Fatalf("state: %s", jsonOf(st))
	}
	b, err := os.ReadFile(filepath.Join(dir, cni.DefaultFileName))
	if err != nil || !strings.Contains(string(b), `"10.77.0.0/16"`) {
		t.Fatalf("rendered conflist: %s (%v)", b, err)
	}
}

func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// When the API server assigns the node a pod CIDR, the conflist is
// rendered for it instead of node.podCIDR.
func TestPodCIDRFromAPIServer(t *testing.T) {
	cp := sharedControlPlane(t)
	node := &corev1.Node{Spec: corev1.NodeSpec{PodCIDR: "10.66.0.0/24"}}
	node.Name = "node-1"
	createFreshNode(t, cp.AdminClient(t), node)
	t.Cleanup(func() {
		_ = cp.AdminClient(t).CoreV1().Nodes().Delete(context.Background(), "node-1", metav1.DeleteOptions{})
	})
	dir := t.TempDir()
	api := NewAPIObjectsFor(cp.NodeClient(t), "node-1")
	h := newHarness(t, harnessOptions{
		configure: func(c *config.Config) {
			c.Runtime.ManageCNIConfig = true
			c.Runtime.CNIConfDir = dir
		},
		options: func(o *Options) { o.NodePodCIDR = api.PodCIDR },
	})
	waitFor(t, time.Minute, "pod CIDR from the API", func() (bool, string) {
		st := h.runtimeState()
		return st != nil && st.PodCIDR == "10.66.0.0/24", jsonOf(st)
	})
	b, err := os.ReadFile(filepath.Join(dir, cni.DefaultFileName))
	if err != nil || !strings.Contains(string(b), `"10.66.0.0/24"`) {
		t.Fatalf("rendered conflist: %s (%v)", b, err)
	}
}

// In a cluster, with node.podCIDR left at its default, the network waits
// for the pod CIDR node IPAM gives the Node, as the kubelet's does: before
// the fix nodelet rendered 10.88.0.0/16 meanwhile and a first pod could
// get an address no other node routes to.
func TestPodCIDRWaitsForTheNode(t *testing.T) {
	cp := sharedControlPlane(t)
	admin := cp.AdminClient(t)
	node := &corev1.Node{}
	node.Name = "node-1"
	createFreshNode(t, admin, node)
	t.Cleanup(func() { _ = admin.CoreV1().Nodes().Delete(context.Background(), "node-1", metav1.DeleteOptions{}) })
	dir := t.TempDir()
	api := NewAPIObjectsFor(cp.NodeClient(t), "node-1")
	h := newHarness(t, harnessOptions{
		configure: func(c *config.Config) {
			c.Runtime.ManageCNIConfig = true
			c.Runtime.CNIConfDir = dir
			c.Node.SetPodCIDRDefaulted(true)
		},
		options: func(o *Options) { o.NodePodCIDR = api.PodCIDR },
	})
	waitFor(t, time.Minute, "network not ready for want of a pod CIDR", func() (bool, string) {
		st := h.runtimeState()
		return st != nil && !st.NetworkReady && strings.Contains(st.Message, "no spec.podCIDR"), jsonOf(st)
	})
	if _, err := os.Stat(filepath.Join(dir, cni.DefaultFileName)); !os.IsNotExist(err) {
		t.Fatalf("a conflist was rendered before the Node had a pod CIDR (%v)", err)
	}
	patch := []byte(`{"spec":{"podCIDR":"10.67.0.0/24","podCIDRs":["10.67.0.0/24"]}}`)
	if _, err := admin.CoreV1().Nodes().Patch(t.Context(), "node-1", types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "the Node's pod CIDR", func() (bool, string) {
		st := h.runtimeState()
		return st != nil && st.PodCIDR == "10.67.0.0/24", jsonOf(st)
	})
	b, err := os.ReadFile(filepath.Join(dir, cni.DefaultFileName))
	if err != nil || !strings.Contains(string(b), `"10.67.0.0/24"`) {
		t.Fatalf("rendered conflist: %s (%v)", b, err)
	}
}

// A dual-stack Node (two spec.podCIDRs assigned through the API) drives the
// CNI range: the conflist nodelet renders into containerd's conf dir has an
// IPv4 and an IPv6 range, the runtime state carries both, and a pod gets
// an address from each.
func TestDualStackPodCIDRsFromAPIServer(t *testing.T) {
	cp := sharedControlPlane(t)
	c := sharedContainerd(t)
	v6 := fmt.Sprintf("fd00:200:%d::/64", c.Slot)
	node := &corev1.Node{Spec: corev1.NodeSpec{PodCIDR: c.Subnet, PodCIDRs: []string{c.Subnet, v6}}}
	node.Name = "node-1"
	admin := cp.AdminClient(t)
	createFreshNode(t, admin, node)
	t.Cleanup(func() { _ = admin.CoreV1().Nodes().Delete(context.Background(), "node-1", metav1.DeleteOptions{}) })
	// The shared containerd's own conflist comes back after the test.
	conf := filepath.Join(c.CNIConfDir, cni.DefaultFileName)
	own, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cni.WriteAtomic(c.CNIConfDir, cni.DefaultFileName, own)
		_ = os.RemoveAll(filepath.Join("/var/lib/cni/networks", c.NetworkName))
	})
	api := NewAPIObjectsFor(cp.NodeClient(t), "node-1")
	h := newHarness(t, harnessOptions{
		configure: func(cfg *config.Config) {
			cfg.Runtime.ManageCNIConfig = true
			cfg.Runtime.CNIBridgeName, cfg.Runtime.CNINetworkName = c.BridgeName, c.NetworkName
		},
		options: func(o *Options) { o.NodePodCIDR = api.PodCIDR },
	})
	waitFor(t, time.Minute, "both pod CIDRs from the API", func() (bool, string) {
		st := h.runtimeState()
		return st != nil && st.NetworkReady && st.PodCIDR == c.Subnet && reflect.DeepEqual(st.PodCIDRs, []string{c.Subnet, v6}), jsonOf(st)
	})
	b, err := os.ReadFile(conf)
	if err != nil || !strings.Contains(string(b), `"`+c.Subnet+`"`) || !strings.Contains(string(b), `"`+v6+`"`) {
		t.Fatalf("rendered conflist: %s (%v)", b, err)
	}
	pod := newPod("dual", busybox("app", "exec sleep 3600"))
	h.run(pod)
	o := h.waitObserved(pod, 2*time.Minute, "running", func(o *schemas.PodObserved) bool { return running(o, "app") })
	if len(o.Sandbox.IPs) != 2 {
		t.Fatalf("pod IPs %v, want one from each of %s and %s", o.Sandbox.IPs, c.Subnet, v6)
	}
	for i, cidr := range []string{c.Subnet, v6} {
		p := netip.MustParsePrefix(cidr)
		if a, err := netip.ParseAddr(o.Sandbox.IPs[i]); err != nil || !p.Contains(a) {
			t.Errorf("pod IP %d %q not in %s", i, o.Sandbox.IPs[i], cidr)
		}
	}
}

// createFreshNode creates node, replacing a Node of its name that other
// tests of the package left (ensureNode's): a pod CIDR, once set, cannot
// change.
func createFreshNode(t *testing.T, admin kubernetes.Interface, node *corev1.Node) {
	t.Helper()
	err := admin.CoreV1().Nodes().Delete(context.Background(), node.Name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().Nodes().Create(context.Background(), node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}
