package bus_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/bus/bustest"
	"github.com/nodelet/nodelet/schemas"
)

// emitEverywhere has every producer emit one event and waits until each
// is in its stream and in status's copy of it.
func emitEverywhere(t *testing.T, b *bustest.Bus) {
	t.Helper()
	ctx := ctxT(t)
	for _, p := range bus.EventProducers {
		c := b.Connect(p)
		c.Emit(schemas.Event{Object: corev1.ObjectReference{Kind: "Pod", UID: types.UID("u-" + p)}, Type: "Normal", Reason: "Seeded"})
		if err := c.FlushEvents(ctx); err != nil {
			t.Fatal(err)
		}
	}
	tap, st := b.Connect(bus.Tap), b.Connect(bus.Status)
	for _, p := range bus.EventProducers {
		waitMsgs(t, tap, bus.EventsStream(p), 1)
		waitMsgs(t, st, bus.StatusEventsStream(p), 1)
	}
}

// waitMsgs waits until stream holds at least n messages.
func waitMsgs(t *testing.T, c *bus.Conn, stream string, n uint64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s, err := c.JS.Stream(ctxT(t), stream)
		if err == nil && s.CachedInfo().State.Msgs >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s does not hold %d messages: %v", stream, n, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// streamEvents reads every event stored in stream, in order.
func streamEvents(t *testing.T, c *bus.Conn, stream string) []schemas.Event {
	t.Helper()
	ctx := ctxT(t)
	s, err := c.JS.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	n := s.CachedInfo().State.Msgs
	var out []schemas.Event
	if n == 0 {
		return nil
	}
	oc, err := c.JS.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for uint64(len(out)) < n {
		msg, err := oc.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatalf("%s: read %d of %d: %v", stream, len(out), n, err)
		}
		_, ev, err := schemas.Decode[schemas.Event](msg.Data())
		if err != nil {
			t.Fatalf("%s: %v", stream, err)
		}
		out = append(out, *ev)
	}
	return out
}

// TestEventIDsAreTheProducers: issue 33, item 2. Prober publishes events
// carrying message IDs of runtime's form (runtime-<n>) before runtime
// publishes its own with those IDs. Each producer's events are de-duplicated
// only against its own: runtime's are all stored, and so are prober's.
func TestEventIDsAreTheProducers(t *testing.T) {
	b := bustest.Start(t)
	ctx := ctxT(t)
	pr, rt := b.Connect(bus.Prober), b.Connect(bus.Runtime)
	const n = 5
	publish := func(c *bus.Conn, reason string, i int) {
		body, err := schemas.Encode(c.Component, &schemas.Event{Component: c.Component, Reason: reason,
			Object: corev1.ObjectReference{Kind: "Pod", UID: "uid-1"}, Type: "Normal", Time: time.Now().UTC()})
		if err != nil {
			t.Fatal(err)
		}
		msg := nats.NewMsg(bus.EventSubject(c.Component, "uid-1"))
		msg.Data = body
		if _, err := c.JS.PublishMsg(ctx, msg, jetstream.WithMsgID(fmt.Sprintf("runtime-%d", i))); err != nil {
			t.Fatalf("%s: %v", c.Component, err)
		}
	}
	for i := range n {
		publish(pr, "Squatted", i)
	}
	for i := range n {
		publish(rt, "Started", i)
	}
	tap := b.Connect(bus.Tap)
	var got []string
	for _, p := range []string{bus.Runtime, bus.Prober} {
		for _, ev := range streamEvents(t, tap, bus.EventsStream(p)) {
			got = append(got, ev.Component+"/"+ev.Reason)
		}
	}
	want := strings.Repeat("runtime/Started ", n) + strings.Repeat("prober/Squatted ", n)
	if strings.Join(got, " ")+" " != want {
		t.Fatalf("stored events %v, want %s", got, want)
	}
	// A producer's own retry is still stored once.
	publish(rt, "Started", 0)
	if evs := streamEvents(t, tap, bus.EventsStream(bus.Runtime)); len(evs) != n {
		t.Fatalf("runtime's retry stored again: %d events", len(evs))
	}
}

// TestEventsFloodEvictsOnlyTheFlooder: issue 33, item 3. With a small
// events budget, prober publishes far more than the whole budget in large
// events; runtime's events, in its stream and in status's copy (where
// status had not consumed them yet), all stay, in order. An event larger
// than the bus takes is refused, and Emit shortens one to fit.
func TestEventsFloodEvictsOnlyTheFlooder(t *testing.T) {
	l := bus.Limits{EventsMaxBytes: 8 * (256 << 10)} // 256 KiB per producer
	b := bustest.StartWithLimits(t, t.TempDir(), l)
	ctx := ctxT(t)
	rt, pr, tap := b.Connect(bus.Runtime), b.Connect(bus.Prober), b.Connect(bus.Tap)
	const n = 20
	for i := range n {
		rt.Emit(schemas.Event{Object: corev1.ObjectReference{Kind: "Pod", UID: "uid-r"}, Type: "Normal", Reason: fmt.Sprintf("R%02d", i)})
	}
	if err := rt.FlushEvents(ctx); err != nil {
		t.Fatal(err)
	}
	waitMsgs(t, tap, bus.EventsStream(bus.Runtime), n)
	big := strings.Repeat("x", 30<<10)
	for i := range 200 { // ~6 MiB, 24 times prober's share
		body, _ := schemas.Encode(bus.Prober, &schemas.Event{Component: bus.Prober, Reason: "Flood", Message: big,
			Object: corev1.ObjectReference{Kind: "Pod", UID: "uid-p"}, Type: "Normal", Time: time.Now().UTC()})
		if _, err := pr.JS.Publish(ctx, bus.EventSubject(bus.Prober, fmt.Sprintf("uid-%d", i)), body); err != nil {
			t.Fatalf("flood %d: %v", i, err)
		}
	}
	huge, _ := schemas.Encode(bus.Prober, &schemas.Event{Component: bus.Prober, Reason: "Huge", Message: strings.Repeat("y", 1<<20)})
	if _, err := pr.JS.Publish(ctx, bus.EventSubject(bus.Prober, "uid-h"), huge); err == nil || !bus.IsRejected(err) {
		t.Errorf("a 1 MiB event was not refused for good: %v", err)
	}
	pr.Emit(schemas.Event{Object: corev1.ObjectReference{Kind: "Pod", UID: "uid-p"}, Type: "Warning", Reason: "Long", Message: strings.Repeat("z", 1<<20)})
	if err := pr.FlushEvents(ctx); err != nil {
		t.Fatal(err)
	}
	st := b.Connect(bus.Status)
	for _, stream := range []string{bus.EventsStream(bus.Runtime), bus.StatusEventsStream(bus.Runtime)} {
		c := tap
		if strings.Contains(stream, "STATUS") {
			c = st
			waitMsgs(t, st, stream, n)
		}
		evs := streamEvents(t, c, stream)
		var reasons []string
		for _, ev := range evs {
			reasons = append(reasons, ev.Reason)
		}
		if len(evs) != n || reasons[0] != "R00" || reasons[n-1] != fmt.Sprintf("R%02d", n-1) {
			t.Errorf("%s after prober's flood: %v", stream, reasons)
		}
	}
	evs := streamEvents(t, tap, bus.EventsStream(bus.Prober))
	last := evs[len(evs)-1]
	if last.Reason != "Long" || !strings.HasSuffix(last.Message, "[truncated]") || len(last.Message) > 64<<10 {
		t.Errorf("prober's long event: reason %s, %d bytes of message", last.Reason, len(last.Message))
	}
}
