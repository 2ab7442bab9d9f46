package bus_test

// The attack suite (issue 33): every credential against everything every
// other component owns, as the declaration gives it — each bucket
// (bus.Buckets), each producer's events stream (bus.EventProducers),
// status's copy of each and its durable consumer there, each heartbeat
// subject (internal/component). A bucket, stream, durable or daemon
// declared tomorrow is attacked here without a new test. Each attacker
// has a round: it tries every path below against every target it does
// not own, floods what it owns, and squats on the others' message IDs;
// meanwhile every daemon beats. After the round nothing another
// component owns has changed, every genuine heartbeat arrived as sent and
// nothing else on another's subject, and each producer's events that
// reuse the squatted IDs are all stored.

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/bus/bustest"
	"github.com/nodelet/nodelet/internal/component"
	"github.com/nodelet/nodelet/schemas"
)

// target is one thing a component owns.
type target struct {
	kind  string // bucket, events, copy (status's copy of a producer's events, with its durable), heartbeat
	owner string
	name  string // the bucket, the stream, or the heartbeat subject
}

// declaredTargets lists everything owned, from the declaration.
func declaredTargets() []target {
	var out []target
	for _, b := range bus.Buckets {
		out = append(out, target{"bucket", b.Owner, b.Name})
	}
	for _, p := range bus.EventProducers {
		out = append(out, target{"events", p, bus.EventsStream(p)})
		for _, c := range component.Declared {
			if c.EventsDurable != "" {
				out = append(out, target{"copy", c.Name, bus.StatusEventsStream(p)})
			}
		}
	}
	for _, c := range component.Declared {
		if c.Heartbeats {
			out = append(out, target{"heartbeat", c.Name, bus.HealthSubject(c.Name)})
		}
	}
	return out
}

// stream is where a target's messages are stored ("" for heartbeats).
func (t target) stream() string {
	switch t.kind {
	case "bucket":
		return "KV_" + t.name
	case "events", "copy":
		return t.name
	}
	return ""
}

// subject is a subject of the target's that a message could be put on.
func (t target) subject() string {
	switch t.kind {
	case "bucket":
		return bus.KVSubject(t.name, "p")
	case "events":
		return bus.EventSubject(t.owner, "victim")
	case "heartbeat":
		return t.name
	}
	return "nodelet.v1.nothing"
}

// attacker is one credential's connections for its round.
type attacker struct {
	cred  string
	c     *bus.Conn
	w     *bus.Wire
	src   map[string]string // readable stream → a pull consumer of the attacker's there
	tries *atomic.Int64
	// slow are the attacks that wait for an answer that never comes (a
	// KV client's acknowledgement of a refused publish), run aside.
	slow sync.WaitGroup
}

func (a *attacker) pub(subject, reply string, data []byte, hdr nats.Header) {
	a.tries.Add(1)
	m := &nats.Msg{Subject: subject, Reply: reply, Data: data, Header: hdr}
	_ = a.c.NC.PublishMsg(m)
}

func (a *attacker) raw(subject, reply, hdr string, data []byte) {
	a.tries.Add(1)
	_ = a.w.HPub(subject, reply, []byte(hdr), data)
}

func (a *attacker) api(subject string, body any) {
	b, _ := json.Marshal(body)
	a.pub(subject, bus.InboxPrefix(a.cred)+".api", b, nil)
}

// badHeaders are header blocks no client library would write: bare LF,
// bare CR, duplicated keys, a block left open, a rollup and a forged
// identity.
func badHeaders(victim string) []string {
	ci := fmt.Sprintf(`{"acc":%q,"kind":"Client"}`, strings.ToUpper(victim))
	return []string{
		"NATS/1.0\r\nX-A: b\nNats-Request-Info: " + ci + "\r\n\r\n",
		"NATS/1.0\r\nX-A: b\rKV-Operation: PURGE\r\n\r\n",
		"NATS/1.0\r\nNats-Rollup: all\r\nNats-Rollup: sub\r\nKV-Operation: PURGE\r\n\r\n",
		"NATS/1.0\r\nNats-Msg-Id: " + victim + "-x\r\nNats-Msg-Id: " + victim + "-y\r\n\r\n",
		"NATS/1.0\r\nNats-Expected-Stream: x\nNats-Request-Info: " + ci + "\nX: ",
		"NATS/1.0 503\r\n\r\n",
	}
}

// attack tries every path against t.
func (a *attacker) attack(t target) {
	subj, stream := t.subject(), t.stream()
	// Over the suite's value and event limits (64 KiB): a size no target
	// takes, whoever sends it.
	big := []byte(strings.Repeat("x", 128<<10))
	// Publishes straight onto the target, with every header trick.
	a.pub(subj, "", []byte("{}"), nil)
	a.pub(subj, "", big, nil)
	for _, h := range []nats.Header{{"KV-Operation": {"DEL"}}, {"KV-Operation": {"PURGE"}, "Nats-Rollup": {"sub"}},
		{"Nats-Rollup": {"all"}}, {"Nats-Msg-Id": {t.owner + "-1"}}, {"Nats-Expected-Last-Subject-Sequence": {"1"}}} {
		a.pub(subj, "", []byte("{}"), h)
	}
	for _, h := range badHeaders(t.owner) {
		a.raw(subj, "", h, []byte("{}"))
	}
	// The stream's API, answered in the attacker's inbox.
	if stream != "" {
		api := "$JS.API."
		for _, op := range []string{"STREAM.PURGE.", "STREAM.DELETE.", "STREAM.MSG.DELETE.", "STREAM.SNAPSHOT.", "STREAM.LEADER.STEPDOWN."} {
			a.api(api+op+stream, map[string]any{"seq": 1, "deliver_subject": bus.InboxPrefix(a.cred) + ".snap"})
		}
		a.api(api+"STREAM.UPDATE."+stream, map[string]any{"name": stream, "subjects": []string{"x." + a.cred}, "max_msgs": 1})
		a.api(api+"STREAM.CREATE."+stream, map[string]any{"name": stream, "subjects": []string{"x." + a.cred}})
		a.api(api+"STREAM.RESTORE."+stream, map[string]any{"config": map[string]any{"name": stream}})
		durable := component.StatusEventsDurable
		for _, op := range []string{"CONSUMER.INFO.", "CONSUMER.DELETE.", "CONSUMER.MSG.NEXT.", "CONSUMER.PAUSE."} {
			a.api(api+op+stream+"."+durable, map[string]any{"batch": 1})
		}
		a.pub("$JS.ACK."+stream+"."+durable+".1.1.1.0.0", "", []byte("+ACK"), nil)
		a.pub("$JS.ACK."+stream+"."+durable+".1.1.1.0.0", "", []byte("+TERM"), nil)
		a.pub("$JS.FC."+stream+"."+durable+".x", "", nil, nil)
		for _, cfg := range []map[string]any{
			{"durable_name": durable, "ack_policy": "none"},
			{"name": durable, "ack_policy": "none", "deliver_subject": bus.InboxPrefix(a.cred) + ".stolen"},
			{"ack_policy": "none", "deliver_subject": bus.InboxPrefix(t.owner) + ".x"},
			{"ack_policy": "none", "deliver_subject": subj},
		} {
			req := map[string]any{"stream_name": stream, "config": cfg}
			a.api(api+"CONSUMER.CREATE."+stream, req)
			a.api(api+"CONSUMER.DURABLE.CREATE."+stream+"."+durable, req)
		}
	}
	// Through every stream the attacker reads: replies aimed at the
	// target; through one of them, consumers delivering onto it or into
	// its owner's inbox, and consumer requests claiming its owner's
	// identity (the proxy's rules do not depend on the stream read).
	first := true
	for src, cons := range a.src {
		next := "$JS.API.CONSUMER.MSG.NEXT." + src + "." + cons
		a.pub(next, subj, []byte(`{"batch":1}`), nil)
		a.pub("$JS.API.STREAM.INFO."+src, subj, nil, nil)
		a.pub("$JS.API.DIRECT.GET."+src, subj, []byte(`{"seq":1}`), nil)
		a.pub("$JS.API.STREAM.MSG.GET."+src, subj, []byte(`{"seq":1}`), nil)
		a.pub("$JS.ACK."+src+"."+cons+".1.1.1.0.0", subj, []byte("+NXT"), nil)
		a.pub("$JS.FC."+src+"."+cons+".x", subj, nil, nil)
		if !first {
			continue
		}
		first = false
		for _, deliver := range []string{subj, "$JS.API.STREAM.PURGE." + stream, "$JS.API.STREAM.DELETE." + stream, bus.InboxPrefix(t.owner) + ".x"} {
			if stream == "" && strings.HasPrefix(deliver, "$JS.API.STREAM.") {
				continue
			}
			body, _ := json.Marshal(map[string]any{"stream_name": src, "config": map[string]any{
				"deliver_subject": deliver, "ack_policy": "none", "deliver_policy": "all"}})
			a.pub("$JS.API.CONSUMER.CREATE."+src, bus.InboxPrefix(a.cred)+".api", body, nil)
			for _, h := range badHeaders(t.owner)[:1] {
				a.raw("$JS.API.CONSUMER.CREATE."+src, bus.InboxPrefix(a.cred)+".api", h, body)
			}
		}
	}
	// The KV client, where the attacker may bind the bucket at all.
	if t.kind == "bucket" {
		a.slow.Add(1)
		go func() {
			defer a.slow.Done()
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			if kv, err := a.c.JS.KeyValue(ctx, t.name); err == nil {
				a.tries.Add(5)
				_, _ = kv.Put(ctx, "p", []byte("{}"))
				_ = kv.Delete(ctx, "p")
				_ = kv.Purge(ctx, "p")
				_, _ = kv.Create(ctx, "new", []byte("{}"))
				_, _ = kv.Update(ctx, "p", []byte("{}"), 1)
			}
		}()
	}
}

// flood fills what the attacker owns past its limits: its events stream
// twice over and its buckets until they refuse.
func (a *attacker) flood(t *testing.T, l bus.Limits) {
	ctx := ctxT(t)
	if bus.EventsProducer(bus.EventsStream(a.cred)) != "" {
		ev := &schemas.Event{Component: a.cred, Reason: "Flood", Message: strings.Repeat("f", 30<<10), Type: "Normal"}
		body, _ := schemas.Encode(a.cred, ev)
		for i := 0; i < int(2*l.EventsMaxBytes/int64(len(bus.EventProducers))/int64(len(body)))+1; i++ {
			a.tries.Add(1)
			_, _ = a.c.JS.Publish(ctx, bus.EventSubject(a.cred, fmt.Sprintf("flood-%d", i)), body)
		}
		// And squats on every other producer's next message IDs.
		for _, p := range bus.EventProducers {
			for i := range 3 {
				a.tries.Add(1)
				_, _ = a.c.JS.Publish(ctx, bus.EventSubject(a.cred, "squat"), body, jetstream.WithMsgID(squatID(p, a.cred, i)))
			}
		}
	}
	for _, b := range bus.Buckets {
		if b.Owner != a.cred {
			continue
		}
		for i := range 64 {
			a.tries.Add(1)
			if _, err := a.c.PutRaw(ctx, b.Name, fmt.Sprintf("flood%d", i), []byte(strings.Repeat("v", 8<<10))); err != nil {
				break
			}
		}
	}
}

func squatID(producer, attacker string, i int) string {
	return fmt.Sprintf("%s-squat-%s-%d", producer, attacker, i)
}

type state struct{ first, last, msgs uint64 }

// states reads every stored target's stream state, once status's copies
// have caught up with what they copy: their sources report no lag and two
// reads 100 ms apart agree (a source reports lag 0 before the copy of a
// message just published has landed).
func suiteStates(t *testing.T, tap, status *bus.Conn, targets []target) map[string]state {
	prev := readStates(t, tap, status, targets)
	for {
		time.Sleep(100 * time.Millisecond)
		cur := readStates(t, tap, status, targets)
		if fmt.Sprint(cur) == fmt.Sprint(prev) {
			return cur
		}
		prev = cur
	}
}

// copyCatchUp is how long a copy may take to catch up with what it
// copies: nats-server retries a stalled stream source after a back-off of
// up to 2 minutes (retryMaximum), after its 10 s health check, and on a
// loaded machine a source does stall (an attack suite once waited 4
// minutes for one, in 30 s windows).
const copyCatchUp = 3 * time.Minute

func readStates(t *testing.T, tap, status *bus.Conn, targets []target) map[string]state {
	ctx := ctxT(t)
	for _, tg := range targets {
		if tg.kind != "copy" {
			continue
		}
		deadline := time.Now().Add(copyCatchUp)
		for {
			sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			s, err := status.JS.Stream(sctx, tg.stream())
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			src := s.CachedInfo().Sources
			if len(src) == 1 && src[0].Lag == 0 {
				break
			}
			if time.Now().After(deadline) {
				j, _ := json.Marshal(src)
				t.Fatalf("%s has not caught up with its source in %v: %s", tg.stream(), copyCatchUp, j)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	out := map[string]state{}
	for _, tg := range targets {
		if tg.stream() == "" {
			continue
		}
		c := tap
		if tg.kind == "copy" {
			c = status
		}
		s, err := c.JS.Stream(ctx, tg.stream())
		if err != nil {
			t.Fatalf("%s: %v", tg.stream(), err)
		}
		st := s.CachedInfo().State
		out[tg.stream()] = state{st.FirstSeq, st.LastSeq, st.Msgs}
	}
	return out
}

// durables reads status's durable on each copy: what it delivered, and
// its configuration.
func durables(t *testing.T, status *bus.Conn) map[string]string {
	out := map[string]string{}
	for _, p := range bus.EventProducers {
		c, err := status.JS.Consumer(ctxT(t), bus.StatusEventsStream(p), component.StatusEventsDurable)
		if err != nil {
			t.Fatalf("status's durable on %s: %v", p, err)
		}
		i := c.CachedInfo()
		out[p] = fmt.Sprintf("delivered %d acked %d ack %v max %d", i.Delivered.Consumer, i.AckFloor.Consumer, i.Config.AckPolicy, i.Config.MaxAckPending)
	}
	return out
}

func TestAttackSuite(t *testing.T) {
	l := bus.Limits{BucketMaxBytes: 256 << 10, MaxValueSize: 64 << 10, EventsMaxBytes: int64(len(bus.EventProducers)) * (128 << 10),
		MaxStore: 64 << 20}
	b := bustest.StartWithLimits(t, t.TempDir(), l)
	seed(t, b)
	emitEverywhere(t, b)
	tap, status := b.Connect(bus.Tap), b.Connect(bus.Status)
	ctx := ctxT(t)
	for _, p := range bus.EventProducers {
		if _, err := status.JS.CreateOrUpdateConsumer(ctx, bus.StatusEventsStream(p), jetstream.ConsumerConfig{
			Durable: component.StatusEventsDurable, AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 1}); err != nil {
			t.Fatal(err)
		}
	}
	targets := declaredTargets()
	owners := map[string]*bus.Conn{}
	for _, c := range component.Declared {
		if c.Credential() {
			owners[c.Name] = b.Connect(c.Name)
		}
	}
	var tries atomic.Int64
	for _, cred := range nonOwners("") {
		t.Run(cred, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			before, durBefore := suiteStates(t, tap, status, targets), durables(t, status)
			// Heartbeats as a reader that is not the attacker sees them:
			// what an attacker has answered into its own account only it
			// sees, and it sees nothing of anyone else's.
			observer := tap
			if cred == bus.Tap {
				observer = owners[bus.KubeletServer]
			}
			beats := startBeats(t, observer, owners)
			inboxes := watchInboxes(t, owners, cred)
			a := &attacker{cred: cred, c: owners[cred], src: map[string]string{}, tries: &tries}
			w, err := bus.DialWire(b.Server.Addr(), b.StateDir, cred)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			a.w = w
			for _, s := range bus.ReadableStreams(cred) {
				cons, err := a.c.JS.CreateConsumer(ctx, s, jetstream.ConsumerConfig{AckPolicy: jetstream.AckNonePolicy, InactiveThreshold: time.Minute})
				if err != nil {
					t.Fatalf("%s may read %s but cannot make a consumer: %v", cred, s, err)
				}
				a.src[s] = cons.CachedInfo().Name
			}
			start := tries.Load()
			n := 0
			for _, tg := range targets {
				if tg.owner != cred {
					a.attack(tg)
					n++
				}
			}
			a.flood(t, l)
			a.slow.Wait()
			if err := a.c.NC.Flush(); err != nil {
				t.Fatal(err)
			}
			if err := w.Barrier(); err != nil {
				t.Fatal(err)
			}
			// The API's answers to everything above are queued before this one.
			if len(a.src) > 0 {
				for s := range a.src {
					_, _ = a.c.JS.Stream(ctx, s)
					break
				}
			}
			time.Sleep(200 * time.Millisecond)
			for s, cons := range a.src {
				_ = a.c.JS.DeleteConsumer(ctx, s, cons)
			}
			beats.check(t, cred)
			inboxes.check(t)
			// Nobody's durable name was taken on any stream tap can see.
			for _, s := range bus.ReadableStreams(bus.Tap) {
				if _, err := tap.JS.Consumer(ctx, s, component.StatusEventsDurable); err == nil {
					t.Errorf("%s made a consumer named %s on %s", cred, component.StatusEventsDurable, s)
				}
			}
			after := suiteStates(t, tap, status, targets)
			for _, tg := range targets {
				if s := tg.stream(); s != "" && tg.owner != cred && !(tg.kind == "copy" && s == bus.StatusEventsStream(cred)) && before[s] != after[s] {
					t.Errorf("%s changed %s %s of %s: %+v → %+v", cred, tg.kind, s, tg.owner, before[s], after[s])
				}
			}
			if d := durables(t, status); fmt.Sprint(d) != fmt.Sprint(durBefore) {
				t.Errorf("%s touched status's durables: %v → %v", cred, durBefore, d)
			}
			// Every producer's events reusing the IDs the attacker squatted on
			// are stored, each once.
			for _, p := range bus.EventProducers {
				if p == cred {
					continue
				}
				for i := range 3 {
					body, _ := schemas.Encode(p, &schemas.Event{Component: p, Reason: "Genuine", Type: "Normal",
						Object: corev1.ObjectReference{Kind: "Pod", UID: "victim"}})
					ack, err := owners[p].JS.Publish(ctx, bus.EventSubject(p, "victim"), body, jetstream.WithMsgID(squatID(p, cred, i)))
					if err != nil {
						t.Fatal(err)
					}
					if ack.Duplicate || ack.Stream != bus.EventsStream(p) {
						t.Errorf("%s squatted on %s's message ID %s: stored as %+v", cred, p, squatID(p, cred, i), ack)
					}
				}
			}
			t.Logf("%s tried %d paths against %d targets", cred, tries.Load()-start, n)
		})
	}
	t.Logf("attack suite: %d tries by %d credentials against %d declared targets", tries.Load(), len(nonOwners("")), len(targets))
}

// beatLog is every heartbeat tap heard during a round, by subject.
type beatLog struct {
	mu   sync.Mutex
	got  map[string][]string
	sent map[string][]string
	stop func()
}

// startBeats has every component that beats publish heartbeats while the
// round runs, and observer (tap, or another reader of every heartbeat)
// record what arrives.
func startBeats(t *testing.T, observer *bus.Conn, owners map[string]*bus.Conn) *beatLog {
	l := &beatLog{got: map[string][]string{}, sent: map[string][]string{}}
	sub, err := observer.NC.Subscribe(bus.SubjectHealthAll, func(m *nats.Msg) {
		l.mu.Lock()
		l.got[m.Subject] = append(l.got[m.Subject], string(m.Data))
		l.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := observer.NC.Flush(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			for _, c := range component.Declared {
				if !c.Heartbeats {
					continue
				}
				body, _ := schemas.Encode(c.Name, &schemas.Heartbeat{Component: c.Name, Ready: true, Message: fmt.Sprintf("genuine %d", i)})
				l.mu.Lock()
				l.sent[bus.HealthSubject(c.Name)] = append(l.sent[bus.HealthSubject(c.Name)], string(body))
				l.mu.Unlock()
				_ = owners[c.Name].NC.Publish(bus.HealthSubject(c.Name), body)
			}
			select {
			case <-done:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	l.stop = func() {
		close(done)
		wg.Wait()
		for _, c := range owners {
			_ = c.NC.Flush()
		}
		_ = observer.NC.Flush()
		time.Sleep(100 * time.Millisecond)
		_ = sub.Unsubscribe()
	}
	return l
}

// check ends the beats: each subject carried exactly its owner's beats.
func (l *beatLog) check(t *testing.T, cred string) {
	l.stop()
	l.mu.Lock()
	defer l.mu.Unlock()
	for subj, sent := range l.sent {
		if fmt.Sprint(l.got[subj]) != fmt.Sprint(sent) {
			t.Errorf("during %s's round %s carried %d messages, %d genuine sent (first: %.120q)", cred, subj, len(l.got[subj]), len(sent), l.got[subj])
		}
	}
	for subj := range l.got {
		if _, ok := l.sent[subj]; !ok && subj != bus.HealthSubject(cred) {
			t.Errorf("during %s's round a heartbeat arrived on %s, which no daemon owns", cred, subj)
		}
	}
}

// inboxWatch is what arrived in the owners' inboxes where only a consumer
// an attacker made in their name could deliver.
type inboxWatch struct {
	mu   sync.Mutex
	got  []string
	subs []*nats.Subscription
}

func watchInboxes(t *testing.T, owners map[string]*bus.Conn, attacker string) *inboxWatch {
	w := &inboxWatch{}
	for name, c := range owners {
		if name == attacker {
			continue
		}
		for _, subj := range []string{bus.InboxPrefix(name) + ".x", bus.InboxPrefix(name) + ".stolen"} {
			sub, err := c.NC.Subscribe(subj, func(m *nats.Msg) {
				w.mu.Lock()
				w.got = append(w.got, m.Subject)
				w.mu.Unlock()
			})
			if err != nil {
				t.Fatal(err)
			}
			w.subs = append(w.subs, sub)
		}
		_ = c.NC.Flush()
	}
	return w
}

func (w *inboxWatch) check(t *testing.T) {
	for _, s := range w.subs {
		_ = s.Unsubscribe()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.got) > 0 {
		t.Errorf("messages delivered into other components' inboxes: %v", w.got)
	}
}
