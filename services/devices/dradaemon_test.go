package devices

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	drahealthv1alpha1 "k8s.io/kubelet/pkg/apis/dra-health/v1alpha1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/testenv/eventually"
	"github.com/nodelet/nodelet/schemas"
)

const testDriver = "gpu.example.com"

// draHarness is the harness with a DRA driver on real gRPC registering in
// the plugin registry, and the claims (allocated on it, reserved for the
// pods) served by a fake API client.
func draHarness(t *testing.T, health bool, pods ...*corev1.Pod) (*harness, *grpcDriver) {
	t.Helper()
	h := newHarness(t)
	h.registry = filepath.Join(filepath.Dir(h.dir), "reg")
	if err := os.MkdirAll(h.registry, 0o750); err != nil {
		t.Fatal(err)
	}
	client := fake.NewClientset()
	byClaim := map[string][]*corev1.Pod{}
	var names []string
	for _, p := range pods {
		for _, c := range p.Spec.ResourceClaims {
			if byClaim[*c.ResourceClaimName] == nil {
				names = append(names, *c.ResourceClaimName)
			}
			byClaim[*c.ResourceClaimName] = append(byClaim[*c.ResourceClaimName], p)
		}
	}
	for _, name := range names {
		if _, err := client.ResourceV1().ResourceClaims("ns").Create(context.Background(), claimFor(name, testDriver, byClaim[name]...), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	h.client = client
	return h, serveDriver(t, h.registry, testDriver, health)
}

// withClaim is a pod of one container using ResourceClaim claim.
func withClaim(name, uid, claim string) *corev1.Pod {
	p := claimPod(name, uid, corev1.PodResourceClaim{Name: "gpu", ResourceClaimName: ptr.To(claim)})
	p.Spec.RestartPolicy = corev1.RestartPolicyNever
	p.Spec.Containers = []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}}}
	return p
}

// admit desires the pod and admits it, as the sources and admission do.
func (h *harness) admit(p *corev1.Pod) {
	h.t.Helper()
	h.desire(p)
	eventually.State(h.t, waitFor, "pod "+string(p.UID)+" admitted", func() (bool, string) {
		_, err := h.admission.Put(context.Background(), bus.BucketAdmission, string(p.UID),
			&schemas.AdmissionVerdict{UID: string(p.UID), Namespace: p.Namespace, Name: p.Name, Admitted: true})
		return err == nil, fmt.Sprint(err)
	})
}

// claims waits until the pod's claims record is as ok wants it (nil: none).
func (h *harness) claims(uid string, ok func(*schemas.PodClaims) bool) *schemas.PodClaims {
	h.t.Helper()
	var rec *schemas.PodClaims
	eventually.State(h.t, waitFor, "the claims of "+uid, func() (bool, string) {
		var err error
		rec, _, err = bus.Get[schemas.PodClaims](context.Background(), h.tap, bus.BucketDevices, KeyClaimsPrefix+uid)
		return err == nil && ok(rec), fmt.Sprintf("%+v %v", rec, err)
	})
	return rec
}

func prepared(r *schemas.PodClaims) bool { return r != nil && r.Prepared }
func none(r *schemas.PodClaims) bool     { return r == nil }

// driverCalls waits until the driver was asked to prepare and unprepare
// exactly these claims, in any order (pods admitted together are
// prepared in the order the daemon sees them), each as often as listed.
func driverCalls(t *testing.T, d *grpcDriver, prep, unp []string) {
	t.Helper()
	prep, unp = slices.Sorted(slices.Values(prep)), slices.Sorted(slices.Values(unp))
	eventually.State(t, waitFor, "the driver's calls", func() (bool, string) {
		p, u := d.calls()
		p, u = slices.Sorted(slices.Values(p)), slices.Sorted(slices.Values(u))
		return slices.Equal(p, prep) && slices.Equal(u, unp), fmt.Sprintf("prepared %v, unprepared %v; want %v, %v", p, u, prep, unp)
	})
}

// TestClaimsOutliveBusWipe is the kubelet's dra_manager_state: the bus's
// store wiped between two runs, the claims are read back from
// DRACheckpointFile; the pod still there is not prepared again, and the
// claim of a pod deleted while the node was down is unprepared (the
// bucket alone would have forgotten both).
func TestClaimsOutliveBusWipe(t *testing.T) {
	a, b := withClaim("a", "a", "ca"), withClaim("b", "b", "cb")
	h, drv := draHarness(t, false, a, b)
	h.start()
	h.admit(a)
	h.admit(b)
	h.claims("a", prepared)
	h.claims("b", prepared)
	driverCalls(t, drv, []string{"ca", "cb"}, nil)
	recs, err := readDRACheckpoint(h.dir)
	if err != nil || len(recs) != 2 || !recs[0].Prepared || !recs[1].Prepared {
		t.Fatalf("checkpoint: %+v %v", recs, err)
	}

	// The node stops, its bus's store goes, pod b is deleted meanwhile;
	// at the next start the sources put pod a again.
	h.stop()
	h.b.Restart(true)
	h.admit(a)
	h.sourcesReady()
	h.start()
	driverCalls(t, drv, []string{"ca", "cb"}, []string{"cb"})
	h.claims("b", none)
	if got := h.claims("a", prepared); len(got.Claims) != 1 || got.Claims[0].Devices[0].Device != "dev-ca" {
		t.Fatalf("pod a after the wipe: %+v", got)
	}
	if recs, err := readDRACheckpoint(h.dir); err != nil || len(recs) != 1 || recs[0].UID != "a" {
		t.Fatalf("checkpoint after the wipe: %+v %v", recs, err)
	}
}

// TestCorruptDRACheckpoint: a checksum mismatch is refused, as the
// kubelet's checkpoint manager refuses it.
func TestCorruptDRACheckpoint(t *testing.T) {
	dir := t.TempDir()
	b, err := encodeDRACheckpoint([]*schemas.PodClaims{{UID: "a", Prepared: true, Claims: []schemas.PreparedClaim{{Name: "c1", UID: "u1"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := writeFileAtomic(filepath.Join(dir, DRACheckpointFile), b); err != nil {
		t.Fatal(err)
	}
	if got, err := readDRACheckpoint(dir); err != nil || len(got) != 1 || got[0].Claims[0].Name != "c1" {
		t.Fatalf("read back: %+v %v", got, err)
	}
	bad := []byte(string(b[:len(b)-20]) + "9" + string(b[len(b)-19:]))
	if err := os.WriteFile(filepath.Join(dir, DRACheckpointFile), bad, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := readDRACheckpoint(dir); err == nil {
		t.Fatal("a changed checkpoint was read")
	}
}

// TestUnprepareAtTermination is the kubelet's UnprepareDynamicResources
// in SyncTerminatingPod: a pod's claims are unprepared once the pod is
// terminated, while it is still desired (its API object not yet deleted),
// and it is not prepared again; a claim another pod still runs with stays
// prepared until that pod terminates too.
func TestUnprepareAtTermination(t *testing.T) {
	a, b := withClaim("a", "a", "shared"), withClaim("b", "b", "shared")
	c := withClaim("c", "c", "own")
	h, drv := draHarness(t, false, a, b, c)
	h.start()
	for _, p := range []*corev1.Pod{a, b, c} {
		h.admit(p)
		h.claims(string(p.UID), prepared)
	}
	driverCalls(t, drv, []string{"shared", "own"}, nil)

	// a's container exited under restartPolicy Never: a is done, b still
	// runs with the claim.
	h.observe(exitedIn("a", 0))
	h.claims("a", none)
	// c terminated by the runtime: its own claim goes.
	h.observe(&schemas.PodObserved{UID: "c", Namespace: "ns", Name: "c", Terminated: true})
	h.claims("c", none)
	driverCalls(t, drv, []string{"shared", "own"}, []string{"own"})
	// b done: the shared claim's last pod.
	h.observe(exitedIn("b", 1))
	h.claims("b", none)
	driverCalls(t, drv, []string{"shared", "own"}, []string{"own", "shared"})
}

func exitedIn(uid string, code int32) *schemas.PodObserved {
	return &schemas.PodObserved{UID: uid, Namespace: "ns", Name: uid, Containers: []schemas.ContainerObserved{{
		Name: "c", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code}}}}}
}

// TestDRAHealth is the kubelet's DRAResourceHealth client: a driver that
// lists the health service in its registration is watched
// (NodeWatchResources), each device's reported health and message are
// published in the drahealth record, a device not reported again within
// its timeout goes Unknown, and a stream that ends clears the driver's
// devices.
func TestDRAHealth(t *testing.T) {
	h, drv := draHarness(t, true)
	h.start()
	eventually.True(t, waitFor, "the driver's health stream opened", drv.watched)
	report := func(health drahealthv1alpha1.HealthStatus, msg string, timeout int64) {
		t.Helper()
		r := &drahealthv1alpha1.NodeWatchResourcesResponse{Devices: []*drahealthv1alpha1.DeviceHealth{{
			Device: &drahealthv1alpha1.DeviceIdentifier{PoolName: "pool", DeviceName: "dev-c"}, Health: health,
			LastUpdatedTime: time.Now().Unix(), HealthCheckTimeoutSeconds: timeout, Message: msg}}}
		select {
		case drv.reports <- r:
		case <-time.After(waitFor):
			t.Fatal("the daemon does not read the health stream")
		}
	}
	device := func(what string, ok func(d *schemas.DRADeviceHealth) bool) {
		t.Helper()
		eventually.State(t, waitFor, what, func() (bool, string) {
			r, _, err := bus.Get[schemas.DRAHealth](context.Background(), h.tap, bus.BucketDevices, bus.KeyDRAHealth)
			if err != nil || r == nil {
				return false, fmt.Sprint(err)
			}
			return ok(r.Device(testDriver, "pool", "dev-c")), fmt.Sprintf("%+v", r.Devices)
		})
	}
	report(drahealthv1alpha1.HealthStatus_UNHEALTHY, "ECC errors", 0)
	device("dev-c Unhealthy with its message, the default timeout", func(d *schemas.DRADeviceHealth) bool {
		return d != nil && d.Health == "Unhealthy" && d.Message == "ECC errors" && d.Timeout == defaultHealthTimeout
	})
	report(drahealthv1alpha1.HealthStatus_HEALTHY, "", 1)
	device("dev-c Healthy", func(d *schemas.DRADeviceHealth) bool {
		return d != nil && d.Health == "Healthy" && d.Timeout == time.Second
	})
	// Not reported again: Unknown once its second is over.
	device("dev-c Unknown after its timeout", func(d *schemas.DRADeviceHealth) bool { return d != nil && d.Health == "Unknown" })
	report(drahealthv1alpha1.HealthStatus_HEALTHY, "", 60)
	device("dev-c Healthy again", func(d *schemas.DRADeviceHealth) bool { return d != nil && d.Health == "Healthy" })
	// The stream ends: nothing is known of the driver's devices.
	drv.reports <- nil
	device("dev-c cleared when the stream ended", func(d *schemas.DRADeviceHealth) bool { return d == nil })
}
