package devices

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/schemas"
)

// fakeDriver is a DRA driver's gRPC client answering from a table.
type fakeDriver struct {
	name string
	fail map[string]string // claim name → per-claim error
	mu   sync.Mutex
	prep []string // claim names per NodePrepareResources
	unp  []string
}

func (f *fakeDriver) NodePrepareResources(_ context.Context, req *drapb.NodePrepareResourcesRequest, _ ...grpc.CallOption) (*drapb.NodePrepareResourcesResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	resp := &drapb.NodePrepareResourcesResponse{Claims: map[string]*drapb.NodePrepareResourceResponse{}}
	for _, c := range req.Claims {
		f.prep = append(f.prep, c.Name)
		if msg := f.fail[c.Name]; msg != "" {
			resp.Claims[c.Uid] = &drapb.NodePrepareResourceResponse{Error: msg}
			continue
		}
		resp.Claims[c.Uid] = &drapb.NodePrepareResourceResponse{Devices: []*drapb.Device{{RequestNames: []string{"req"},
			PoolName: "pool", DeviceName: "dev-" + c.Name, CdiDeviceIds: []string{f.name + "/dev=" + c.Name}}}}
	}
	return resp, nil
}

func (f *fakeDriver) NodeUnprepareResources(_ context.Context, req *drapb.NodeUnprepareResourcesRequest, _ ...grpc.CallOption) (*drapb.NodeUnprepareResourcesResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	resp := &drapb.NodeUnprepareResourcesResponse{Claims: map[string]*drapb.NodeUnprepareResourceResponse{}}
	for _, c := range req.Claims {
		f.unp = append(f.unp, c.Name)
		resp.Claims[c.Uid] = &drapb.NodeUnprepareResourceResponse{}
	}
	return resp, nil
}

func (f *fakeDriver) calls() ([]string, []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.prep), slices.Clone(f.unp)
}

func claimPod(name, uid string, claims ...corev1.PodResourceClaim) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(uid)},
		Spec: corev1.PodSpec{ResourceClaims: claims}}
}

// claimFor is a claim allocated on driver and reserved for pods.
func claimFor(name, driver string, pods ...*corev1.Pod) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)}}
	c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
		Results: []resourceapi.DeviceRequestAllocationResult{{Request: "req", Driver: driver, Pool: "pool", Device: "dev-" + name}}}}
	for _, p := range pods {
		c.Status.ReservedFor = append(c.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: p.Name, UID: p.UID})
	}
	return c
}

func newTestManager(drv *fakeDriver, claims ...*resourceapi.ResourceClaim) *claimManager {
	get := func(_ context.Context, ns, name string) (*resourceapi.ResourceClaim, error) {
		for _, c := range claims {
			if c.Namespace == ns && c.Name == name {
				return c, nil
			}
		}
		return nil, apierrors.NewNotFound(schema.GroupResource{Group: "resource.k8s.io", Resource: "resourceclaims"}, name)
	}
	return newClaimManager(slog.New(slog.DiscardHandler), func() claimGetter { return get }, func(name string) (draClient, error) {
		if name == drv.name {
			return drv, nil
		}
		return nil, fmt.Errorf("DRA driver %s is not registered", name)
	})
}

// TestPrepareClaims is the kubelet's PrepareResources, case by case: what
// is prepared, what is refused and in which words, and what is tracked
// for unprepare.
func TestPrepareClaims(t *testing.T) {
	const drv = "gpu.example.com"
	byName := func(claim string) corev1.PodResourceClaim {
		return corev1.PodResourceClaim{Name: "gpu", ResourceClaimName: ptr.To(claim)}
	}
	pod := claimPod("p", "pod-1", byName("c"))
	templated := claimPod("t", "pod-2", corev1.PodResourceClaim{Name: "gpu", ResourceClaimTemplateName: ptr.To("tmpl")})
	templated.Status.ResourceClaimStatuses = []corev1.PodResourceClaimStatus{{Name: "gpu", ResourceClaimName: ptr.To("t-gpu-x")}}
	generated := claimFor("t-gpu-x", drv, templated)
	generated.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "t", UID: "pod-2", Controller: ptr.To(true)}}
	notOwned := claimFor("t-gpu-x", drv, templated)
	unallocated := claimFor("c", drv, pod)
	unallocated.Status.Allocation = nil
	// Extended resources backed by DRA: the scheduler's claim, in the
	// pod's status only.
	extended := claimPod("e", "pod-3")
	extended.Status.ExtendedResourceClaimStatus = &corev1.PodExtendedResourceClaimStatus{ResourceClaimName: "e-ext",
		RequestMappings: []corev1.ContainerExtendedResourceRequest{{ContainerName: "c", ResourceName: "example.com/gpu", RequestName: "req"}}}
	for _, tc := range []struct {
		name     string
		pod      *corev1.Pod
		claim    *resourceapi.ResourceClaim
		fail     map[string]string
		wantErr  string // "" prepared
		wantCDI  []string
		tracked  int // claims kept in the record for unprepare
		prepared []string
		podClaim string // the claim's name in the pod; default gpu
	}{
		{name: "by name", pod: pod, claim: claimFor("c", drv, pod), wantCDI: []string{drv + "/dev=c"}, tracked: 1, prepared: []string{"c"}},
		{name: "the scheduler's claim for extended resources", pod: extended, claim: claimFor("e-ext", drv, extended),
			wantCDI: []string{drv + "/dev=e-ext"}, tracked: 1, prepared: []string{"e-ext"}, podClaim: "-"},
		{name: "from a template", pod: templated, claim: generated, wantCDI: []string{drv + "/dev=t-gpu-x"}, tracked: 1, prepared: []string{"t-gpu-x"}},
		{name: "generated claim not the pod's", pod: templated, claim: notOwned,
			wantErr: "prepare dynamic resources: ResourceClaim ns/t-gpu-x was not created for Pod ns/t (Pod is not owner)"},
		{name: "missing", pod: pod, claim: claimFor("other", drv, pod),
			wantErr: `prepare dynamic resources: fetch ResourceClaim c: resourceclaims.resource.k8s.io "c" not found`},
		{name: "not reserved for the pod", pod: pod, claim: claimFor("c", drv),
			wantErr: "prepare dynamic resources: pod p (pod-1) is not allowed to use ResourceClaim c (uid-c)"},
		{name: "not allocated", pod: pod, claim: unallocated, wantErr: "prepare dynamic resources: ResourceClaim c: not allocated"},
		{name: "driver not registered", pod: pod, claim: claimFor("c", "other.example.com", pod),
			wantErr: "prepare dynamic resources: DRA driver other.example.com is not registered"},
		{name: "driver fails the claim", pod: pod, claim: claimFor("c", drv, pod), fail: map[string]string{"c": "on fire"},
			wantErr: "prepare dynamic resources: NodePrepareResources failed for ResourceClaim c: on fire", tracked: 1, prepared: []string{"c"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeDriver{name: drv, fail: tc.fail}
			m := newTestManager(f, tc.claim)
			var stored []*schemas.PodClaims
			rec := m.prepare(context.Background(), tc.pod, func(r *schemas.PodClaims) error {
				c := *r
				c.Claims = slices.Clone(r.Claims)
				stored = append(stored, &c)
				return nil
			})
			if rec.Error != tc.wantErr || rec.Prepared != (tc.wantErr == "") {
				t.Fatalf("error %q prepared %v, want %q", rec.Error, rec.Prepared, tc.wantErr)
			}
			if len(rec.Claims) != tc.tracked {
				t.Fatalf("tracked claims %+v, want %d", rec.Claims, tc.tracked)
			}
			if tc.wantErr == "" {
				pc := rec.Claim("gpu")
				if tc.podClaim == "-" {
					pc = rec.ClaimNamed(tc.prepared[0])
				}
				if got := pc.CDIDevices("req"); !slices.Equal(got, tc.wantCDI) {
					t.Fatalf("CDI devices %v, want %v", got, tc.wantCDI)
				}
				// Checkpointed before the driver was called, then prepared.
				if len(stored) != 2 || stored[0].Prepared || len(stored[0].Claims) != 1 || !stored[1].Prepared {
					t.Fatalf("stored %+v", stored)
				}
			}
			if prep, _ := f.calls(); !slices.Equal(prep, tc.prepared) {
				t.Fatalf("NodePrepareResources for %v, want %v", prep, tc.prepared)
			}
			if m.record(string(tc.pod.UID)) == nil {
				t.Fatal("the record is not kept")
			}
		})
	}
}

// A claim two pods share is prepared once and unprepared only when the
// last of them is gone; a failed pod's tracked claim is unprepared too.
func TestUnprepareSharedClaim(t *testing.T) {
	const drv = "gpu.example.com"
	a := claimPod("a", "pod-a", corev1.PodResourceClaim{Name: "gpu", ResourceClaimName: ptr.To("shared")})
	b := claimPod("b", "pod-b", corev1.PodResourceClaim{Name: "dev", ResourceClaimName: ptr.To("shared")})
	f := &fakeDriver{name: drv}
	m := newTestManager(f, claimFor("shared", drv, a, b))
	store := func(*schemas.PodClaims) error { return nil }
	ctx := context.Background()
	if r := m.prepare(ctx, a, store); !r.Prepared {
		t.Fatal(r.Error)
	}
	rb := m.prepare(ctx, b, store)
	if !rb.Prepared || !slices.Equal(rb.Claim("dev").CDIDevices(""), []string{drv + "/dev=shared"}) {
		t.Fatalf("b: %+v", rb)
	}
	if prep, _ := f.calls(); !slices.Equal(prep, []string{"shared"}) {
		t.Fatalf("NodePrepareResources for %v, want the shared claim once", prep)
	}
	if err := m.unprepare(ctx, "pod-a"); err != nil {
		t.Fatal(err)
	}
	m.forget("pod-a")
	if _, unp := f.calls(); len(unp) != 0 {
		t.Fatalf("unprepared %v while b still uses the claim", unp)
	}
	if err := m.unprepare(ctx, "pod-b"); err != nil {
		t.Fatal(err)
	}
	if _, unp := f.calls(); !slices.Equal(unp, []string{"shared"}) {
		t.Fatalf("unprepared %v, want the shared claim", unp)
	}
	// A driver gone: unprepare fails, in the kubelet's words, and is retried.
	m2 := newTestManager(&fakeDriver{name: "other"})
	m2.restore([]*schemas.PodClaims{{UID: "pod-c", Namespace: "ns", Claims: []schemas.PreparedClaim{{Name: "x", UID: "u", Drivers: []string{drv}}}}})
	if err := m2.unprepare(ctx, "pod-c"); err == nil || !strings.Contains(err.Error(), "DRA driver gpu.example.com is not registered") {
		t.Fatalf("unprepare without the driver: %v", err)
	}
}
