package admission

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/schemas"
)

const devRes = "example.com/dev"

// putDevices writes what nodelet-devices would: its resources, or a pod's
// allocation.
func putDevices(t *testing.T, c *bus.Conn, key string, m schemas.Message) {
	t.Helper()
	if _, err := c.Put(context.Background(), bus.BucketDevices, key, m); err != nil {
		t.Fatal(err)
	}
}

func allocation(p *corev1.Pod, err string, ids ...string) *schemas.PodDevices {
	rec := &schemas.PodDevices{UID: string(p.UID), Namespace: p.Namespace, Name: p.Name, Error: err}
	if err == "" {
		rec.Containers = []schemas.ContainerDevices{{Name: "c", Resources: []schemas.ResourceAllocation{{Resource: devRes, DeviceIDs: ids}}}}
	}
	return rec
}

// TestDevices: a pod asking for a device plugin resource waits for its
// allocation; one whose allocation failed is refused as the kubelet's
// allocate-resources admit handler refuses it; a resource no plugin serves
// is left to the cluster (the kubelet's removeMissingExtendedResources).
func TestDevices(t *testing.T) {
	h := newHarness(t)
	devices := h.b.Connect(bus.Devices)
	putDevices(t, devices, bus.KeyDevices, &schemas.DeviceResources{Resources: []schemas.DeviceResource{
		{Name: devRes, Endpoint: "/x/dp.sock", Healthy: []string{"D1", "D2"}}}})
	h.start()

	a := makePod("a", 1, withLimits(devRes, "2"), withRequests(devRes, "2"))
	h.put(a)
	// A later pod without devices is decided while a waits.
	plain := makePod("plain", 2)
	h.put(plain)
	h.admitted(plain)
	if v, _ := h.verdict(a); v != nil {
		t.Fatalf("a was decided before its devices were allocated: %+v", v)
	}
	putDevices(t, devices, "pods."+string(a.UID), allocation(a, "", "D1", "D2"))
	h.admitted(a)

	b := makePod("b", 3, withLimits(devRes, "1"), withRequests(devRes, "1"))
	h.put(b)
	putDevices(t, devices, "pods."+string(b.UID), allocation(b, "requested number of devices unavailable for example.com/dev. Requested: 1, Available: 0"))
	h.rejected(b, ReasonUnexpectedAdmissionError,
		"Allocate failed due to requested number of devices unavailable for example.com/dev. Requested: 1, Available: 0, which is unexpected")
	if ev := h.waitEvent(b); ev.Reason != ReasonUnexpectedAdmissionError {
		t.Errorf("event %+v", ev)
	}

	// The plugin went (allocatable 0): a pod holding devices still fits
	// (sanitizeNodeAllocatable), one asking anew without an allocation is
	// short of the resource.
	putDevices(t, devices, bus.KeyDevices, &schemas.DeviceResources{Resources: []schemas.DeviceResource{
		{Name: devRes, Unhealthy: []string{"D1", "D2"}}}})
	h.remove(a)
	h.waitGone(a)
	c := makePod("c", 4, withLimits(devRes, "2"), withRequests(devRes, "2"))
	h.put(c)
	putDevices(t, devices, "pods."+string(c.UID), allocation(c, "", "D1", "D2"))
	h.admitted(c)

	// Not served by any plugin: a cluster-level resource, not counted.
	other := makePod("other", 5, withLimits("example.com/cluster", "1"), withRequests("example.com/cluster", "1"))
	h.put(other)
	h.admitted(other)
}
