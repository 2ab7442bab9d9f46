package devices

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/bus/bustest"
	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/internal/daemon"
	"github.com/nodelet/nodelet/internal/testenv"
	"github.com/nodelet/nodelet/internal/testenv/eventually"
	"github.com/nodelet/nodelet/schemas"
)

const waitFor = 30 * time.Second

// harness is a real bus with nodelet-devices in-process, the sources' and
// admission's credentials to feed it and tap's to read what it writes.
type harness struct {
	t         *testing.T
	b         *bustest.Bus
	dir       string
	sources   *bus.Conn
	admission *bus.Conn
	runtime   *bus.Conn
	tap       *bus.Conn
	daemon    testenv.Runner
	// conn is the running daemon's: closed when it stops, as a process's.
	conn *bus.Conn
	// registry and client, when set, are the daemon's DRA plugin
	// registry and its API client (ResourceClaims).
	registry string
	client   kubernetes.Interface
}

func newHarness(t *testing.T) *harness {
	b := bustest.Start(t)
	h := &harness{t: t, b: b, dir: pluginDir(t), sources: b.Connect(bus.Sources), admission: b.Connect(bus.Admission),
		runtime: b.Connect(bus.Runtime), tap: b.Connect(bus.Tap)}
	t.Cleanup(h.stop)
	h.sourcesReady()
	return h
}

// sourcesReady says every source delivered its pods, as nodelet-sources
// does: nothing is freed before.
func (h *harness) sourcesReady() {
	h.t.Helper()
	eventually.State(h.t, waitFor, "sources ready stored", func() (bool, string) {
		_, err := h.sources.Put(context.Background(), bus.BucketSources, bus.KeySourcesReady,
			&schemas.SourcesReady{Configured: []string{"file"}, Ready: []string{"file"}, AllReady: true})
		return err == nil, fmt.Sprint(err)
	})
}

// observe stores the runtime's report of a pod.
func (h *harness) observe(o *schemas.PodObserved) {
	h.t.Helper()
	if _, err := h.runtime.Put(context.Background(), bus.BucketObserved, o.UID, o); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) start() {
	cfg := config.Defaults()
	cfg.Node.StateDir = h.b.StateDir
	h.conn = h.b.Connect(bus.Devices)
	d := New(Options{Deps: daemon.Deps{Config: cfg, Log: bustest.Logger(), Bus: h.conn}, Dir: h.dir, RegistryDir: h.registry, Client: h.client})
	h.daemon.Start(h.t, d.Run)
	// The socket is made anew at every start, as plugins expect.
	sock := filepath.Join(h.dir, "kubelet.sock")
	eventually.True(h.t, waitFor, sock, func() bool {
		st, err := os.Stat(sock)
		return err == nil && st.Mode()&os.ModeSocket != 0
	})
}

// stop ends the daemon and its connection.
func (h *harness) stop() {
	h.daemon.Stop()
	if h.conn != nil {
		h.conn.Close()
		h.conn = nil
	}
}

func (h *harness) desire(p *corev1.Pod) {
	h.t.Helper()
	eventually.State(h.t, waitFor, "pod "+string(p.UID)+" desired", func() (bool, string) {
		_, err := h.sources.Put(context.Background(), bus.BucketDesired, string(p.UID), &schemas.PodDesired{Pod: p, Source: schemas.SourceFile, FirstSeen: time.Now()})
		return err == nil, fmt.Sprint(err)
	})
}

// record waits until the pod's allocation is ok.
func (h *harness) record(uid string, ok func(*schemas.PodDevices) bool) *schemas.PodDevices {
	h.t.Helper()
	var rec *schemas.PodDevices
	eventually.State(h.t, waitFor, "the allocation of "+uid, func() (bool, string) {
		var err error
		rec, _, err = bus.Get[schemas.PodDevices](context.Background(), h.tap, bus.BucketDevices, KeyPodPrefix+uid)
		return err == nil && ok(rec), fmt.Sprintf("%+v %v", rec, err)
	})
	return rec
}

// resources waits until the resource is as ok wants it.
func (h *harness) resources(ok func(r schemas.DeviceResource) bool) {
	h.t.Helper()
	eventually.State(h.t, waitFor, "the resources", func() (bool, string) {
		r, _, err := bus.Get[schemas.DeviceResources](context.Background(), h.tap, bus.BucketDevices, bus.KeyDevices)
		if err != nil || r == nil {
			return false, fmt.Sprint(err)
		}
		for _, x := range r.Resources {
			if x.Name == res && ok(x) {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", r.Resources)
	})
}

// TestDaemon follows one node's devices: a plugin registers, two pods
// share its two devices as the kubelet allocates them, a restart of the
// daemon keeps the allocation (and hands nothing twice), the plugin
// registers again, devices are freed when a pod is refused or gone, and a
// plugin that goes leaves its devices unhealthy (allocatable 0).
func TestDaemon(t *testing.T) {
	h := newHarness(t)
	h.start()
	p := newFakePlugin(t, h.dir, res, "Dev-1", "Dev-2")
	p.start()
	h.resources(func(r schemas.DeviceResource) bool { return len(r.Healthy) == 2 && r.Endpoint != "" })

	h.desire(devPod("a", wants("c", 2)))
	a := h.record("a", func(r *schemas.PodDevices) bool { return r != nil })
	if a.Error != "" || !slices.Equal(idsOf(a, "c"), []string{"Dev-1", "Dev-2"}) {
		t.Fatalf("pod a: %+v", a)
	}
	h.desire(devPod("b", wants("c", 1)))
	b := h.record("b", func(r *schemas.PodDevices) bool { return r != nil })
	if want := "requested number of devices unavailable for example.com/resource. Requested: 1, Available: 0"; b.Error != want {
		t.Fatalf("pod b: error %q, want %q", b.Error, want)
	}

	// A restart: the allocation stays, the plugin registers again once
	// kubelet.sock is made anew, and nothing is handed twice.
	h.stop()
	p.stop()
	h.start()
	// Until the plugin registers again the resource has no device, healthy
	// or not: capacity and allocatable 0, as the kubelet's readCheckpoint
	// leaves them (empty device sets) for GetCapacity; a pod asking for it
	// is refused in the kubelet's words, never handed a device.
	h.resources(func(r schemas.DeviceResource) bool {
		return r.Endpoint == "" && len(r.Healthy) == 0 && len(r.Unhealthy) == 0
	})
	h.desire(devPod("early", wants("c", 1)))
	if want := "no healthy devices present; cannot allocate unhealthy devices example.com/resource"; h.record("early", func(r *schemas.PodDevices) bool { return r != nil }).Error != want {
		t.Fatalf("pod early was not refused with %q", want)
	}
	p = newFakePlugin(t, h.dir, res, "Dev-1", "Dev-2")
	p.start()
	h.resources(func(r schemas.DeviceResource) bool { return len(r.Healthy) == 2 && r.Endpoint != "" })
	if got := h.record("a", func(r *schemas.PodDevices) bool { return r != nil }); !slices.Equal(idsOf(got, "c"), []string{"Dev-1", "Dev-2"}) {
		t.Fatalf("pod a after the restart: %+v", got)
	}
	p.mu.Lock()
	allocs := len(p.allocs)
	p.mu.Unlock()
	if allocs != 0 {
		t.Fatalf("the restarted daemon called Allocate %d times: %v", allocs, p.allocs)
	}

	// Refused: b's record goes. Gone: a's goes, and its devices serve c.
	if _, err := h.admission.Put(context.Background(), bus.BucketAdmission, "b", &schemas.AdmissionVerdict{UID: "b", Reason: "UnexpectedAdmissionError"}); err != nil {
		t.Fatal(err)
	}
	h.record("b", func(r *schemas.PodDevices) bool { return r == nil })
	if err := h.sources.Delete(context.Background(), bus.BucketDesired, "a"); err != nil {
		t.Fatal(err)
	}
	h.record("a", func(r *schemas.PodDevices) bool { return r == nil })
	h.desire(devPod("c", wants("c", 2)))
	if c := h.record("c", func(r *schemas.PodDevices) bool { return r != nil }); c.Error != "" || len(idsOf(c, "c")) != 2 {
		t.Fatalf("pod c: %+v", c)
	}

	// A device turns unhealthy; then the plugin goes: every device is
	// unhealthy, none allocatable.
	p.setHealth("Dev-2", "Unhealthy")
	h.resources(func(r schemas.DeviceResource) bool { return slices.Equal(r.Unhealthy, []string{"Dev-2"}) })
	p.stop()
	h.resources(func(r schemas.DeviceResource) bool {
		return r.Endpoint == "" && len(r.Healthy) == 0 && len(r.Unhealthy) == 2 && r.StoppedAt != nil && !r.Removed
	})
}

// exited is a report of pod uid whose only container c exited with code.
func exited(uid string, code int32) *schemas.PodObserved {
	return &schemas.PodObserved{UID: uid, Namespace: "default", Name: "p-" + uid, Containers: []schemas.ContainerObserved{{
		Name: "c", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code}}}}}
}

// TestFinishedPodsFreeTheirDevices: the devices of a pod that finished
// while still desired go back, as the kubelet's UpdateAllocatedDevices
// keeps only its activePods (filterOutInactivePods: a terminal phase, or
// terminated): every container done under restartPolicy Never, a
// Succeeded phase, a pod the runtime reports terminated. A container that
// exited under restartPolicy Always restarts and keeps its devices.
func TestFinishedPodsFreeTheirDevices(t *testing.T) {
	h := newHarness(t)
	h.start()
	p := newFakePlugin(t, h.dir, res, "Dev-1", "Dev-2")
	p.start()
	h.resources(func(r schemas.DeviceResource) bool { return len(r.Healthy) == 2 && r.Endpoint != "" })

	always := devPod("always", wants("c", 1))
	never := devPod("never", wants("c", 1))
	never.Spec.RestartPolicy = corev1.RestartPolicyNever
	h.desire(always)
	h.record("always", func(r *schemas.PodDevices) bool { return r != nil && r.Error == "" })
	h.desire(never)
	held := idsOf(h.record("never", func(r *schemas.PodDevices) bool { return r != nil && r.Error == "" }), "c")

	// Both exit; one observed bucket keeps the order: once never's devices
	// are free, always's exit was seen too, and it keeps its device.
	h.observe(exited("always", 0))
	h.observe(exited("never", 0))
	h.record("never", func(r *schemas.PodDevices) bool { return r == nil })
	if a := h.record("always", func(r *schemas.PodDevices) bool { return true }); a == nil || len(idsOf(a, "c")) != 1 {
		t.Fatalf("a pod whose container restarts lost its device: %+v", a)
	}

	// The freed device serves the next pod; a Succeeded phase frees it.
	next := devPod("next", wants("c", 1))
	h.desire(next)
	if got := idsOf(h.record("next", func(r *schemas.PodDevices) bool { return r != nil }), "c"); !slices.Equal(got, held) {
		t.Fatalf("next pod got %v, want the finished pod's %v", got, held)
	}
	next.Status.Phase = corev1.PodSucceeded
	h.desire(next)
	h.record("next", func(r *schemas.PodDevices) bool { return r == nil })

	// Terminated by the runtime (e.g. evicted): freed.
	h.observe(&schemas.PodObserved{UID: "always", Namespace: "default", Name: "p-always", Terminated: true})
	h.record("always", func(r *schemas.PodDevices) bool { return r == nil })
	h.desire(devPod("both", wants("c", 2)))
	if b := h.record("both", func(r *schemas.PodDevices) bool { return r != nil }); b.Error != "" || len(idsOf(b, "c")) != 2 {
		t.Fatalf("pod both: %+v", b)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.allocs) != 4 {
		t.Fatalf("Allocate calls %v, want 4 (a finished pod is not allocated again)", p.allocs)
	}
}

// TestCheckpointOutlivesBusWipe: the allocations survive a wipe of the
// bus's store, as the kubelet's survive in kubelet_internal_checkpoint: a
// restarted nodelet-devices reads CheckpointFile, the running pod keeps
// its devices without a new Allocate, and a new pod finds none free.
func TestCheckpointOutlivesBusWipe(t *testing.T) {
	h := newHarness(t)
	h.start()
	p := newFakePlugin(t, h.dir, res, "Dev-1", "Dev-2")
	p.start()
	h.resources(func(r schemas.DeviceResource) bool { return len(r.Healthy) == 2 && r.Endpoint != "" })
	a := devPod("a", wants("c", 2))
	h.desire(a)
	if rec := h.record("a", func(r *schemas.PodDevices) bool { return r != nil }); rec.Error != "" {
		t.Fatalf("pod a: %+v", rec)
	}
	if _, err := os.Stat(filepath.Join(h.dir, CheckpointFile)); err != nil {
		t.Fatalf("no checkpoint: %v", err)
	}

	// The node stops, its bus's store goes; at the next start the sources
	// put the pod again.
	h.stop()
	p.stop()
	h.b.Restart(true)
	h.desire(a)
	h.sourcesReady()
	h.start()
	p = newFakePlugin(t, h.dir, res, "Dev-1", "Dev-2")
	p.start()
	h.resources(func(r schemas.DeviceResource) bool { return len(r.Healthy) == 2 && r.Endpoint != "" })
	if got := h.record("a", func(r *schemas.PodDevices) bool { return r != nil }); got.Error != "" || !slices.Equal(idsOf(got, "c"), []string{"Dev-1", "Dev-2"}) {
		t.Fatalf("pod a after the wipe: %+v", got)
	}
	h.desire(devPod("b", wants("c", 1)))
	if want := "requested number of devices unavailable for example.com/resource. Requested: 1, Available: 0"; h.record("b", func(r *schemas.PodDevices) bool { return r != nil }).Error != want {
		t.Fatalf("pod b was not refused with %q", want)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.allocs) != 0 {
		t.Fatalf("Allocate called again after the wipe: %v", p.allocs)
	}
}

// TestCorruptCheckpoint: a checkpoint whose checksum does not match is not
// trusted (the kubelet's checkpoint manager refuses it); the bucket is.
func TestCorruptCheckpoint(t *testing.T) {
	dir := t.TempDir()
	pods := []*schemas.PodDevices{{UID: "a", Containers: []schemas.ContainerDevices{{Name: "c",
		Resources: []schemas.ResourceAllocation{{Resource: res, DeviceIDs: []string{"Dev-1"}}}}}}}
	b, err := encodeCheckpoint(&schemas.DeviceResources{Resources: []schemas.DeviceResource{{Name: res}}}, pods)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeFileAtomic(filepath.Join(dir, CheckpointFile), b); err != nil {
		t.Fatal(err)
	}
	r, got, err := readCheckpoint(dir)
	if err != nil || len(got) != 1 || got[0].UID != "a" || r == nil || r.Resources[0].Name != res {
		t.Fatalf("read back: %+v %+v %v", r, got, err)
	}
	if err := os.WriteFile(filepath.Join(dir, CheckpointFile), []byte(strings.Replace(string(b), "Dev-1", "Dev-2", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := readCheckpoint(dir); err == nil || !strings.Contains(err.Error(), "corrupted") {
		t.Fatalf("a changed checkpoint was read: %v", err)
	}
	if _, _, err := readCheckpoint(t.TempDir()); !errors.Is(err, errNoCheckpoint) {
		t.Fatalf("no file: %v", err)
	}
}
