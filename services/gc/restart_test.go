package gc

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/bus"
)

// dyingRuntime is CRI for a gc that dies after its first removal: the
// pass's context is cancelled the moment one container (or image) is gone,
// so every later call of the pass fails as it would in a killed process.
type dyingRuntime struct {
	internalapi.RuntimeService
	die     context.CancelFunc
	removed atomic.Int32
}

func (d *dyingRuntime) RemoveContainer(ctx context.Context, id string) error {
	err := d.RuntimeService.RemoveContainer(ctx, id)
	if err == nil && d.removed.Add(1) == 1 {
		d.die()
	}
	return err
}

type dyingImages struct {
	internalapi.ImageManagerService
	die     context.CancelFunc
	removed atomic.Int32
}

func (d *dyingImages) RemoveImage(ctx context.Context, img *runtimeapi.ImageSpec) error {
	err := d.ImageManagerService.RemoveImage(ctx, img)
	if err == nil && d.removed.Add(1) == 1 {
		d.die()
	}
	return err
}

// A gc killed in the middle of its container and image passes, then
// restarted with nothing but the bus and CRI, finishes the job and keeps
// what it must: the last dead instance of a live pod's container, running
// containers, in-use and pause images; the least-recently-used order comes
// back from the images bucket.
func TestRestartAfterDeathMidPass(t *testing.T) {
	e := newTestEnv(t)
	e.cfg.GC.ImageGCHighThresholdPercent, e.cfg.GC.ImageGCLowThresholdPercent = 1, 0
	e.cfg.GC.ImageMinimumGCAge = 0

	live := newPod("live", corev1.Container{Name: "app"}, corev1.Container{Name: "side"})
	pl := e.runSandbox(live, 0)
	var instances []string
	for attempt := range uint32(4) {
		instances = append(instances, e.crash(pl, "app", attempt))
	}
	side := e.startContainer(pl, "side", 0, "sleep", "3600")
	e.desire(live)
	e.observe(live, false)
	gone := newPod("gone", corev1.Container{Name: "app"})
	pg := e.runSandbox(gone, 0)
	e.crash(pg, "app", 0)
	e.crash(pg, "app", 1)
	e.stopPod(pg)
	e.sourcesReady(true)

	imgA := e.importImage("nodelet.local/gc-a:1")
	imgB := e.importImage("nodelet.local/gc-b:1")
	imgC := e.importImage("nodelet.local/gc-c:1")
	now := time.Now()
	prev := e.bus.Connect(bus.GC)
	seedImageRecord(t, prev, imgA, now.Add(-24*time.Hour), now.Add(-3*time.Hour))
	seedImageRecord(t, prev, imgB, now.Add(-24*time.Hour), now.Add(-2*time.Hour))
	seedImageRecord(t, prev, imgC, now.Add(-24*time.Hour), now.Add(-1*time.Hour))

	// The first gc dies one removal into each pass.
	passCtx, die := context.WithCancel(testCtx(t))
	rt := &dyingRuntime{RuntimeService: e.cri.Runtime, die: die}
	g1, stop1 := e.newGC(func(o *Options) { o.Runtime = rt })
	waitFor(t, "gc to see the pods", func() bool { return g1.state.pod(string(live.UID)) != nil && g1.state.allSourcesReady() })
	res, _ := g1.containers.garbageCollect(passCtx, false)
	if len(res.Containers) != 1 || passCtx.Err() == nil {
		t.Fatalf("the dying pass removed %v (ctx %v), want exactly one container before it died", res.Containers, passCtx.Err())
	}
	imgCtx, dieImages := context.WithCancel(testCtx(t))
	g1.images.img = &dyingImages{ImageManagerService: e.cri.Image, die: dieImages}
	ires, _ := g1.images.garbageCollect(imgCtx)
	if !slices.Equal(ires.Removed, []string{imgA}) {
		t.Fatalf("the dying image pass removed %v, want only the least recently used %s", ires.Removed, imgA)
	}
	stop1()
	left := len(e.containersOf(string(live.UID))) + len(e.containersOf(string(gone.UID)))
	if left != 6-1+1 { // 4+1 live, 2 gone, one removed
		t.Fatalf("%d containers left after the death, want 6", left)
	}

	// A new gc, as after a restart: state from the bus, objects from CRI.
	g2, _ := e.newGC()
	waitFor(t, "gc to see the pods", func() bool { return g2.state.pod(string(live.UID)) != nil && g2.state.allSourcesReady() })
	if _, err := g2.containers.garbageCollect(testCtx(t), false); err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, c := range e.containersOf(string(live.UID)) {
		got[c.Id] = true
	}
	if len(got) != 2 || !got[instances[3]] || !got[side] {
		t.Errorf("live pod containers after the restart %v, want the last dead instance %s and the running %s", got, instances[3], side)
	}
	if n := len(e.containersOf(string(gone.UID))) + len(e.sandboxesOf(string(gone.UID))); n != 0 {
		t.Errorf("%d containers and sandboxes of the removed pod left after the restart", n)
	}
	if n := len(e.sandboxesOf(string(live.UID))); n != 1 {
		t.Errorf("live pod has %d sandboxes, want 1", n)
	}
	if !exists(pl.logDir + "/app/3.log") {
		t.Errorf("the last dead instance's log is gone")
	}
	if exists(pg.logDir) {
		t.Errorf("log dir of the removed pod %s survived", pg.logDir)
	}

	ires, _ = g2.images.garbageCollect(testCtx(t))
	if !slices.Equal(ires.Removed, []string{imgB, imgC}) {
		t.Errorf("after the restart image GC removed %v, want %v: the LRU order from the bucket", ires.Removed, []string{imgB, imgC})
	}
	imgs := e.imageIDs()
	for _, tar := range e.ctr.Images {
		if !imgs[tar.ID.String()] {
			t.Errorf("%s was removed", tar.Ref)
		}
	}
}
