package runtime

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/schemas"
	"github.com/nodelet/nodelet/services/common/cni"
	"github.com/nodelet/nodelet/services/common/config"
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
	if _, err := cp.AdminClient(t).CoreV1().Nodes().Create(context.Background(), node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
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
