package bus_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/bus/bustest"
	"github.com/nodelet/nodelet/internal/testenv/eventually"
	"github.com/nodelet/nodelet/schemas"
)

// podCopy is what a daemon's mirror callback keeps: the bucket by key
// (bus.Apply), and every update in order for the test to wait on.
type podCopy struct {
	mu      sync.Mutex
	values  map[string]*schemas.PodDesired
	history []string
	updates chan bus.Update[schemas.PodDesired]
}

func newPodCopy() *podCopy {
	return &podCopy{values: map[string]*schemas.PodDesired{}, updates: make(chan bus.Update[schemas.PodDesired], 1000)}
}

func (c *podCopy) apply(u bus.Update[schemas.PodDesired]) {
	c.mu.Lock()
	bus.Apply(c.values, u)
	c.history = append(c.history, u.Kind.String()+":"+u.Key)
	c.mu.Unlock()
	c.updates <- u
}

// next waits for the next update and checks it is kind (and key).
func (c *podCopy) next(t *testing.T, kind bus.UpdateKind, key string) bus.Update[schemas.PodDesired] {
	t.Helper()
	select {
	case u := <-c.updates:
		if u.Kind != kind || u.Key != key {
			t.Fatalf("update %s:%s, want %s:%s (history %v)", u.Kind, u.Key, kind, key, c.seen())
		}
		return u
	case <-time.After(20 * time.Second):
		t.Fatalf("no update; want %s:%s (history %v)", kind, key, c.seen())
	}
	return bus.Update[schemas.PodDesired]{}
}

// load waits for an initial load of exactly keys (in any order), then Synced.
func (c *podCopy) load(t *testing.T, keys ...string) {
	t.Helper()
	var got []string
	for range keys {
		select {
		case u := <-c.updates:
			if u.Kind != bus.Put {
				t.Fatalf("update %s:%s during the load of %v (history %v)", u.Kind, u.Key, keys, c.seen())
			}
			got = append(got, u.Key)
		case <-time.After(20 * time.Second):
			t.Fatalf("load of %v: got %v (history %v)", keys, got, c.seen())
		}
	}
	slices.Sort(got)
	if want := slices.Sorted(slices.Values(keys)); !slices.Equal(got, want) {
		t.Fatalf("loaded %v, want %v", got, want)
	}
	c.next(t, bus.Synced, "")
	if have := c.keys(); !slices.Equal(have, slices.Sorted(slices.Values(keys))) {
		t.Fatalf("copy holds %v after the load, want %v", have, keys)
	}
}

func (c *podCopy) keys() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Sorted(func(yield func(string) bool) {
		for k := range c.values {
			if !yield(k) {
				return
			}
		}
	})
}

func (c *podCopy) seen() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.history)
}

// runMirror runs m until the test ends; the returned func stops it and
// returns what Run returned.
func runMirror(t *testing.T, m bus.Runner) func() error {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	stop := func() error {
		cancel()
		select {
		case err := <-done:
			done <- err
			return err
		case <-time.After(20 * time.Second):
			t.Fatal("mirror did not stop")
			return nil
		}
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

func put(t *testing.T, c *bus.Conn, key string) {
	t.Helper()
	if _, err := c.Put(ctxT(t), bus.BucketDesired, key, desired(key, key)); err != nil {
		t.Fatal(err)
	}
}

func TestMirrorLoadsThenFollowsPutsAndDeletes(t *testing.T) {
	b := bustest.Start(t)
	src := b.Connect(bus.Sources)
	put(t, src, "a")
	put(t, src, "b")
	// A value that does not decode is skipped, not the end of the mirror.
	if _, err := src.PutRaw(ctxT(t), bus.BucketDesired, "junk", []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	cp := newPodCopy()
	m := bus.NewMirror(b.Connect(bus.Admission), bus.BucketDesired, ">", cp.apply)
	if m.Synced() {
		t.Fatal("synced before it ran")
	}
	stop := runMirror(t, m)
	cp.load(t, "a", "b")
	if !m.Synced() {
		t.Fatal("not synced after the initial load")
	}
	put(t, src, "c")
	if u := cp.next(t, bus.Put, "c"); u.Value.Pod.Name != "c" || u.Envelope.Producer != bus.Sources || u.Revision == 0 {
		t.Fatalf("put c delivered as %+v", u)
	}
	if err := src.Delete(ctxT(t), bus.BucketDesired, "a"); err != nil {
		t.Fatal(err)
	}
	cp.next(t, bus.Deleted, "a")
	if got := cp.keys(); !slices.Equal(got, []string{"b", "c"}) {
		t.Fatalf("copy holds %v, want [b c]", got)
	}
	if err := stop(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run returned %v, want context.Canceled", err)
	}
}

func TestMirrorResetsWhenTheStreamIsRecreated(t *testing.T) {
	b := bustest.Start(t)
	src := b.Connect(bus.Sources)
	put(t, src, "a")
	cp := newPodCopy()
	m := bus.NewMirror(b.Connect(bus.Admission), bus.BucketDesired, ">", cp.apply)
	runMirror(t, m)
	first := cp.next(t, bus.Put, "a").Created
	cp.next(t, bus.Synced, "")

	b.Restart(true) // the store is wiped: a new stream
	reset := cp.next(t, bus.Reset, "")
	if !reset.Created.After(first) {
		t.Fatalf("Reset from stream made %s, the old one was made %s", reset.Created, first)
	}
	if got := cp.keys(); len(got) != 0 {
		t.Fatalf("copy holds %v after Reset", got)
	}
	cp.next(t, bus.Synced, "") // the new store is empty
	put(t, src, "d")
	if u := cp.next(t, bus.Put, "d"); !u.Created.Equal(reset.Created) {
		t.Fatalf("d from stream %s, current is %s", u.Created, reset.Created)
	}
	if created, err := bus.StreamCreated(ctxT(t), src, bus.BucketDesired); err != nil || !created.Equal(reset.Created) {
		t.Fatalf("StreamCreated %s (%v), Reset said %s", created, err, reset.Created)
	}
}

// The bus stops under a running mirror: the outage is reported once it
// lasts past Grace (on the mirror's clock), and cleared when the bus is
// back and the watch resumes where it stopped.
func TestMirrorReportsAnOutageAndResumesAfterTheBusRestarts(t *testing.T) {
	b := bustest.Start(t)
	src := b.Connect(bus.Sources)
	put(t, src, "a")
	conn := b.Connect(bus.Admission)
	clk := testingclock.NewFakeClock(time.Now())
	cp := newPodCopy()
	m := bus.NewMirror(conn, bus.BucketDesired, ">", cp.apply)
	m.Clock, m.Grace = clk, 3*time.Second
	runMirror(t, m)
	cp.load(t, "a")

	b.Server.Shutdown()
	// The mirror heard the disconnect: its grace timer is on the clock.
	eventually.True(t, 20*time.Second, "the grace timer", clk.HasWaiters)
	if out := conn.Outages(); len(out) != 0 {
		t.Fatalf("outage reported before the grace passed: %v", out)
	}
	clk.Step(3 * time.Second)
	<-conn.OutagesChanged()
	out := conn.Outages()
	if len(out) != 1 || !strings.Contains(out[0], bus.BucketDesired) || !strings.Contains(out[0], "disconnected from the bus") {
		t.Fatalf("outages %q; want one naming %s and the disconnect", out, bus.BucketDesired)
	}

	b.Restart(false)
	// Right after the restart JetStream may not answer yet: the mirror
	// then backs off on its clock, which the test moves on.
	eventually.State(t, 20*time.Second, "the outage cleared after the bus came back", func() (bool, string) {
		if clk.HasWaiters() {
			clk.Step(5 * time.Second)
		}
		out := conn.Outages()
		return len(out) == 0, strings.Join(out, "; ")
	})
	put(t, src, "b")
	cp.next(t, bus.Put, "b") // resumed: no Reset, a not delivered again
}

// A watch that cannot be established (here: its stream is gone) is retried
// with doubling back-off up to its maximum; the outage is reported once
// Grace has passed, and cleared when the watch is established again.
func TestMirrorBacksOffAndReportsWhileTheWatchCannotBeEstablished(t *testing.T) {
	b := bustest.Start(t)
	if err := bus.DeleteBucket(ctxT(t), b.Server, bus.BucketDesired); err != nil {
		t.Fatal(err)
	}
	conn := b.Connect(bus.Admission)
	clk := testingclock.NewFakeClock(time.Now())
	type attempt struct {
		err     error
		backoff time.Duration
		outages []string
	}
	attempts := make(chan attempt, 100)
	cp := newPodCopy()
	m := bus.NewMirror(conn, bus.BucketDesired, ">", cp.apply)
	m.Clock, m.Grace = clk, time.Second
	bus.OnMirrorAttempt(m, func(err error, backoff time.Duration) {
		attempts <- attempt{err, backoff, conn.Outages()}
	})
	runMirror(t, m)

	start := clk.Now()
	want := []time.Duration{100, 200, 400, 800, 1600, 3200, 5000, 5000}
	for i, w := range want {
		var a attempt
		select {
		case a = <-attempts:
		case <-time.After(20 * time.Second):
			t.Fatalf("attempt %d did not happen", i+1)
		}
		if a.err == nil || a.backoff != w*time.Millisecond {
			t.Fatalf("attempt %d: err %v, back-off %s; want an error and %s", i+1, a.err, a.backoff, w*time.Millisecond)
		}
		elapsed := clk.Since(start)
		if reported := len(a.outages) == 1 && strings.Contains(a.outages[0], bus.BucketDesired); reported != (elapsed >= time.Second) {
			t.Fatalf("attempt %d at %s: outages %q (grace 1s)", i+1, elapsed, a.outages)
		}
		if i == len(want)-1 {
			t.Logf("reported: %s", a.outages[0])
			break
		}
		eventually.True(t, 20*time.Second, "the back-off timer", clk.HasWaiters)
		clk.Step(a.backoff)
	}
	if err := bus.EnsureBuckets(ctxT(t), b.Server); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 20*time.Second, "the back-off timer", clk.HasWaiters)
	clk.Step(5 * time.Second)
	cp.next(t, bus.Synced, "")
	if out := conn.Outages(); len(out) != 0 {
		t.Fatalf("outage still reported with the watch established: %q", out)
	}
}

// The stream vanishes under a running mirror (its consumer with it): the
// bus ends the watch, the mirror retries until the stream is back, then
// resets and loads the new one.
func TestMirrorReestablishesAWatchTheBusEnded(t *testing.T) {
	b := bustest.Start(t)
	src := b.Connect(bus.Sources)
	put(t, src, "a")
	conn := b.Connect(bus.Admission)
	failed := make(chan error, 100)
	cp := newPodCopy()
	m := bus.NewMirror(conn, bus.BucketDesired, ">", cp.apply)
	bus.OnMirrorAttempt(m, func(err error, _ time.Duration) { failed <- err })
	runMirror(t, m)
	cp.load(t, "a")

	if err := bus.DeleteBucket(ctxT(t), b.Server, bus.BucketDesired); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-failed:
		t.Logf("re-establishing failed as it must: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("the mirror did not notice its stream was deleted")
	}
	if err := bus.EnsureBuckets(ctxT(t), b.Server); err != nil {
		t.Fatal(err)
	}
	cp.next(t, bus.Reset, "")
	cp.next(t, bus.Synced, "")
	put(t, src, "b")
	cp.next(t, bus.Put, "b")
}

// A watch lost for longer than a delete's history is kept could have
// missed deletes whose markers the bus has dropped since: it reloads
// (Reset, a fresh load, Synced) instead of resuming.
func TestMirrorReloadsAfterALongOutage(t *testing.T) {
	b := bustest.Start(t)
	src := b.Connect(bus.Sources)
	put(t, src, "a")
	conn := b.Connect(bus.Admission)
	clk := testingclock.NewFakeClock(time.Now())
	cp := newPodCopy()
	m := bus.NewMirror(conn, bus.BucketDesired, ">", cp.apply)
	m.Clock = clk
	runMirror(t, m)
	cp.load(t, "a")

	b.Server.Shutdown()
	eventually.True(t, 20*time.Second, "the grace timer", clk.HasWaiters)
	clk.Step(6 * time.Minute)
	b.Restart(false)
	eventually.State(t, 20*time.Second, "the outage cleared after the bus came back", func() (bool, string) {
		if clk.HasWaiters() {
			clk.Step(5 * time.Second)
		}
		out := conn.Outages()
		return len(out) == 0, strings.Join(out, "; ")
	})
	cp.next(t, bus.Reset, "")
	cp.load(t, "a")
}

// A watch that cannot be established while the connection is down names
// the disconnect as the outage's cause, whatever its own attempt failed
// on (a stream info or a KV lookup timing out); CI once saw nodelet-server's
// /healthz blame "context deadline exceeded" instead.
func TestMirrorNamesTheDisconnectAsTheCause(t *testing.T) {
	b := bustest.Start(t)
	conn := b.Connect(bus.Admission)
	b.Server.Shutdown()
	eventually.True(t, 20*time.Second, "the connection down", func() bool { return !conn.NC.IsConnected() })

	clk := testingclock.NewFakeClock(time.Now())
	cp := newPodCopy()
	m := bus.NewMirror(conn, bus.BucketDesired, ">", cp.apply)
	m.Clock, m.Grace = clk, 3*time.Second
	runMirror(t, m)
	// The first attempt failed (on its own timeout) and the mirror waits
	// to retry on its clock: step past the grace.
	eventually.State(t, 30*time.Second, "the outage reported", func() (bool, string) {
		if clk.HasWaiters() {
			clk.Step(3 * time.Second)
		}
		out := conn.Outages()
		return len(out) == 1, strings.Join(out, "; ")
	})
	out := conn.Outages()
	if !strings.Contains(out[0], bus.BucketDesired+" lost since ") || !strings.Contains(out[0], "re-establishing: disconnected from the bus: ") {
		t.Fatalf("outage %q; want it to name %s and the disconnect as the cause", out[0], bus.BucketDesired)
	}
}
