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
	tap       *bus.Conn
	daemon    testenv.Runner
}

func newHarness(t *testing.T) *harness {
	b := bustest.Start(t)
	h := &harness{t: t, b: b, dir: pluginDir(t), sources: b.Connect(bus.Sources), admission: b.Connect(bus.Admission), tap: b.Connect(bus.Tap)}
	t.Cleanup(h.daemon.Stop)
	return h
}

func (h *harness) start() {
	cfg := config.Defaults()
	cfg.Node.StateDir = h.b.StateDir
	d := New(Options{Deps: daemon.Deps{Config: cfg, Log: bustest.Logger(), Bus: h.b.Connect(bus.Devices)}, Dir: h.dir})
	h.daemon.Start(h.t, d.Run)
	// The socket is made anew at every start, as plugins expect.
	sock := filepath.Join(h.dir, "kubelet.sock")
	eventually.True(h.t, waitFor, sock, func() bool {
		st, err := os.Stat(sock)
		return err == nil && st.Mode()&os.ModeSocket != 0
	})
}

func (h *harness) desire(p *corev1.Pod) {
	h.t.Helper()
	if _, err := h.sources.Put(context.Background(), bus.BucketDesired, string(p.UID), &schemas.PodDesired{Pod: p, Source: schemas.SourceFile, FirstSeen: time.Now()}); err != nil {
		h.t.Fatal(err)
	}
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
	h.daemon.Stop()
	p.stop()
	h.start()
	h.resources(func(r schemas.DeviceResource) bool { return r.Endpoint == "" && len(r.Healthy) == 0 })
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
