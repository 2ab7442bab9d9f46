package plugins_test

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/e2e"
	"github.com/nodelet/nodelet/internal/supervisor"
	"github.com/nodelet/nodelet/internal/testenv"
	"github.com/nodelet/nodelet/internal/testenv/draplugin"
	"github.com/nodelet/nodelet/internal/testenv/eventually"
	"github.com/nodelet/nodelet/schemas"
)

const draDriver = "dra.e2e.nodelet.io"

// TestDRA is Dynamic Resource Allocation on a whole cluster node: a DRA
// driver on the real kubeletplugin library registers through
// <node.rootDir>/plugins_registry; a pod whose ResourceClaim the test
// allocates and reserves for it (as the scheduler would) runs once the
// driver prepared the claim, with the claim's CDI device in its CRI config
// (visible in the container on containerd 2; 1.6 has no CDI); a SIGKILL
// of nodelet-devices keeps the prepared claim without preparing it again;
// a claim the driver fails to prepare keeps its pod from starting, with
// the kubelet's FailedPrepareDynamicResources event; and each claim is
// unprepared once its pod is deleted.
func TestDRA(t *testing.T) {
	root := filepath.Join(t.TempDir(), "kubelet")
	n := e2e.NewNode(t, e2e.NodeOptions{API: true, Node: "  rootDir: " + root + "\n"})
	admin := cp.AdminClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	eventually.True(t, 60*time.Second, "node registered", func() bool {
		_, err := admin.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		return err == nil
	})
	plugin, err := draplugin.Start(ctx, draplugin.Config{Driver: draDriver, NodeName: nodeName, Client: admin,
		RegistryDir: filepath.Join(root, "plugins_registry"), DataDir: filepath.Join(root, "plugins", draDriver),
		CDIDir: cdiDir, Fail: map[string]string{"broken": "the device is on fire"},
		Health: []kubeletplugin.DeviceHealth{{PoolName: nodeName, DeviceName: "dev-0", Health: kubeletplugin.HealthStatusUnhealthy, Message: "ECC errors"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer plugin.Stop()
	// No wait for the registration: the library's RegistrationStatus races
	// with its own NotifyRegistrationStatus handler (k8s.io/dynamic-resource-
	// allocation v0.37.2), and a pod waits for its driver anyway (a prepare
	// is tried again when a driver registers): the good pod running below
	// proves the registration.

	ns := cp.Namespace(t)
	pods := admin.CoreV1().Pods(ns)
	good := claimedPod(t, ctx, admin, ns, "dra", "dev")
	bad := claimedPod(t, ctx, admin, ns, "dra-broken", "broken")

	eventually.True(t, 2*time.Minute, "the pod with a prepared claim Running", func() bool {
		p, err := pods.Get(ctx, good.Name, metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning
	})
	tap := n.Connect(bus.Tap)
	rec, _, err := bus.Get[schemas.PodClaims](ctx, tap, bus.BucketDevices, "claims."+string(good.UID))
	claim, cerr := admin.ResourceV1().ResourceClaims(ns).Get(ctx, "dev", metav1.GetOptions{})
	if err != nil || cerr != nil || rec == nil || !rec.Prepared || len(rec.Claims) != 1 {
		t.Fatalf("the pod's claims record: %+v %v %v", rec, err, cerr)
	}
	want := draplugin.CDIName(claim.UID, "dev-0")
	if got := rec.Claims[0].CDIDevices("req"); !slices.Equal(got, []string{want}) {
		t.Fatalf("prepared CDI devices %v, want [%s]", got, want)
	}
	// The container's allocatedResourcesStatus names the claim's request
	// and its device with the health the driver's DRAResourceHealth
	// stream reports (ResourceHealthStatus, on by default in 1.37).
	eventually.True(t, 60*time.Second, "allocatedResourcesStatus in the API, the device Unhealthy", func() bool {
		p, err := pods.Get(ctx, good.Name, metav1.GetOptions{})
		if err != nil || len(p.Status.ContainerStatuses) != 1 {
			return false
		}
		rs := p.Status.ContainerStatuses[0].AllocatedResourcesStatus
		return len(rs) == 1 && rs[0].Name == "claim:gpu/req" && len(rs[0].Resources) == 1 &&
			rs[0].Resources[0].ResourceID == corev1.ResourceID(want) && rs[0].Resources[0].Health == corev1.ResourceHealthStatusUnhealthy &&
			rs[0].Resources[0].Message != nil && *rs[0].Resources[0].Message == "ECC errors"
	})
	cs := e2e.CRIContainers(t, ctrd, string(good.UID))
	if len(cs) != 1 {
		t.Fatalf("containers of %s: %+v", good.Name, cs)
	}
	if major, _ := testenv.ContainerdMajor(); major >= 2 {
		// containerd 2 applied the CDI spec the driver wrote.
		if out := execIn(t, cs[0].Id, "echo $"+draplugin.EnvName("dev-0")); out != "dev\n" {
			t.Fatalf("the container sees %q from its CDI device, want the claim's name", out)
		}
	}

	// A claim that cannot be prepared: the pod never gets a sandbox, and
	// the kubelet's event says why.
	eventually.True(t, 2*time.Minute, "FailedPrepareDynamicResources for the broken claim", func() bool {
		evs, err := admin.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + bad.Name})
		if err != nil {
			return false
		}
		for _, e := range evs.Items {
			if e.Reason == "FailedPrepareDynamicResources" && e.Type == corev1.EventTypeWarning &&
				strings.HasPrefix(e.Message, "Failed to prepare dynamic resources: prepare dynamic resources: NodePrepareResources failed for ResourceClaim broken: ") &&
				strings.Contains(e.Message, "the device is on fire") {
				return true
			}
		}
		return false
	})
	if sb := e2e.CRISandboxes(t, ctrd, string(bad.UID)); len(sb) != 0 {
		t.Fatalf("the pod whose claim failed has sandboxes: %+v", sb)
	}
	if p, err := pods.Get(ctx, bad.Name, metav1.GetOptions{}); err != nil || p.Status.Phase != corev1.PodPending {
		t.Fatalf("the pod whose claim failed: %v %v", p.Status.Phase, err)
	}

	// SIGKILL nodelet-devices: the prepared claim is read back, not
	// prepared again, and the container keeps running.
	st := n.WaitReady()
	if err := syscall.Kill(st["devices"].PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 2*time.Minute, "nodelet-devices back", func() bool {
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
	if got := countOf(plugin.Prepared(), "dev"); got != 1 {
		t.Fatalf("NodePrepareResources of claim dev %d times, want 1", got)
	}
	if now := e2e.CRIContainers(t, ctrd, string(good.UID)); len(now) != 1 || now[0].Id != cs[0].Id {
		t.Fatalf("containers after the restart: %+v", now)
	}

	// Deleted: each claim is unprepared.
	for _, p := range []*corev1.Pod{good, bad} {
		if err := pods.Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	eventually.True(t, 2*time.Minute, "both claims unprepared", func() bool {
		u := plugin.Unprepared()
		return slices.Contains(u, "dev") && slices.Contains(u, "broken")
	})
	eventually.True(t, 30*time.Second, "the claims records gone", func() bool {
		r, _, err := bus.Get[schemas.PodClaims](ctx, tap, bus.BucketDevices, "claims."+string(good.UID))
		return err == nil && r == nil
	})
}

// claimedPod creates a ResourceClaim of one device of draDriver, a pod on
// the node using it, and allocates and reserves the claim for the pod, as
// the scheduler would.
func claimedPod(t *testing.T, ctx context.Context, admin kubernetes.Interface, ns, name, claimName string) *corev1.Pod {
	t.Helper()
	claims := admin.ResourceV1().ResourceClaims(ns)
	claim, err := claims.Create(ctx, &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: claimName},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "req", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "nodelet-test"}}}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p := e2e.APIPod(nodeName, ns, name, "")
	p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: &claimName}}
	p.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpu", Request: "req"}}
	pod, err := admin.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	claim.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
		Results: []resourceapi.DeviceRequestAllocationResult{{Request: "req", Driver: draDriver, Pool: nodeName, Device: "dev-0"}}}}
	claim.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: pod.Name, UID: pod.UID}}
	if _, err := claims.UpdateStatus(ctx, claim, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	return pod
}

func countOf(s []string, v string) int {
	n := 0
	for _, x := range s {
		if x == v {
			n++
		}
	}
	return n
}
