package bus

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/nodelet/nodelet/schemas"
)

// eventQueueSize bounds the events kept while the bus is away; beyond it
// the oldest are dropped (and counted in the log).
const eventQueueSize = 10000

type pendingEvent struct {
	subject string
	id      string
	data    []byte
}

type emitter struct {
	mu      sync.Mutex
	queue   []pendingEvent
	wake    chan struct{}
	dropped int
	started bool
}

// popFront drops the queue's first event. Its slot is cleared, and an
// empty queue lets its array go, so that a sent event's bytes are not
// kept until the array is next reallocated (a burst's, up to
// eventQueueSize events, for as long as the daemon is quiet).
func (e *emitter) popFront() {
	e.queue[0] = pendingEvent{}
	e.queue = e.queue[1:]
	if len(e.queue) == 0 {
		e.queue = nil
	}
}

// Emit queues ev for the events stream and returns at once. A background
// sender publishes in order and retries while the bus is away; each event
// carries a message ID, so a retry is never stored twice.
func (c *Conn) Emit(ev schemas.Event) {
	ev.Component = c.Component
	if ev.Time.IsZero() {
		ev.Time = time.Now().UTC()
	}
	b, err := encodeEvent(c.Component, ev)
	if err != nil {
		c.Log.Error("Cannot encode event", "reason", ev.Reason, "err", err)
		return
	}
	e := &c.events
	e.mu.Lock()
	if !e.started {
		e.started = true
		e.wake = make(chan struct{}, 1)
		go c.sendEvents()
	}
	if len(e.queue) >= eventQueueSize {
		e.popFront()
		e.dropped++
	}
	e.queue = append(e.queue, pendingEvent{
		subject: EventSubject(c.Component, publishable(string(ev.Object.UID))),
		id:      c.Component + "-" + nuid.Next(),
		data:    b,
	})
	e.mu.Unlock()
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// maxEventBody is what an event's envelope may take on the bus: the
// events streams' message size limit, less room for the headers.
const maxEventBody = defaultMaxEventSize - 1<<10

// encodeEvent encodes ev, shortening a message that would make the event
// larger than the bus takes (the streams refuse it, and a refused event
// is lost) to what fits, marked as cut.
func encodeEvent(component string, ev schemas.Event) ([]byte, error) {
	const mark = " [truncated]"
	for {
		b, err := schemas.EncodeAt(component, ev.Time, ev)
		if err != nil || len(b) <= maxEventBody || ev.Message == "" {
			return b, err
		}
		msg := strings.TrimSuffix(ev.Message, mark)
		cut := len(msg) / 2
		for cut > 0 && !utf8.RuneStart(msg[cut]) {
			cut--
		}
		ev.Message = msg[:cut] + mark
		if cut == 0 {
			ev.Message = ""
		}
	}
}

// publishable keeps a wildcard UID from making the event's subject a
// filter, which could not be published and would block the queue.
func publishable(uid string) string {
	if uid != "" && ValidKey(uid) != nil {
		return "invalid"
	}
	return uid
}

func (c *Conn) sendEvents() {
	e := &c.events
	for {
		e.mu.Lock()
		if len(e.queue) == 0 {
			e.mu.Unlock()
			if c.NC.IsClosed() {
				return
			}
			select {
			case <-e.wake:
			case <-time.After(time.Second):
			}
			continue
		}
		next := e.queue[0]
		if e.dropped > 0 {
			c.Log.Warn("Dropped events while the bus was away", "count", e.dropped)
			e.dropped = 0
		}
		e.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		msg := nats.NewMsg(next.subject)
		msg.Data = next.data
		_, err := c.JS.PublishMsg(ctx, msg, jetstream.WithMsgID(next.id))
		cancel()
		if err != nil && IsRejected(err) {
			// Retrying cannot help, and the events queued behind it wait.
			c.Log.Error("Bus refused an event, dropping it", "subject", next.subject, "size", len(next.data), "err", err)
		} else if err != nil {
			if c.NC.IsClosed() {
				return
			}
			time.Sleep(250 * time.Millisecond)
			continue
		}
		e.mu.Lock()
		if len(e.queue) > 0 && e.queue[0].id == next.id {
			e.popFront()
		}
		e.mu.Unlock()
	}
}

// FlushEvents waits until every queued event is stored or ctx ends.
func (c *Conn) FlushEvents(ctx context.Context) error {
	for {
		c.events.mu.Lock()
		n := len(c.events.queue)
		c.events.mu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d events not stored: %w", n, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}
