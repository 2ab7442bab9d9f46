package bus_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/bus/bustest"
)

// forgedHeaders are header blocks that each try to pass the consumer proxy
// as account acct: a copy of Nats-Request-Info behind a bare LF (nats.go
// splits lines there, nats-server does not, so the server neither strips it
// nor replaces it), behind a bare CR, in lower case, CRLF-led (the server
// strips that one), and a block left open so that the server's own line
// is glued to the end of the attacker's last line.
func forgedHeaders(acct string) map[string]string {
	ci := fmt.Sprintf(`{"acc":%q,"user":"forged","kind":"Client"}`, acct)
	return map[string]string{
		"bare LF":         "NATS/1.0\r\nX-A: b\nNats-Request-Info: " + ci + "\r\n\r\n",
		"bare LF twice":   "NATS/1.0\r\nX-A: b\nNats-Request-Info: " + ci + "\nX-B: c\r\n\r\n",
		"bare CR":         "NATS/1.0\r\nX-A: b\rNats-Request-Info: " + ci + "\r\n\r\n",
		"lower case":      "NATS/1.0\r\nX-A: b\nnats-request-info: " + ci + "\r\n\r\n",
		"CRLF-led":        "NATS/1.0\r\nNats-Request-Info: " + ci + "\r\n\r\n",
		"glued":           "NATS/1.0\r\nX-A: b\nNats-Request-Info: " + ci + "\nX-Pad: zz",
		"glued into JSON": "NATS/1.0\r\nNats-Request-Info: {\"acc\":\"" + acct + "\",\"x\":\"" + "zz",
	}
}

// TestProxyIdentityCannotBeForged: issue 33, item 1. Through a bare
// protocol connection (nats.go would sanitize the header), tap asks for a
// consumer that delivers into status's inbox and prober for a durable
// named as sources', each with a header block that claims the other's
// account. The proxy must take the identity nats-server appended, and only
// that: every request is refused and no such consumer exists.
func TestProxyIdentityCannotBeForged(t *testing.T) {
	b := bustest.Start(t)
	seed(t, b)
	ctx := ctxT(t)
	tap := b.Connect(bus.Tap)
	stream := "KV_" + bus.BucketDesired
	for _, tc := range []struct {
		cred, as, name string
		config         map[string]any
	}{
		{bus.Tap, "STATUS", "into-status-inbox", map[string]any{"name": "into-status-inbox",
			"deliver_subject": bus.InboxPrefix(bus.Status) + ".stolen", "ack_policy": "none"}},
		{bus.Prober, "SOURCES", "nodelet-sources-stolen", map[string]any{"durable_name": "nodelet-sources-stolen",
			"ack_policy": "explicit"}},
	} {
		t.Run(tc.cred, func(t *testing.T) {
			w, err := bus.DialWire(b.Server.Addr(), b.StateDir, tc.cred)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			inbox := bus.InboxPrefix(tc.cred) + ".forge"
			if err := w.Sub(inbox+".>", 1); err != nil {
				t.Fatal(err)
			}
			body, _ := json.Marshal(map[string]any{"stream_name": stream, "config": tc.config})
			subject := "$JS.API.CONSUMER.CREATE." + stream + "." + tc.name
			if _, durable := tc.config["durable_name"]; durable {
				subject = "$JS.API.CONSUMER.DURABLE.CREATE." + stream + "." + tc.name
			}
			for what, hdr := range forgedHeaders(tc.as) {
				reply := inbox + "." + strings.ReplaceAll(what, " ", "-")
				if err := w.HPub(subject, reply, []byte(hdr), body); err != nil {
					t.Fatal(err)
				}
				_, _, data, err := w.Next()
				if err != nil {
					t.Fatalf("%s: no answer: %v", what, err)
				}
				var resp struct {
					Error *struct {
						Description string `json:"description"`
					} `json:"error"`
				}
				if err := json.Unmarshal(data, &resp); err != nil || resp.Error == nil {
					t.Errorf("%s: %s passed the proxy as %s: %s", what, tc.cred, tc.as, data)
				}
			}
			if _, err := tap.JS.Consumer(ctx, stream, tc.name); err == nil {
				t.Errorf("consumer %s exists on %s", tc.name, stream)
				_ = b.Connect(bus.Status).JS.DeleteConsumer(ctx, stream, tc.name)
			}
		})
	}
	// The honest path still works: status's own client, through nats.go.
	st := b.Connect(bus.Status)
	cons, err := st.JS.CreateConsumer(ctx, stream, jetstream.ConsumerConfig{DeliverSubject: bus.InboxPrefix(bus.Status) + ".mine",
		AckPolicy: jetstream.AckNonePolicy, InactiveThreshold: time.Minute})
	if err != nil {
		t.Fatalf("status cannot make a consumer into its own inbox: %v", err)
	}
	_ = st.JS.DeleteConsumer(ctx, stream, cons.CachedInfo().Name)
}
