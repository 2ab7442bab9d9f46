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
	// eventMaxTries bounds the tries of an event the API server answers
	// with a transient error: client-go's maxTriesPerEvent.
	eventMaxTries = 12
)

// eventPoster posts the bus's events to the API server with client-go's
// recorder semantics: record.EventCorrelator does the aggregation, the
// counting of repeats and the per-object spam filter, client-go's
// EventSinkImpl writes, and the events client is rate limited with
// status.eventRecordQPS/eventBurst.
//
// One poster per producer: each component's events are a stream of their
// own on the bus (so that none can drop or evict another's), and status
// consumes its copy of each through its own durable consumer. Events are
// posted in order per producer; producers do not wait for one another.
// Every poster correlates through one shared correlator (sharedCorrelator),
// as every source of the kubelet's events goes through the one correlator
// of its recorder's sink.
//
// Exactly once across restarts: events arrive in stream order through a
// durable consumer that delivers one at a time and is acknowledged only
// after the API answered. Everything is deterministic: the correlator's
// clock is the event's own time, event names are derived from it (as the
// recorder derives them from the time of recording), and at start the
// correlator is primed with every event already acknowledged. So an event
// handled again after a crash produces the same create (AlreadyExists) or
// the same absolute count patch, never a second copy. (With the correlator
// shared, the one thing the order between producers decides is the spam
// filter's budget of an object that several producers report on, which may
// differ after a restart: an event is then skipped or counted differently,
// never posted twice, since its name comes from its own time.)
type eventPoster struct {
	s *Daemon
	// stream is status's copy of one producer's events.
	stream string
	sink   record.EventSink
	// corr is the correlator every poster shares; now is the time of the
	// latest event of this producer, its clock.
	corr *sharedCorrelator
	now  time.Time
	// created is the consumer's creation time, for the age cut-off.
	created time.Time
	primed  bool
	// handled is the stream sequence of the last event handled: one
	// delivered again (its acknowledgement was lost, or it outlived the ack
	// wait) is acknowledged, not counted twice.
	handled uint64
	// retryBase and retryMax are the back-off between tries of one event:
	// 250 ms doubling to 10 s (client-go's sleep between tries).
	retryBase, retryMax time.Duration
}

func newEventPoster(s *Daemon, kube kubernetes.Interface, corr *sharedCorrelator) *eventPoster {
	return &eventPoster{
		s:    s,
		sink: &typedcorev1.EventSinkImpl{Interface: kube.CoreV1().Events("")},
		corr: corr,

		retryBase: 250 * time.Millisecond,
		retryMax:  10 * time.Second,
	}
}

// newEventPosters makes a poster for every producer's events, all sharing
// one correlator.
func newEventPosters(s *Daemon, kube kubernetes.Interface) []*eventPoster {
	corr := newSharedCorrelator()
	var out []*eventPoster
	for _, c := range bus.EventProducers {
		p := newEventPoster(s, kube, corr)
		p.stream = bus.StatusEventsStream(c)
		out = append(out, p)
	}
	return out
}

// sharedCorrelator is the node's one record.EventCorrelator, which every
// producer's poster goes through, as client-go's
// (*eventBroadcasterImpl).StartRecordingToSink makes one correlator for all
// the events of the kubelet's recorder. Its caches (client-go's
// maxLruCacheEntries, 4096 keys each for the spam filter, the aggregator and
// the event log; about 5.5 MiB of heap when full) are then bounded once
// per node, not once per producer: one correlator per producer was 9 times
// the kubelet's bound, and the soak's status growth was them filling
// (issue 37). Same semantics as the kubelet's: every producer's events
// have the kubelet's source (EventSourceComponent and the node), so the
// keys, which start with the source, do not tell producers apart; the spam
// filter allows 25 events per object from the whole node agent, as it
// does the kubelet.
//
// client-go's correlator is not safe for concurrent use as a whole (the
// kubelet calls it from one goroutine), so every call holds mu; the clock
// is then the time of the calling producer's latest event.
type sharedCorrelator struct {
	mu   sync.Mutex
	clk  eventClock
	corr *record.EventCorrelator
}

func newSharedCorrelator() *sharedCorrelator {
	c := &sharedCorrelator{}
	c.corr = record.NewEventCorrelatorWithOptions(record.CorrelatorOptions{Clock: &c.clk})
	return c
}

// correlate is EventCorrelate at now.
func (c *sharedCorrelator) correlate(now time.Time, ev *corev1.Event) (*record.EventCorrelateResult, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.clk.set(now)
	return c.corr.EventCorrelate(ev)
}

// updateState is UpdateState.
func (c *sharedCorrelator) updateState(ev *corev1.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.corr.UpdateState(ev)
}

// run consumes the events stream until ctx ends, recreating the consumer
// after errors (the bus restarted, or its store was wiped).
func (p *eventPoster) run(ctx context.Context) {
	for ctx.Err() == nil {
		if err := p.consume(ctx); err != nil && ctx.Err() == nil {
			p.s.log.Warn("Events consumer stopped, restarting", "stream", p.stream, "err", err)
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
	cons, err := js.CreateOrUpdateConsumer(cctx, p.stream, jetstream.ConsumerConfig{
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
	oc, err := p.s.bus.JS.OrderedConsumer(ctx, p.stream, jetstream.OrderedConsumerConfig{
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
				p.s.log.Info("Primed event correlator", "stream", p.stream, "events", n)
				return nil
			}
			if ev, _ := p.decode(msg); ev != nil {
				if res := p.correlate(ev); res != nil {
					p.corr.updateState(res.Event)
				}
				n++
			}
			if meta.Sequence.Stream == ackFloor {
				p.s.log.Info("Primed event correlator", "stream", p.stream, "events", n)
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
		ev, dropped := p.decode(msg)
		if ev != nil {
			if res = p.correlate(ev); res == nil {
				// client-go's spam filter, as the kubelet's recorder
				// applies it (25 events per object, then one per 5 min).
				dropped = "spam_filter"
			}
		}
		if dropped != "" {
			p.s.metrics.eventsDropped.WithLabelValues(dropped).Inc()
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
	if res != nil && !p.deliver(ctx, res) {
		// Handed back at once for the next run (whose correlator is
		// primed without it: it was never acknowledged).
		_ = msg.Nak()
		return
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

// deliver posts one correlated event until the API has it or the event is
// given up, as client-go's recordToSink does for the kubelet, and returns
// false only when ctx ended first. Events are posted one at a time and in
// order, so an event that is never given up holds every later one: the
// rules below decide which errors may hold the queue and for how long.
//
//   - The API server could not be reached (no answer): hold and retry
//     without a limit, since no other event would get through either.
//     client-go gives up after maxTriesPerEvent tries; nodelet's events wait
//     in a durable stream instead, so they reach the API when it is back.
//   - The API server answered with a transient error (5xx, 429) or an
//     answer client-go cannot read: retry, at most eventMaxTries times.
//     Deviation: client-go's recordEvent gives up on every status error at
//     once; nodelet retries these so that an etcd restart loses no events.
//   - Any other answer (the event's namespace is gone or terminating, it is
//     invalid or forbidden, it already exists): give up at once, as
//     recordEvent does. A namespace deleted while its events waited in the
//     queue is the common case (the e2e suite deletes one per spec); retrying
//     its NotFound held every later event forever (issue 37).
func (p *eventPoster) deliver(ctx context.Context, res *record.EventCorrelateResult) bool {
	delay := p.retryBase
	for tries := 1; ; tries++ {
		out, err := p.post(res)
		switch {
		case out == postDone:
			return true
		case out == postRejected:
			p.s.metrics.eventsDropped.WithLabelValues("rejected").Inc()
			return true
		case out == postTransient && tries >= eventMaxTries:
			p.s.log.Error("Unable to write event (retry limit exceeded)", "reason", res.Event.Reason,
				"object", res.Event.InvolvedObject.Name, "tries", tries, "err", err)
			p.s.metrics.eventsDropped.WithLabelValues("retry_limit").Inc()
			return true
		}
		if ctx.Err() == nil {
			p.s.log.Warn("Unable to write event (will retry)", "reason", res.Event.Reason, "tries", tries, "err", err)
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(delay):
		}
		delay = min(2*delay, p.retryMax)
	}
}

// decode turns a stream message into the API event it stands for; bad or
// unpostable messages are logged and skipped, with the reason they are
// dropped for.
func (p *eventPoster) decode(msg jetstream.Msg) (*corev1.Event, string) {
	_, ev, err := schemas.Decode[schemas.Event](msg.Data())
	if err != nil {
		p.s.log.Error("Skipping event that does not decode", "subject", msg.Subject(), "err", err)
		return nil, "undecodable"
	}
	if ev.Time.Before(p.created.Add(-eventsMaxAge)) {
		return nil, "expired"
	}
	out, err := apiEvent(ev, p.s.nodeName)
	if err != nil {
		p.s.log.Error("Skipping event", "subject", msg.Subject(), "reason", ev.Reason, "err", err)
		return nil, "undecodable"
	}
	return out, ""
}

func (p *eventPoster) correlate(ev *corev1.Event) *record.EventCorrelateResult {
	if t := ev.LastTimestamp.Time; t.After(p.now) {
		p.now = t
	}
	res, err := p.corr.correlate(p.now, ev)
	if err != nil {
		p.s.log.Warn("Event correlation failed", "reason", ev.Reason, "err", err)
	}
	if res == nil || res.Skip || res.Event == nil {
		return nil
	}
	return res
}

// postOutcome is what one try of post came to.
type postOutcome int

const (
	// postDone: the API has the event (now, or from before a crash).
	postDone postOutcome = iota
	// postRejected: the API answered that it will never take the event.
	postRejected
	// postTransient: the API answered with an error that may pass.
	postTransient
	// postUnreachable: no answer from the API.
	postUnreachable
)

// post writes one correlated event as client-go's recordEvent does and
// says what came of it.
func (p *eventPoster) post(res *record.EventCorrelateResult) (postOutcome, error) {
	ev := res.Event
	var (
		created *corev1.Event
		err     error
	)
	update := ev.Count > 1
	if update {
		created, err = p.sink.Patch(ev, res.Patch)
	}
	// The event may have been removed since (it expired, or its
	// namespace went): make it again.
	if !update || recordutil.IsKeyNotFoundError(err) {
		e := *ev
		e.ResourceVersion = ""
		created, err = p.sink.Create(&e)
	}
	if err == nil {
		p.corr.updateState(created)
		p.s.metrics.eventsPosted.Inc()
		if testHookAfterPost != nil {
			testHookAfterPost(ev)
		}
		return postDone, nil
	}
	var (
		rce    *rest.RequestConstructionError
		status apierrors.APIStatus
	)
	switch {
	case apierrors.IsAlreadyExists(err):
		// Posted before a crash: the same event, nothing to do.
		p.corr.updateState(ev)
		p.s.metrics.eventsPosted.Inc()
		return postDone, nil
	case errors.As(err, &rce):
		p.s.log.Error("Unable to construct event (will not retry)", "reason", ev.Reason, "err", err)
		return postRejected, err
	case apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
		p.s.log.Debug("Server rejected event (will not retry)", "reason", ev.Reason, "object", ev.InvolvedObject.Name, "err", err)
		return postRejected, err
	case errors.As(err, &status):
		if code := status.Status().Code; code >= 500 || code == 429 {
			return postTransient, err
		}
		p.s.log.Error("Server rejected event (will not retry)", "reason", ev.Reason,
			"object", ev.InvolvedObject.Namespace+"/"+ev.InvolvedObject.Name, "err", err)
		return postRejected, err
	}
	var unexpected *apierrors.UnexpectedObjectError
	if errors.As(err, &unexpected) {
		return postTransient, err
	}
	return postUnreachable, err
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

// eventClock is the correlator's clock: the time of the latest event of
// the producer whose event is being correlated, so that aggregation and
// spam filtering depend only on the sequence of events and not on when
// they are handled.
type eventClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *eventClock) set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

func (c *eventClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *eventClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }
