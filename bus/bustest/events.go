package bustest

import (
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/schemas"
)

// OnEvents calls fn with every event published on subject (a
// bus.EventSubject pattern or bus.SubjectEventsAll), decoded, as conn (a
// tap connection) receives it; an event that does not decode fails t. It
// returns once the subscription is live on the server, and ends it when the
// test does.
func OnEvents(t testing.TB, conn *bus.Conn, subject string, fn func(schemas.Event)) {
	t.Helper()
	sub, err := conn.NC.Subscribe(subject, func(m *nats.Msg) {
		_, ev, err := schemas.Decode[schemas.Event](m.Data)
		if err != nil {
			t.Errorf("event on %s does not decode: %v", m.Subject, err)
			return
		}
		fn(*ev)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := conn.NC.Flush(); err != nil {
		t.Fatal(err)
	}
}
