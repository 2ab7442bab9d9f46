package tap

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/schemas"
)

// FuzzDescribe: `nodelet tap` decodes every message on the bus, of every
// type and from every credential, and must describe whatever arrives
// without panicking: any subject, any data, any KV operation header, in
// text, colour and JSON. Seeds: a message of every type on its subject.
// Longer: go test ./internal/tools/tap -run '^$' -fuzz FuzzDescribe -fuzztime 10m.
func FuzzDescribe(f *testing.F) {
	at := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	for _, m := range schemas.All() {
		b, _ := schemas.EncodeAt("fuzz", at, m)
		f.Add(bus.KVSubject(bus.BucketDesired, "uid-1"), "", b)
		f.Add(bus.EventSubject(bus.Runtime, "uid-1"), "", b)
	}
	f.Add(bus.KVSubject(bus.BucketStatus, "uid-1"), "DEL", []byte(nil))
	f.Add(bus.HealthSubject(bus.Prober), "", []byte(`{"schema":"nodelet.v1.Heartbeat","data":{"ready":false}}`))
	f.Add("$KV.other.x", "", []byte("{}"))
	f.Fuzz(func(t *testing.T, subject, op string, data []byte) {
		m := &nats.Msg{Subject: subject, Data: data, Header: nats.Header{}}
		if op != "" {
			m.Header.Set("KV-Operation", op)
		}
		l, ok := describeAt(m, at)
		if !ok {
			return
		}
		_ = l.Text()
		_ = l.ColorText()
		o := Options{Pod: "web", Schema: "PodObserved", Subject: bus.SubjectEventsAll}
		_ = o.match(l)
		_ = mentionsPod(l, "ns/web")
	})
}
