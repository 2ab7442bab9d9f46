package bus_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/bus/bustest"
)

// TestLimitsPerCredential: issue 33, item 5. One credential could make
// hundreds of connections and of durable consumers that never expire. Now
// each credential (its account) has a connection, subscription and
// consumer limit, reaching which leaves every other credential's
// untouched; durables are only the declared ones, and live as long as the
// events; ephemerals expire within the bus's bound; and no consumer may
// hold more unacknowledged or waiting messages than the bus allows.
func TestLimitsPerCredential(t *testing.T) {
	for _, d := range []int{bus.DefaultLimits.ConnectionsPerCredential, bus.DefaultLimits.SubscriptionsPerCredential,
		bus.DefaultLimits.ConsumersPerCredential} {
		if d <= 0 || d >= 300 && d != bus.DefaultLimits.SubscriptionsPerCredential {
			t.Fatalf("default per-credential limits %+v", bus.DefaultLimits)
		}
	}
	l := bus.Limits{ConnectionsPerCredential: 4, SubscriptionsPerCredential: 40, ConsumersPerCredential: 6}
	b := bustest.StartWithLimits(t, t.TempDir(), l)
	ctx := ctxT(t)

	t.Run("connections", func(t *testing.T) {
		var conns []*bus.Wire
		defer func() {
			for _, w := range conns {
				w.Close()
			}
		}()
		for i := range 300 {
			w, err := bus.DialWire(b.Server.Addr(), b.StateDir, bus.Prober)
			if err != nil {
				if i != l.ConnectionsPerCredential || !strings.Contains(strings.ToLower(err.Error()), "maximum") {
					t.Fatalf("connection %d refused: %v", i+1, err)
				}
				break
			}
			conns = append(conns, w)
		}
		if len(conns) != l.ConnectionsPerCredential {
			t.Fatalf("prober holds %d connections, the limit is %d", len(conns), l.ConnectionsPerCredential)
		}
		// Another credential still connects.
		w, err := bus.DialWire(b.Server.Addr(), b.StateDir, bus.Runtime)
		if err != nil {
			t.Fatalf("runtime cannot connect while prober is at its limit: %v", err)
		}
		w.Close()
	})

	t.Run("subscriptions", func(t *testing.T) {
		w, err := bus.DialWire(b.Server.Addr(), b.StateDir, bus.Prober)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		n := 0
		for ; n < 300; n++ {
			if err := w.Sub(fmt.Sprintf("%s.s%d", bus.InboxPrefix(bus.Prober), n), n+1); err != nil {
				if !strings.Contains(strings.ToLower(err.Error()), "maximum subscriptions") {
					t.Fatalf("subscription %d: %v", n+1, err)
				}
				break
			}
		}
		if n != l.SubscriptionsPerCredential {
			t.Fatalf("prober made %d subscriptions, the limit is %d", n, l.SubscriptionsPerCredential)
		}
	})

	t.Run("consumers", func(t *testing.T) {
		pr, ad := b.Connect(bus.Prober), b.Connect(bus.Admission)
		stream := "KV_" + bus.BucketDesired
		var made []string
		var refused error
		for range 300 {
			c, err := pr.JS.CreateConsumer(ctx, stream, jetstream.ConsumerConfig{AckPolicy: jetstream.AckNonePolicy, InactiveThreshold: time.Minute})
			if err != nil {
				refused = err
				break
			}
			made = append(made, c.CachedInfo().Name)
		}
		if len(made) != l.ConsumersPerCredential || refused == nil || !strings.Contains(refused.Error(), "consumers") {
			t.Fatalf("prober made %d consumers (limit %d), then: %v", len(made), l.ConsumersPerCredential, refused)
		}
		if _, err := ad.JS.CreateConsumer(ctx, stream, jetstream.ConsumerConfig{AckPolicy: jetstream.AckNonePolicy}); err != nil {
			t.Fatalf("admission cannot make a consumer while prober is at its limit: %v", err)
		}
		// Updating one of its own is no new consumer.
		if _, err := pr.JS.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{Name: made[0],
			AckPolicy: jetstream.AckNonePolicy, InactiveThreshold: time.Minute, Description: "updated"}); err != nil {
			t.Fatalf("prober cannot update its own consumer at its limit: %v", err)
		}
		// Nor may anyone else touch it.
		if _, err := ad.JS.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{Name: made[0],
			AckPolicy: jetstream.AckNonePolicy, InactiveThreshold: time.Minute}); err == nil {
			t.Fatal("admission updated prober's consumer")
		}
		// One gone, one more may be made.
		if err := pr.JS.DeleteConsumer(ctx, stream, made[0]); err != nil {
			t.Fatal(err)
		}
		if _, err := pr.JS.CreateConsumer(ctx, stream, jetstream.ConsumerConfig{AckPolicy: jetstream.AckNonePolicy}); err != nil {
			t.Fatalf("prober below its limit again: %v", err)
		}
	})

	t.Run("durables, thresholds and pending", func(t *testing.T) {
		pr, st := b.Connect(bus.Prober), b.Connect(bus.Status)
		stream := "KV_" + bus.BucketProbes
		for _, cfg := range []jetstream.ConsumerConfig{
			{Durable: "nodelet-prober-mine", AckPolicy: jetstream.AckExplicitPolicy},
			{Name: "forever", AckPolicy: jetstream.AckNonePolicy, InactiveThreshold: 1000 * time.Hour},
			{Name: "greedy", AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 1 << 20},
			{Name: "unbounded", AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: -1},
			{Name: "waiting", AckPolicy: jetstream.AckExplicitPolicy, MaxWaiting: 1 << 20},
		} {
			if _, err := st.JS.CreateOrUpdateConsumer(ctx, "KV_"+bus.BucketProbes, cfg); err == nil {
				t.Errorf("status made %s%s on %s", cfg.Durable, cfg.Name, stream)
			}
			if _, err := pr.JS.CreateOrUpdateConsumer(ctx, stream, cfg); err == nil {
				t.Errorf("prober made %s%s on %s", cfg.Durable, cfg.Name, stream)
			}
		}
		// Status's declared durable expires with the events it reads.
		c, err := st.JS.CreateOrUpdateConsumer(ctx, bus.StatusEventsStream(bus.Runtime), jetstream.ConsumerConfig{
			Durable: "nodelet-status-events", AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 1})
		if err != nil {
			t.Fatal(err)
		}
		if got := c.CachedInfo().Config.InactiveThreshold; got != bus.DefaultLimits.EventsMaxAge {
			t.Errorf("status's durable expires after %s inactive, want %s", got, bus.DefaultLimits.EventsMaxAge)
		}
	})
}
