package bus_test

// The attacks of issue 17 on status's durable consumer, and the helpers of
// the attack suite (attacksuite_test.go, issue 33), which tries every
// reply- and deliver-subject attack of issue 17 against every declared
// target.

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/bus/bustest"
	"github.com/nodelet/nodelet/schemas"
)

// nonOwners lists every credential but owner's.
func nonOwners(owner string) []string {
	var out []string
	for _, c := range bus.Components {
		if c != owner && c != bus.BusAdmin {
			out = append(out, c)
		}
	}
	return out
}

// seed puts history into every bucket: key "p" twice, and key "gone" put
// then deleted, so an old revision exists to roll back to or resurrect.
func seed(t *testing.T, b *bustest.Bus) {
	t.Helper()
	ctx := ctxT(t)
	for _, bk := range bus.Buckets {
		c := b.Connect(bk.Owner)
		for _, v := range []string{"one", "two"} {
			if _, err := c.Put(ctx, bk.Name, "p", &schemas.Heartbeat{Component: v}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := c.Put(ctx, bk.Name, "gone", &schemas.Heartbeat{Component: "old"}); err != nil {
			t.Fatal(err)
		}
		if err := c.Delete(ctx, bk.Name, "gone"); err != nil {
			t.Fatal(err)
		}
	}
}

// barrier makes a request on nc and waits for the answer (or its failure),
// so every earlier publish on nc has been processed by the server.
func barrier(t *testing.T, nc *nats.Conn) {
	t.Helper()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	_, _ = nc.Request(bus.HealthSubject("barrier"), nil, 200*time.Millisecond)
}

// TestDurableConsumerOnlyItsOwner: status's durable consumer of the events
// cannot be fetched from, acked, updated or deleted by any other
// credential, and nobody else can make a durable in its name.
func TestDurableConsumerOnlyItsOwner(t *testing.T) {
	b := bustest.Start(t)
	ctx := ctxT(t)
	st := b.Connect(bus.Status)
	cfg := jetstream.ConsumerConfig{Durable: "nodelet-status-events", AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 1}
	statusCopy := bus.StatusEventsStream(bus.Runtime)
	if _, err := st.JS.CreateOrUpdateConsumer(ctx, statusCopy, cfg); err != nil {
		t.Fatal(err)
	}
	rt := b.Connect(bus.Runtime)
	rt.Emit(schemas.Event{Reason: "Started", Message: "one"})
	if err := rt.FlushEvents(ctx); err != nil {
		t.Fatal(err)
	}
	const durable = "nodelet-status-events"
	t.Run("others", func(t *testing.T) {
		for _, cred := range nonOwners(bus.Status) {
			c := b.Connect(cred)
			r := newRefusals(c)
			t.Run(cred, func(t *testing.T) {
				t.Parallel()
				for _, stream := range []string{statusCopy, bus.EventsStream(bus.Runtime)} {
					api := "$JS.API.CONSUMER."
					for _, subj := range []string{
						api + "MSG.NEXT." + stream + "." + durable,
						api + "INFO." + stream + "." + durable,
						api + "DELETE." + stream + "." + durable,
						api + "PAUSE." + stream + "." + durable,
						"$JS.ACK." + stream + "." + durable + ".1.1.1.0.0",
					} {
						if m, err := r.request(subj, []byte(`{"batch":1}`), 500*time.Millisecond); err == nil && !isAPIError(m) {
							t.Errorf("%s: %s answered: %q", cred, subj, m.Data)
						}
					}
					for _, update := range []jetstream.ConsumerConfig{
						{Durable: durable, AckPolicy: jetstream.AckNonePolicy},
						{Name: durable, AckPolicy: jetstream.AckNonePolicy},
						{Durable: "nodelet-status-x", AckPolicy: jetstream.AckNonePolicy},
					} {
						err := r.call(time.Second, func(ctx context.Context) error {
							_, err := c.JS.CreateOrUpdateConsumer(ctx, stream, update)
							return err
						})
						if err == nil {
							t.Errorf("%s created or updated consumer %s%s on %s", cred, update.Durable, update.Name, stream)
						}
					}
				}
				barrier(t, c.NC)
			})
		}
	})
	ctx = ctxT(t)
	cons, err := st.JS.Consumer(ctx, statusCopy, durable)
	if err != nil {
		t.Fatalf("status's durable is gone: %v", err)
	}
	info := cons.CachedInfo()
	if info.Config.AckPolicy != jetstream.AckExplicitPolicy || info.Delivered.Consumer != 0 {
		t.Fatalf("status's durable was touched: ack policy %v, delivered %d", info.Config.AckPolicy, info.Delivered.Consumer)
	}
	msg, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
	if err != nil {
		t.Fatalf("status cannot fetch its event: %v", err)
	}
	if err := msg.Ack(); err != nil {
		t.Fatal(err)
	}
}

func isAPIError(m *nats.Msg) bool {
	if m.Header.Get("Status") != "" {
		return true
	}
	var r struct {
		Error *struct{} `json:"error"`
	}
	return json.Unmarshal(m.Data, &r) == nil && r.Error != nil
}
