package bus_test

// The attacks of issue 17, each tried with every credential that does not
// own the target, against a real bus. A bucket's state is its stream's
// last sequence and message count: an attack that stored anything, by any
// path, moves them.

import (
	"context"
	"encoding/json"
	"strings"
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

type streamState struct{ last, msgs uint64 }

// states reads every stream's state through tap, which may read them all.
func states(t *testing.T, tap *bus.Conn) map[string]streamState {
	t.Helper()
	ctx := ctxT(t)
	out := map[string]streamState{}
	for _, b := range bus.Buckets {
		s, err := tap.JS.Stream(ctx, "KV_"+b.Name)
		if err != nil {
			t.Fatalf("stream info %s: %v", b.Name, err)
		}
		out[b.Name] = streamState{s.CachedInfo().State.LastSeq, s.CachedInfo().State.Msgs}
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

// TestReplyAndDeliverSubjectAttacks: with every credential, read a bucket's
// old messages and have the server deliver them into another bucket's
// subjects — one hop (MSG.NEXT, DIRECT.GET, STREAM.INFO with a reply into
// $KV.<bucket>), two hops (first into another bucket, then from there into
// the target), and push consumers whose deliver subject is a bucket subject
// or a JetStream API call. No bucket the credential does not own changes.
func TestReplyAndDeliverSubjectAttacks(t *testing.T) {
	b := bustest.Start(t)
	seed(t, b)
	tap := b.Connect(bus.Tap)
	for _, cred := range nonOwners("") {
		t.Run(cred, func(t *testing.T) {
			ctx := ctxT(t)
			before := states(t, tap)
			c := b.Connect(cred)
			nc := c.NC
			for _, src := range bus.ReadableStreams(cred) {
				if !strings.HasPrefix(src, "KV_") {
					continue
				}
				for _, dst := range bus.Buckets {
					if dst.Owner == cred {
						continue
					}
					target := bus.KVSubject(dst.Name, "p")
					// One hop: a pull with its reply in the target.
					cons, err := c.JS.CreateConsumer(ctx, src, jetstream.ConsumerConfig{AckPolicy: jetstream.AckNonePolicy})
					if err != nil {
						t.Fatalf("%s may read %s but cannot make a consumer: %v", cred, src, err)
					}
					name := cons.CachedInfo().Name
					next := "$JS.API.CONSUMER.MSG.NEXT." + src + "." + name
					for range 3 {
						_ = nc.PublishRequest(next, target, []byte(`{"batch":1}`))
					}
					_ = nc.PublishRequest("$JS.API.STREAM.INFO."+src, target, nil)
					_ = nc.PublishRequest("$JS.API.DIRECT.GET."+src, target, []byte(`{"seq":1}`))
					_ = nc.PublishRequest("$JS.API.STREAM.MSG.GET."+src, target, []byte(`{"seq":1}`))
					// Two hops: into another bucket's subjects, then, from
					// wherever the first hop landed, into the target.
					for _, mid := range bus.Buckets {
						_ = nc.PublishRequest(next, bus.KVSubject(mid.Name, "hop"), []byte(`{"batch":1}`))
					}
					for _, mid := range bus.ReadableStreams(cred) {
						_ = nc.PublishRequest("$JS.API.CONSUMER.MSG.NEXT."+mid+"."+name, target, []byte(`{"batch":1}`))
					}
					// Acks and naks with a reply into the target.
					_ = nc.PublishRequest("$JS.ACK."+src+"."+name+".1.1.1.0.0", target, []byte("+ACK"))
					// Push consumers delivering into the target, or into
					// the API, made through the client library and raw.
					for _, deliver := range []string{target, "$JS.API.STREAM.DELETE.KV_" + dst.Name, "$JS.API.STREAM.PURGE." + src} {
						_, err := c.JS.CreateConsumer(ctx, src, jetstream.ConsumerConfig{DeliverSubject: deliver, AckPolicy: jetstream.AckNonePolicy})
						if err == nil {
							t.Errorf("%s made a push consumer on %s delivering to %s", cred, src, deliver)
						}
						req, _ := json.Marshal(map[string]any{"stream_name": src, "config": map[string]any{
							"deliver_subject": deliver, "ack_policy": "none", "deliver_policy": "all"}})
						_, _ = nc.Request("$JS.API.CONSUMER.CREATE."+src, req, time.Second)
						_, _ = nc.Request("$JS.API.CONSUMER.CREATE."+src+".x"+cred, req, time.Second)
					}
					// A direct publish, for completeness.
					_ = nc.Publish(target, []byte("{}"))
					_ = c.JS.DeleteConsumer(ctx, src, name)
					barrier(t, nc)
					// One target per source stream keeps the test short;
					// every target is tried below.
					break
				}
			}
			// Every target at least once: replies from the first readable
			// stream into every bucket.
			if rs := bus.ReadableStreams(cred); len(rs) > 0 {
				src := rs[0]
				cons, err := c.JS.CreateConsumer(ctx, src, jetstream.ConsumerConfig{AckPolicy: jetstream.AckNonePolicy})
				if err == nil {
					for _, dst := range bus.Buckets {
						if dst.Owner != cred {
							_ = nc.PublishRequest("$JS.API.CONSUMER.MSG.NEXT."+src+"."+cons.CachedInfo().Name, bus.KVSubject(dst.Name, "p"), []byte(`{"batch":1}`))
							_ = nc.PublishRequest("$JS.API.STREAM.INFO."+src, bus.KVSubject(dst.Name, "gone"), nil)
						}
					}
				}
			}
			// Wait for the server to have served every request: a pull into
			// our own inbox, queued behind the attacks, is answered.
			if rs := bus.ReadableStreams(cred); len(rs) > 0 {
				cons, err := c.JS.CreateConsumer(ctx, rs[0], jetstream.ConsumerConfig{AckPolicy: jetstream.AckNonePolicy})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := cons.Fetch(1, jetstream.FetchMaxWait(2*time.Second)); err != nil {
					t.Fatal(err)
				}
			}
			barrier(t, nc)
			after := states(t, tap)
			for _, bk := range bus.Buckets {
				if bk.Owner == cred {
					continue
				}
				if before[bk.Name] != after[bk.Name] {
					t.Errorf("%s changed bucket %s: %+v → %+v", cred, bk.Name, before[bk.Name], after[bk.Name])
				}
			}
		})
	}
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
						if m, err := c.NC.Request(subj, []byte(`{"batch":1}`), 500*time.Millisecond); err == nil && !isAPIError(m) {
							t.Errorf("%s: %s answered: %q", cred, subj, m.Data)
						}
					}
					for _, update := range []jetstream.ConsumerConfig{
						{Durable: durable, AckPolicy: jetstream.AckNonePolicy},
						{Name: durable, AckPolicy: jetstream.AckNonePolicy},
						{Durable: "nodelet-status-x", AckPolicy: jetstream.AckNonePolicy},
					} {
						uctx, cancel := context.WithTimeout(ctx, time.Second)
						_, err := c.JS.CreateOrUpdateConsumer(uctx, stream, update)
						cancel()
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
