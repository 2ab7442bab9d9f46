package bus_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/bus/bustest"
	"github.com/nodelet/nodelet/schemas"
)

// TestTapSeesWritesLive: tap's view of the bus is live, although every
// write lands in a store account: KV puts, events and heartbeats.
func TestTapSeesWritesLive(t *testing.T) {
	b := bustest.Start(t)
	ctx := ctxT(t)
	tap := b.Connect(bus.Tap)
	got := make(chan string, 16)
	if _, err := tap.NC.Subscribe(">", func(m *nats.Msg) { got <- m.Subject }); err != nil {
		t.Fatal(err)
	}
	if err := tap.NC.Flush(); err != nil {
		t.Fatal(err)
	}
	src := b.Connect(bus.Sources)
	if _, err := src.Put(ctx, bus.BucketDesired, "a", desired("a", "a")); err != nil {
		t.Fatal(err)
	}
	src.Emit(schemas.Event{Reason: "Seen"})
	if err := src.PublishHeartbeat(schemas.Heartbeat{Component: bus.Sources}); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{bus.KVSubject(bus.BucketDesired, "a"): true, bus.EventSubject(bus.Sources, ""): true, bus.HealthSubject(bus.Sources): true}
	deadline := time.After(10 * time.Second)
	for len(want) > 0 {
		select {
		case s := <-got:
			delete(want, s)
		case <-deadline:
			t.Fatalf("tap did not see %v", want)
		}
	}
}
