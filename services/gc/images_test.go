package gc

import (
	"context"
	"regexp"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critest "k8s.io/cri-api/pkg/apis/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/bus/bustest"
	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/internal/daemon"
	"github.com/nodelet/nodelet/internal/images"
	"github.com/nodelet/nodelet/schemas"
)

// seedImageRecord writes a record as an earlier nodelet-gc would have.
func seedImageRecord(t *testing.T, c *bus.Conn, id string, firstSeen, lastUsed time.Time) {
	t.Helper()
	if _, err := c.Put(testCtx(t), bus.BucketImages, ImageRecordKey(id),
		&schemas.ImageRecord{ID: id, FirstSeen: firstSeen.UTC(), LastUsed: lastUsed.UTC()}); err != nil {
		t.Fatal(err)
	}
}

// With thresholds high 1 % / low 0 %, every unused imported image goes,
// least recently used first by the records an earlier gc left in the
// bucket; the image a container uses and the pause image stay.
// freeDiskSpaceFailed is the kubelet's (v1.37) FreeDiskSpaceFailed message.
var freeDiskSpaceFailed = regexp.MustCompile(`^Insufficient free disk space on the node's image filesystem \(\d+% of \d+\.\d [KMGT]iB used\)\. ` +
	`Failed to free sufficient space by deleting unused images \(freed \d+ bytes\)\. ` +
	`Investigate disk usage, as it could be used by active images, logs, volumes, or other data\.$`)

func TestFormatSize(t *testing.T) {
	for _, tt := range []struct {
		in   int64
		want string
	}{{0, "0 B"}, {1023, "1023 B"}, {1024, "1.0 KiB"}, {1536, "1.5 KiB"}, {300 << 20, "300.0 MiB"}, {252 << 30, "252.0 GiB"}, {3 << 40, "3.0 TiB"}} {
		if got := formatSize(tt.in); got != tt.want {
			t.Errorf("formatSize(%d) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestImageGCRemovesLeastRecentlyUsedFirst(t *testing.T) {
	e := newTestEnv(t)
	e.cfg.GC.ImageGCHighThresholdPercent, e.cfg.GC.ImageGCLowThresholdPercent = 1, 0
	e.cfg.GC.ImageMinimumGCAge = 0
	a := e.importImage("nodelet.local/gc-a:1")
	b := e.importImage("nodelet.local/gc-b:1")
	c := e.importImage("nodelet.local/gc-c:1")
	pod := newPod("user", corev1.Container{Name: "app"})
	p := e.runSandbox(pod, 0)
	e.startContainer(p, "app", 0, "sleep", "3600")

	now := time.Now()
	prev := e.bus.Connect(bus.GC) // the gc that ran before a restart
	seedImageRecord(t, prev, a, now.Add(-24*time.Hour), now.Add(-1*time.Hour))
	seedImageRecord(t, prev, b, now.Add(-24*time.Hour), now.Add(-3*time.Hour))
	seedImageRecord(t, prev, c, now.Add(-24*time.Hour), now.Add(-2*time.Hour))
	events := subscribeEvents(t, e.bus)

	g, _ := e.newGC()
	res, err := g.images.garbageCollect(testCtx(t))
	// The whole filesystem is "over 0 %": the kubelet reports what it could
	// not free.
	if err == nil || !freeDiskSpaceFailed.MatchString(err.Error()) {
		t.Errorf("err = %v, want the kubelet's FreeDiskSpaceFailed message", err)
	}
	if want := []string{b, c, a}; !slices.Equal(res.Removed, want) {
		t.Errorf("removed %v, want least recently used first %v", res.Removed, want)
	}
	left := e.imageIDs()
	for _, id := range []string{a, b, c} {
		if left[id] {
			t.Errorf("unused image %s is still there", id)
		}
	}
	for _, tar := range e.ctr.Images { // pause, busybox
		if !left[tar.ID.String()] {
			t.Errorf("%s (%s) was removed", tar.Ref, tar.ID)
		}
	}
	ev := events.wait(t, "FreeDiskSpaceFailed")
	if ev.Type != corev1.EventTypeWarning || ev.Object.Kind != "Node" || !freeDiskSpaceFailed.MatchString(ev.Message) {
		t.Errorf("FreeDiskSpaceFailed event = %+v", ev)
	}

	// The bucket forgets removed images and remembers that busybox is in
	// use now.
	for _, id := range []string{a, b, c} {
		if rec, _, err := bus.Get[schemas.ImageRecord](testCtx(t), prev, bus.BucketImages, ImageRecordKey(id)); err != nil || rec != nil {
			t.Errorf("record of removed %s = %+v, %v; want none", id, rec, err)
		}
	}
	busybox := e.ctr.Images[1]
	if busybox.Ref != images.BusyboxImage {
		t.Fatalf("images = %+v, want pause then busybox", e.ctr.Images)
	}
	rec, _, err := bus.Get[schemas.ImageRecord](testCtx(t), prev, bus.BucketImages, ImageRecordKey(busybox.ID.String()))
	if err != nil || rec == nil || rec.LastUsed.Before(now) || !slices.Contains(rec.RepoTags, images.BusyboxImage) {
		t.Errorf("busybox record = %+v, %v; want lastUsed now", rec, err)
	}
}

// Above the high threshold, images go only until the low one is reached;
// images younger than imageMinimumGCAge are skipped even when least
// recently used. The image filesystem figures are faked, CRI is real.
func TestImageGCStopsAtLowThreshold(t *testing.T) {
	e := newTestEnv(t)
	e.cfg.GC.ImageMinimumGCAge = time.Hour
	young := e.importImage("nodelet.local/gc-young:1")
	a := e.importImage("nodelet.local/gc-a:1")
	b := e.importImage("nodelet.local/gc-b:1")
	var sizeA int64
	imgs, err := e.cri.Image.ListImages(testCtx(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range imgs {
		if i.Id == a {
			sizeA = int64(i.Size)
		}
	}
	if sizeA == 0 {
		t.Fatalf("no size for %s in %v", a, imgs)
	}
	now := time.Now()
	prev := e.bus.Connect(bus.GC)
	seedImageRecord(t, prev, young, now.Add(-time.Minute), time.Time{})
	seedImageRecord(t, prev, a, now.Add(-24*time.Hour), now.Add(-2*time.Hour))
	seedImageRecord(t, prev, b, now.Add(-24*time.Hour), now.Add(-1*time.Hour))
	// 90 % used of 10×sizeA: to reach 80 %, sizeA must be freed.
	fake := &fakeMeasurer{node: func(ns *NodeStats) {
		ns.ImageFs = &FsStats{Capacity: 10 * sizeA, Available: sizeA}
	}}
	g, _ := e.newGC(func(o *Options) { o.Measurer = fake })
	res, err := g.images.garbageCollect(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Removed, []string{a}) {
		t.Errorf("removed %v, want only %s", res.Removed, a)
	}
	left := e.imageIDs()
	if !left[young] || !left[b] || left[a] {
		t.Errorf("images left %v: want %s (too young) and %s, not %s", left, young, b, a)
	}

	// Below the high threshold nothing goes.
	fake.node = func(ns *NodeStats) { ns.ImageFs = &FsStats{Capacity: 100, Available: 20} }
	if res, err := g.images.garbageCollect(testCtx(t)); err != nil || len(res.Removed) != 0 {
		t.Errorf("below the threshold: removed %v, %v", res.Removed, err)
	}
}

// imageMaximumGCAge removes images unused for longer, whatever the disk
// usage, once gc has run that long; pinned images and the sandbox image are
// never candidates, nor an image a container mounts as a volume. Fake CRI
// and clock.
func TestImageGCMaximumAgeAndPinned(t *testing.T) {
	b := bustest.Start(t)
	clk := clocktesting.NewFakeClock(time.Now())
	rt := critest.NewFakeRuntimeService()
	is := critest.NewFakeImageService()
	cfg := config.Defaults()
	cfg.Runtime.SandboxImage = "pause"
	cfg.GC.ImageMaximumGCAge = time.Hour
	cfg.GC.ImageMinimumGCAge = 0
	is.SetFakeImagePinned("pinned", true)
	is.SetFakeImages([]string{"old", "recent", "pinned", "pause", "used", "mounted"})
	deadOf := func(id, image string) *critest.FakeContainer {
		return &critest.FakeContainer{ContainerStatus: runtimeapi.ContainerStatus{
			Id: id, Metadata: &runtimeapi.ContainerMetadata{Name: "c"}, Image: &runtimeapi.ImageSpec{Image: image}, ImageRef: image,
			State: runtimeapi.ContainerState_CONTAINER_EXITED,
		}}
	}
	// An image volume: "mounted" is used only as c1's mount (the
	// kubelet's handleImageVolumes keeps it).
	deadWithImageVolume := func() *critest.FakeContainer {
		c := deadOf("c1", "used")
		c.Mounts = []*runtimeapi.Mount{{ContainerPath: "/tools", Image: &runtimeapi.ImageSpec{Image: "mounted"}, Readonly: true}}
		return c
	}
	rt.SetFakeContainers([]*critest.FakeContainer{deadWithImageVolume()})
	conn := b.Connect(bus.GC)
	fs := &fakeMeasurer{node: func(ns *NodeStats) { ns.ImageFs = &FsStats{Capacity: 100, Available: 90} }}
	g, err := New(Options{Deps: daemon.Deps{Config: cfg, Log: bustest.Logger(), Bus: conn}, Runtime: rt, Images: is, Clock: clk, Measurer: fs})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	seedImageRecord(t, conn, "old", clk.Now().Add(-48*time.Hour), clk.Now().Add(-30*time.Minute))
	seedImageRecord(t, conn, "recent", clk.Now().Add(-48*time.Hour), clk.Now().Add(-30*time.Minute))
	seedImageRecord(t, conn, "mounted", clk.Now().Add(-48*time.Hour), clk.Now().Add(-30*time.Minute))

	// Within an hour of start nothing is old enough to judge.
	if res, err := g.images.garbageCollect(ctx); err != nil || len(res.Removed) != 0 {
		t.Fatalf("right after start: removed %v, %v", res.Removed, err)
	}
	// "recent" is used again (a container of it appears), then time passes.
	clk.Step(50 * time.Minute)
	rt.SetFakeContainers([]*critest.FakeContainer{deadWithImageVolume(), deadOf("c2", "recent")})
	if _, err := g.images.garbageCollect(ctx); err != nil {
		t.Fatal(err)
	}
	rt.SetFakeContainers([]*critest.FakeContainer{deadWithImageVolume()})
	clk.Step(20 * time.Minute)
	res, err := g.images.garbageCollect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Removed, []string{"old"}) {
		t.Errorf("removed %v, want only old (unused for 80m > 1h)", res.Removed)
	}
	var left []string
	imgs, _ := is.ListImages(context.Background(), nil)
	for _, i := range imgs {
		left = append(left, i.Id)
	}
	slices.Sort(left)
	if want := []string{"mounted", "pause", "pinned", "recent", "used"}; !slices.Equal(left, want) {
		t.Errorf("images left %v, want %v", left, want)
	}
}
