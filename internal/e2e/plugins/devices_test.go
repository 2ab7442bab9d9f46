package plugins_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/e2e"
	"github.com/nodelet/nodelet/internal/supervisor"
	"github.com/nodelet/nodelet/internal/testenv/deviceplugin"
	"github.com/nodelet/nodelet/internal/testenv/eventually"
	"github.com/nodelet/nodelet/schemas"
)

const devResource = "example.com/dev"

func deviceManifest(name string, n int) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: nodelet.local/busybox:1.35
    imagePullPolicy: Never
    command: [sleep, "3600"]
    resources:
      limits: {%s: "%d"}
`, name, devResource, n)
}

// TestDevicePlugins is the device plugin path on a whole node of
// processes with the real containerd: a plugin speaking the real v1beta1
// API registers on <node.rootDir>/device-plugins/kubelet.sock, the node
// advertises its two devices, a pod asking for two gets exactly those
// devices' env and mounts, a third pod is refused as the kubelet refuses
// it, and a SIGKILL of nodelet-devices keeps the allocation: the plugin
// registers again, nothing is allocated twice, no container restarts. The
// plugin asks for PreStartContainer: nodelet-runtime calls it over gRPC
// with the container's devices before it creates the container, and a
// failing call keeps the container from being created
// (CreateContainerConfigError) until it succeeds.
func TestDevicePlugins(t *testing.T) {
	root := filepath.Join(t.TempDir(), "kubelet")
	n := e2e.NewNode(t, e2e.NodeOptions{Node: "  rootDir: " + root + "\n"})
	files := t.TempDir()
	plugin, err := deviceplugin.StartWith(deviceplugin.Options{PreStartRequired: true},
		filepath.Join(root, "device-plugins"), files, devResource, "dev-1", "dev-2")
	if err != nil {
		t.Fatal(err)
	}
	defer plugin.Stop()

	tap := n.Connect(bus.Tap)
	ctx := context.Background()
	eventually.True(t, 60*time.Second, "the node to advertise "+devResource, func() bool {
		rec, _, err := bus.Get[schemas.NodeRecord](ctx, tap, bus.BucketNode, bus.KeyNode)
		if err != nil || rec == nil || rec.Node == nil {
			return false
		}
		c, a := rec.Node.Status.Capacity[devResource], rec.Node.Status.Allocatable[devResource]
		return c.Value() == 2 && a.Value() == 2
	})

	n.WriteManifest("gpu-a.yaml", deviceManifest("gpu-a", 2))
	pod := n.WaitPod("gpu-a-"+nodeName, 90*time.Second, "Running", func(p *corev1.Pod) bool { return p != nil && p.Status.Phase == corev1.PodRunning })
	cs := e2e.CRIContainers(t, ctrd, string(pod.UID))
	if len(cs) != 1 {
		t.Fatalf("containers of gpu-a: %+v", cs)
	}
	id := cs[0].Id
	out := execIn(t, id, "echo $TEST_DEVICES; cat /dev-info/*")
	if want := "dev-1,dev-2\ndev-1\ndev-2\n"; out != want {
		t.Fatalf("the container sees %q, want %q", out, want)
	}
	// PreStartContainer, once, with the container's devices, before
	// CreateContainer (the kubelet's GetDeviceRunContainerOptions).
	ps := plugin.PreStarts()
	if len(ps) != 1 || !slices.Equal(ps[0].Devices, []string{"dev-1", "dev-2"}) || !ps[0].At.Before(time.Unix(0, cs[0].CreatedAt)) {
		t.Fatalf("PreStartContainer calls %+v, want one with dev-1, dev-2 before the container was created at %s", ps, time.Unix(0, cs[0].CreatedAt))
	}

	n.WriteManifest("gpu-b.yaml", deviceManifest("gpu-b", 1))
	refused := n.WaitPod("gpu-b-"+nodeName, 60*time.Second, "Failed", func(p *corev1.Pod) bool { return p != nil && p.Status.Phase == corev1.PodFailed })
	// The kubelet's rejectPod prefixes the admit handler's message.
	const want = "Pod was rejected: Allocate failed due to requested number of devices unavailable for example.com/dev. Requested: 1, Available: 0, which is unexpected"
	if refused.Status.Reason != "UnexpectedAdmissionError" || refused.Status.Message != want {
		t.Fatalf("gpu-b: %s %q, want UnexpectedAdmissionError %q", refused.Status.Reason, refused.Status.Message, want)
	}

	// SIGKILL nodelet-devices: it comes back with the allocation, the
	// plugin registers again, and nothing is allocated nor restarted.
	st := n.WaitReady()
	if err := syscall.Kill(st["devices"].PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 2*time.Minute, "nodelet-devices back and the plugin registered again", func() bool {
		now, err := supervisor.ReadState(n.StateDir)
		if err != nil {
			return false
		}
		for _, p := range now {
			if p.Name == "devices" && (p.PID == st["devices"].PID || p.State != "ready") {
				return false
			}
		}
		return plugin.Registrations() >= 2
	})
	eventually.True(t, 60*time.Second, "the devices healthy again", func() bool {
		r, _, err := bus.Get[schemas.DeviceResources](ctx, tap, bus.BucketDevices, bus.KeyDevices)
		return err == nil && r != nil && len(r.Resources) == 1 && len(r.Resources[0].Healthy) == 2 && r.Resources[0].Endpoint != ""
	})
	rec, _, err := bus.Get[schemas.PodDevices](ctx, tap, bus.BucketDevices, "pods."+string(pod.UID))
	if err != nil || rec == nil || rec.Error != "" || len(rec.Containers) != 1 || !slices.Equal(rec.Containers[0].Resources[0].DeviceIDs, []string{"dev-1", "dev-2"}) {
		t.Fatalf("gpu-a's allocation after the restart: %+v %v", rec, err)
	}
	if a := plugin.Allocations(); len(a) != 1 {
		t.Fatalf("Allocate calls %v, want one", a)
	}
	if ps := plugin.PreStarts(); len(ps) != 1 {
		t.Fatalf("PreStartContainer calls %+v after the restart, want the one (no container started again)", ps)
	}
	if cs := e2e.CRIContainers(t, ctrd, string(pod.UID)); len(cs) != 1 || cs[0].Id != id || cs[0].State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("gpu-a's container after the restart: %+v (was %s)", cs, id)
	}

	// The agent stopped and its bus's store wiped (TestFaults' "wipe"):
	// the allocation comes back from the checkpoint file, not from the
	// plugin (no second Allocate), and gpu-b is refused again.
	n.Stop()
	if err := os.RemoveAll(filepath.Join(n.StateDir, "bus")); err != nil {
		t.Fatal(err)
	}
	regs := plugin.Registrations()
	n.Start()
	n.WaitReady()
	eventually.True(t, 60*time.Second, "the plugin registered after the wipe", func() bool { return plugin.Registrations() > regs })
	eventually.True(t, 90*time.Second, "gpu-a's allocation back after the wipe", func() bool {
		rec, _, err := bus.Get[schemas.PodDevices](ctx, tap, bus.BucketDevices, "pods."+string(pod.UID))
		return err == nil && rec != nil && rec.Error == "" && len(rec.Containers) == 1 && slices.Equal(rec.Containers[0].Resources[0].DeviceIDs, []string{"dev-1", "dev-2"})
	})
	// The wipe took gpu-b's verdict too: it is decided again, and refused
	// either way the kubelet words it — before the plugin's ListAndWatch
	// has said its devices are healthy again (the kubelet after a restart
	// says the same), or after, with both devices gpu-a's.
	unhealthy := "Pod was rejected: Allocate failed due to no healthy devices present; cannot allocate unhealthy devices example.com/dev, which is unexpected"
	n.WaitPod("gpu-b-"+nodeName, 60*time.Second, "refused again", func(p *corev1.Pod) bool {
		return p != nil && p.Status.Phase == corev1.PodFailed && p.Status.Reason == "UnexpectedAdmissionError" &&
			(p.Status.Message == want || p.Status.Message == unhealthy)
	})
	n.WaitPod("gpu-a-"+nodeName, 60*time.Second, "Running after the wipe", func(p *corev1.Pod) bool { return p != nil && p.Status.Phase == corev1.PodRunning })
	if a := plugin.Allocations(); len(a) != 1 {
		t.Fatalf("Allocate calls %v after the wipe, want the first alone", a)
	}
	if cs := e2e.CRIContainers(t, ctrd, string(pod.UID)); len(cs) != 1 || cs[0].Id != id || cs[0].State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("gpu-a's container after the wipe: %+v (was %s)", cs, id)
	}

	// Gone: its devices serve the next pod.
	n.RemoveManifest("gpu-b.yaml")
	n.RemoveManifest("gpu-a.yaml")
	eventually.True(t, 90*time.Second, "gpu-a's devices freed", func() bool {
		rec, _, err := bus.Get[schemas.PodDevices](ctx, tap, bus.BucketDevices, "pods."+string(pod.UID))
		return err == nil && rec == nil
	})
	// A PreStartContainer that fails: the container is not created, the
	// pod waits with the kubelet's reason, and starts once it succeeds.
	plugin.SetPreStartError(errors.New("device not ready"))
	n.WriteManifest("gpu-c.yaml", deviceManifest("gpu-c", 1))
	n.WaitPod("gpu-c-"+nodeName, 90*time.Second, "waiting on PreStartContainer", func(p *corev1.Pod) bool {
		if p == nil || len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].State.Waiting == nil {
			return false
		}
		w := p.Status.ContainerStatuses[0].State.Waiting
		return w.Reason == "CreateContainerConfigError" &&
			strings.Contains(w.Message, "device plugin PreStartContainer rpc failed with err: rpc error: code = Unknown desc = device not ready")
	})
	plugin.SetPreStartError(nil)
	c := n.WaitPod("gpu-c-"+nodeName, 90*time.Second, "Running", func(p *corev1.Pod) bool { return p != nil && p.Status.Phase == corev1.PodRunning })
	if cs := e2e.CRIContainers(t, ctrd, string(c.UID)); len(cs) != 1 || !strings.HasPrefix(execIn(t, cs[0].Id, "echo $TEST_DEVICES"), "dev-") {
		t.Fatalf("gpu-c has no device: %+v", cs)
	}
	_ = os.RemoveAll(files)
}

// execIn runs a shell command in a container through CRI.
func execIn(t *testing.T, id, script string) string {
	t.Helper()
	c := ctrd.RuntimeClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := c.Runtime.ExecSync(ctx, e2e.ExecReq(id, []string{"sh", "-c", script}))
	if err != nil || resp.ExitCode != 0 {
		t.Fatalf("exec %q: %v %s %s", script, err, resp.GetStdout(), resp.GetStderr())
	}
	return string(resp.Stdout)
}
