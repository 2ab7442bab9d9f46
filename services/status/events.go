package status

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	recordutil "k8s.io/client-go/tools/record/util"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/component"
	"github.com/nodelet/nodelet/schemas"
)

const (
	// EventsConsumer is the durable consumer of the events stream through
	// which nodelet-status posts every event to the API server once, as
	// its declaration names it.
	EventsConsumer = component.StatusEventsDurable
	// EventSourceComponent is the events' source, as the kubelet names it,
	// so that tools selecting the node agent's events keep working.
	EventSourceComponent = "kubelet"
	// eventsAckWait is how long an event handed to a nodelet-status that
	// died waits before it is delivered again.
	eventsAckWait = 10 * time.Second
	// eventsMaxAge: events older than this when the consumer was created are
	// not posted (the API server would expire them within the hour anyway).
	eventsMaxAge = time.Hour
)

// eventPoster posts the bus's events to the API server with client-go's
// recorder semantics: record.EventCorrelator does the aggregation, the
// counting of repeats and the per-object spam filter, client-go's
// EventSinkImpl writes, and the events client is rate limited with
// status.eventRecordQPS/eventBurst.
//
// Exactly once across restarts: events arrive in stream order through a
// durable consumer that delivers one at a time and is acknowledged only
// after the API answered. Everything is deterministic: the correlator's
// clock is the event's own time, event names are derived from it (as the
// recorder derives them from the time of recording), and at start the
// correlator is primed with every event already acknowledged. So an event
// handled again after a crash produces the same create (AlreadyExists) or
// the same absolute count patch, never a second copy.
type eventPoster struct {
	s    *Daemon
	sink record.EventSink
	clk  *eventClock
	corr *record.EventCorrelator
	// created is the consumer's creation time, for the age cut-off.
	created time.Time
	primed  bool
	// handled is the stream sequence of the last event handled: one
	// delivered again (its acknowledgement was lost, or it outlived the ack
	// wait) is acknowledged, not counted twice.
	handled uint64
}

func newEventPoster(s *Daemon, kube kubernetes.Interface) *eventPoster {
	clk := &eventClock{}
	return &eventPoster{
		s:    s,
		sink: &typedcorev1.EventSinkImpl{Interface: kube.CoreV1().Events("")},
		clk:  clk,
		corr: record.NewEventCorrelatorWithOptions(record.CorrelatorOptions{Clock: clk}),
	}
}

// run consumes the events stream until ctx ends, recreating the consumer
// after errors (the bus restarted, or its store was wiped).
func (p *eventPoster) run(ctx context.Context) {
	for ctx.Err() == nil {
		if err := p.consume(ctx); err != nil && ctx.Err() == nil {
			p.s.log.Warn("Events consumer stopped, restarting", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

func (p *eventPoster) consume(ctx context.Context) error {
	js := p.s.bus.JS
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	cons, err := js.CreateOrUpdateConsumer(cctx, bus.StreamStatusEvents, jetstream.ConsumerConfig{
		Durable:       EventsConsumer,
		Description:   "nodelet-status posts events to the API server",
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       eventsAckWait,
		MaxAckPending: 1,
		MaxDeliver:    -1,
		FilterSubject: bus.SubjectEventsAll,
	})
	if err != nil {
		cancel()
		return err
	}
	info, err := cons.Info(cctx)
	cancel()
	if err != nil {
		return err
	}
	if !p.primed || !info.Created.Equal(p.created) {
		p.created = info.Created
		if err := p.prime(ctx, info.AckFloor.Stream); err != nil {
			return err
		}
		p.primed, p.handled = true, info.AckFloor.Stream
	}
	for ctx.Err() == nil {
		msg, err := cons.Next(jetstream.FetchMaxWait(2 * time.Second))
		if errors.Is(err, nats.ErrTimeout) || errors.Is(err, jetstream.ErrNoMessages) {
			continue
		}
		if err != nil {
			return err
		}
		p.handle(ctx, msg)
	}
	return nil
}

// prime replays the events up to the acknowledged one through the
// correlator, without posting, to rebuild its state.
func (p *eventPoster) prime(ctx context.Context, ackFloor uint64) error {
	if ackFloor == 0 {
		return nil
	}
	oc, err := p.s.bus.JS.OrderedConsumer(ctx, bus.StreamStatusEvents, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{bus.SubjectEventsAll},
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return err
	}
	n := 0
	for ctx.Err() == nil {
		batch, err := oc.Fetch(500, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			return err
		}
		got := 0
		for msg := range batch.Messages() {
			got++
			meta, err := msg.Metadata()
			if err != nil {
				continue
			}
			if meta.Sequence.Stream > ackFloor {
				p.s.log.Info("Primed event correlator", "events", n)
				return nil
			}
			if ev, ok := p.decode(msg); ok {
				if res := p.correlate(ev); res != nil {
					p.corr.UpdateState(res.Event)
				}
				n++
			}
			if meta.Sequence.Stream == ackFloor {
				p.s.log.Info("Primed event correlator", "events", n)
				return nil
			}
		}
		if got == 0 {
			// The stream holds nothing up to the acknowledged event any
			// more (it aged out).
			return nil
		}
	}
	return ctx.Err()
}

// handle posts one event and acknowledges it.
func (p *eventPoster) handle(ctx context.Context, msg jetstream.Msg) {
	var seq uint64
	if meta, err := msg.Metadata(); err == nil {
		seq = meta.Sequence.Stream
	}
	var res *record.EventCorrelateResult
	if seq == 0 || seq > p.handled {
		if ev, ok := p.decode(msg); ok {
			res = p.correlate(ev)
		}
	}
	// Keep the message ours while the API is slow or away.
	done := make(chan struct{})
	defer close(done)
	go func() {
		t := time.NewTicker(eventsAckWait / 3)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				_ = msg.InProgress()
			}
		}
	}()
	for delay := 250 * time.Millisecond; res != nil; delay = min(2*delay, 10*time.Second) {
		if p.post(ctx, res) {
			break
		}
		select {
		case <-ctx.Done():
			// Handed back at once for the next run (whose correlator is
			// primed without it: it was never acknowledged).
			_ = msg.Nak()
			return
		case <-time.After(delay):
		}
	}
	if seq > p.handled {
		p.handled = seq
	}
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := msg.DoubleAck(actx); err != nil {
		p.s.log.Warn("Cannot acknowledge event", "subject", msg.Subject(), "err", err)
	}
}

// decode turns a stream message into the API event it stands for; bad or
// unpostable messages are logged and skipped.
func (p *eventPoster) decode(msg jetstream.Msg) (*corev1.Event, bool) {
	_, ev, err := schemas.Decode[schemas.Event](msg.Data())
	if err != nil {
		p.s.log.Error("Skipping event that does not decode", "subject", msg.Subject(), "err", err)
		return nil, false
	}
	if ev.Time.Before(p.created.Add(-eventsMaxAge)) {
		return nil, false
	}
	out, err := apiEvent(ev, p.s.nodeName)
	if err != nil {
		p.s.log.Error("Skipping event", "subject", msg.Subject(), "reason", ev.Reason, "err", err)
		return nil, false
	}
	return out, true
}

func (p *eventPoster) correlate(ev *corev1.Event) *record.EventCorrelateResult {
	p.clk.set(ev.LastTimestamp.Time)
	res, err := p.corr.EventCorrelate(ev)
	if err != nil {
		p.s.log.Warn("Event correlation failed", "reason", ev.Reason, "err", err)
	}
	if res == nil || res.Skip || res.Event == nil {
		return nil
	}
	return res
}

// post writes one correlated event as client-go's recordEvent does. It
// returns false when the API server could not be reached (try again).
func (p *eventPoster) post(ctx context.Context, res *record.EventCorrelateResult) bool {
	ev := res.Event
	var (
		created *corev1.Event
		err     error
	)
	update := ev.Count > 1
	if update {
		created, err = p.sink.Patch(ev, res.Patch)
	}
	if !update || apierrors.IsNotFound(err) {
		e := *ev
		e.ResourceVersion = ""
		created, err = p.sink.Create(&e)
	}
	var rce *rest.RequestConstructionError
	switch {
	case err == nil:
		p.corr.UpdateState(created)
		if testHookAfterPost != nil {
			testHookAfterPost(ev)
		}
		return true
	case apierrors.IsAlreadyExists(err):
		// Posted before a crash: the same event, nothing to do.
		p.corr.UpdateState(ev)
		return true
	case errors.As(err, &rce):
		p.s.log.Error("Unable to construct event (will not retry)", "reason", ev.Reason, "err", err)
		return true
	case apierrors.IsForbidden(err), apierrors.IsInvalid(err), apierrors.IsBadRequest(err),
		apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
		p.s.log.Error("Server rejected event (will not retry)", "reason", ev.Reason, "object", ev.InvolvedObject.Name, "err", err)
		return true
	}
	if ctx.Err() == nil {
		p.s.log.Warn("Unable to write event (will retry)", "reason", ev.Reason, "err", err)
	}
	return false
}

// apiEvent is the recorder's makeEvent for one bus event: named after its
// object and time, in the object's namespace (default for cluster-scoped
// objects), from the node agent on this node.
func apiEvent(ev *schemas.Event, nodeName string) (*corev1.Event, error) {
	ref := ev.Object
	if ref.Kind == "" || ref.Name == "" && ref.Kind != "Node" {
		return nil, errors.New("event names no object")
	}
	if ref.Kind == "Node" {
		if ref.Name == "" {
			ref.Name = nodeName
		}
		if ref.UID == "" {
			ref.UID = types.UID(ref.Name)
		}
	}
	if ref.APIVersion == "" && (ref.Kind == "Pod" || ref.Kind == "Node") {
		ref.APIVersion = "v1"
	}
	if ev.Type != corev1.EventTypeNormal && ev.Type != corev1.EventTypeWarning {
		return nil, errors.New("unsupported event type " + ev.Type)
	}
	t := metav1.NewTime(ev.Time)
	ns := ref.Namespace
	if ns == "" {
		ns = metav1.NamespaceDefault
	}
	return &corev1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: recordutil.GenerateEventName(ref.Name, ev.Time.UnixNano()), Namespace: ns},
		InvolvedObject:      ref,
		Reason:              ev.Reason,
		Message:             ev.Message,
		FirstTimestamp:      t,
		LastTimestamp:       t,
		Count:               1,
		Type:                ev.Type,
		Source:              corev1.EventSource{Component: EventSourceComponent, Host: nodeName},
		ReportingController: EventSourceComponent,
		ReportingInstance:   nodeName,
	}, nil
}

// testHookAfterPost, set only by tests, runs after an event is posted and
// before it is acknowledged: the window in which a crash must not lead to
// a second copy.
var testHookAfterPost func(*corev1.Event)

// eventClock is the correlator's clock: the time of the event being
// correlated, so that aggregation and spam filtering depend only on the
// sequence of events and not on when they are handled.
type eventClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *eventClock) set(t time.Time) {
	c.mu.Lock()
	if t.After(c.t) {
		c.t = t
	}
	c.mu.Unlock()
}

func (c *eventClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *eventClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }
