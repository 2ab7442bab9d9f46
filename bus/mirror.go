package bus

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/schemas"
)

// Defaults of a Mirror's outage policy (see "Mirrors" in the package doc).
const (
	// DefaultMirrorGrace is how long a watch may be lost before the outage
	// is reported: a reconnect after a bus restart re-establishes it well
	// within that, and is not worth an unready heartbeat.
	DefaultMirrorGrace = 2 * time.Second
	// mirrorBackoffStart and mirrorBackoffMax bound the wait between two
	// failed attempts to establish the watch (doubling in between).
	mirrorBackoffStart = 100 * time.Millisecond
	mirrorBackoffMax   = 5 * time.Second
	// mirrorAttemptTimeout bounds one attempt (bind, stream info, watch).
	mirrorAttemptTimeout = 5 * time.Second
	// mirrorShortLived: a watch that ends sooner than this after it was
	// established counts as a failed attempt (no immediate retry), so a
	// watch the bus keeps closing cannot spin.
	mirrorShortLived = time.Second
	// mirrorResumeWithin bounds the outage a watch resumes after: the bus
	// drops a deleted key's history, delete marker included, after
	// bus.deletedKeyRetention (at least MinDeletedKeyRetention), so a
	// watch lost longer than this reloads instead of resuming and missing
	// such a delete.
	mirrorResumeWithin = 5 * time.Minute
)

// Mirror follows one bucket (the keys matching a filter) and hands every
// change, decoded with the schema type T, to one callback: the in-memory
// copy each daemon keeps of another daemon's bucket is the state that
// callback builds. The callback is called from one goroutine, in order:
// the current value of every key (Put), then Synced, then each change (Put,
// Deleted); Reset when the bucket's stream was recreated (the bus's store
// was wiped) or the watch was lost past mirrorResumeWithin, followed by a
// fresh load and Synced again. A value that does
// not decode is logged with its subject and skipped.
//
// Run never gives up while its context lives: a watch that is lost (the bus
// restarted or closed it, the connection dropped, the stream vanished) is
// re-established with back-off, resuming after the last revision seen, and
// an outage longer than Grace is reported through the connection
// (Conn.Outages), which the daemon frame turns into an unready heartbeat and
// so a failing /healthz. The fields may be set before Run.
type Mirror[T any, PT interface {
	*T
	schemas.Message
}] struct {
	// Clock times back-off and Grace. Default: the real clock.
	Clock clock.Clock
	// Grace is how long the watch may be lost before the outage is
	// reported. Default: DefaultMirrorGrace.
	Grace time.Duration

	c      *Conn
	bucket string
	filter string
	name   string
	fn     func(Update[T])

	// What the watch saw, to resume and to notice a recreated stream.
	lastRev  uint64
	created  time.Time
	synced   atomic.Bool
	resuming bool

	// The current outage, if any.
	downSince time.Time
	downErr   error
	reported  bool

	// attempted, when set (tests), hears each failed attempt's error and
	// the back-off before the next.
	attempted func(err error, backoff time.Duration)
}

// NewMirror returns a mirror of the keys of bucket matching filter (">" or
// "" for all) that calls fn with each update. Run starts it.
func NewMirror[T any, PT interface {
	*T
	schemas.Message
}](c *Conn, bucket, filter string, fn func(Update[T])) *Mirror[T, PT] {
	if filter == "" {
		filter = ">"
	}
	name := bucket
	if filter != ">" {
		name += " (" + filter + ")"
	}
	return &Mirror[T, PT]{c: c, bucket: bucket, filter: filter, name: name, fn: fn}
}

// Synced says whether the initial load is complete (and no Reset since).
func (m *Mirror[T, PT]) Synced() bool { return m.synced.Load() }

// Run follows the bucket until ctx is done and returns ctx's error; it
// returns nothing else (see the type's comment for what it does instead).
func (m *Mirror[T, PT]) Run(ctx context.Context) error {
	if m.Clock == nil {
		m.Clock = clock.RealClock{}
	}
	if m.Grace <= 0 {
		m.Grace = DefaultMirrorGrace
	}
	reconnected, stopR := m.c.reconnects()
	defer stopR()
	disconnected, stopD := m.c.disconnects()
	defer stopD()
	// A mirror that stops has no outage to report any more.
	defer m.c.setOutage(m, "")

	delay := time.Duration(0)
	for {
		began, err := m.session(ctx, reconnected, disconnected)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		m.lost(err)
		switch {
		case !began.IsZero() && m.Clock.Since(began) >= mirrorShortLived:
			// A watch that ran is re-established at once.
			delay = 0
		case delay == 0:
			delay = mirrorBackoffStart
		default:
			delay = min(2*delay, mirrorBackoffMax)
		}
		if began.IsZero() {
			m.c.Log.Warn("Bus watch not established, retrying", "bucket", m.bucket, "filter", m.filter, "in", delay, "err", err)
			if m.attempted != nil {
				m.attempted(err, delay)
			}
		} else {
			m.c.Log.Info("Bus watch lost, re-establishing", "bucket", m.bucket, "filter", m.filter, "err", err)
		}
		if !m.wait(ctx, delay) {
			return ctx.Err()
		}
	}
}

// wait waits d (reporting the outage when Grace passes meanwhile); false
// when ctx ended.
func (m *Mirror[T, PT]) wait(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := m.Clock.NewTimer(d)
	defer t.Stop()
	g := m.graceTimer()
	defer func() { stopTimer(g) }()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-t.C():
			return true
		case <-timerC(g):
			m.report()
			g = nil
		}
	}
}

// errDisconnected is the cause of an outage while the bus connection is
// down.
var errDisconnected = errors.New("disconnected from the bus")

// lost starts an outage (or updates its cause).
func (m *Mirror[T, PT]) lost(err error) {
	if err == nil {
		err = errors.New("watch lost")
	}
	if m.c.NC != nil && !m.c.NC.IsConnected() && err.Error() != errDisconnected.Error() {
		// What failed while the connection is down (a stream info or a
		// watch timing out) is a symptom: name the cause first.
		err = fmt.Errorf("%w: %w", errDisconnected, err)
	}
	if m.downSince.IsZero() {
		m.downSince = m.Clock.Now()
	}
	changed := m.downErr == nil || m.downErr.Error() != err.Error()
	m.downErr = err
	if m.reported && changed {
		m.report()
	} else if !m.reported && m.Clock.Since(m.downSince) >= m.Grace {
		m.report()
	}
}

// live ends the outage: the watch is established.
func (m *Mirror[T, PT]) live() {
	if m.reported {
		m.c.Log.Info("Bus watch re-established", "bucket", m.bucket, "filter", m.filter,
			"outage", m.Clock.Since(m.downSince).Round(time.Millisecond))
	}
	m.downSince, m.downErr, m.reported = time.Time{}, nil, false
	m.c.setOutage(m, "")
}

func (m *Mirror[T, PT]) report() {
	m.reported = true
	m.c.setOutage(m, fmt.Sprintf("bus watch of %s lost since %s, re-establishing: %v",
		m.name, m.downSince.UTC().Format(time.RFC3339), m.downErr))
}

// graceTimer fires when an unreported outage has lasted Grace; nil when
// there is none.
func (m *Mirror[T, PT]) graceTimer() clock.Timer {
	if m.downSince.IsZero() || m.reported {
		return nil
	}
	return m.Clock.NewTimer(m.Grace - m.Clock.Since(m.downSince))
}

func timerC(t clock.Timer) <-chan time.Time {
	if t == nil {
		return nil
	}
	return t.C()
}

func stopTimer(t clock.Timer) {
	if t != nil {
		t.Stop()
	}
}

// session establishes one watch and follows it until it is lost. began is
// when it was established (zero when it was not); err says why it ended.
func (m *Mirror[T, PT]) session(ctx context.Context, reconnected, disconnected <-chan struct{}) (began time.Time, err error) {
	actx, cancel := context.WithTimeout(ctx, mirrorAttemptTimeout)
	defer cancel()
	kv, err := m.c.kvOnce(actx, m.bucket)
	if err != nil {
		return time.Time{}, err
	}
	info, err := streamCreated(actx, m.c, m.bucket)
	if err != nil {
		return time.Time{}, fmt.Errorf("stream info of %s: %w", m.bucket, err)
	}
	if !m.created.IsZero() && !info.Equal(m.created) {
		// The store was wiped: everything we saw is gone.
		m.c.Log.Warn("Bucket was recreated, reloading", "bucket", m.bucket)
		m.synced.Store(false)
		m.fn(Update[T]{Kind: Reset, Created: info})
		m.lastRev, m.resuming = 0, false
	}
	m.created = info
	var opts []jetstream.WatchOpt
	resume := m.resuming && m.lastRev > 0
	if resume && !m.downSince.IsZero() && m.Clock.Since(m.downSince) > mirrorResumeWithin {
		m.c.Log.Info("Bus watch lost too long to resume, reloading", "bucket", m.bucket, "filter", m.filter,
			"outage", m.Clock.Since(m.downSince).Round(time.Second))
		m.synced.Store(false)
		m.fn(Update[T]{Kind: Reset, Created: info})
		m.lastRev, m.resuming, resume = 0, false, false
	}
	if resume {
		opts = append(opts, jetstream.IncludeHistory(), jetstream.ResumeFromRevision(m.lastRev+1))
	}
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	w, err := kv.Watch(wctx, m.filter, opts...)
	if err != nil {
		return time.Time{}, fmt.Errorf("watch %s: %w", m.bucket, err)
	}
	defer func() { _ = w.Stop() }()
	began = m.Clock.Now()
	m.live()
	// A resumed watch delivers no initial-load marker of interest.
	defer func() { m.resuming = m.synced.Load() }()
	var g clock.Timer // the grace of a disconnect
	defer func() { stopTimer(g) }()
	for {
		select {
		case <-ctx.Done():
			return began, ctx.Err()
		case <-reconnected:
			return began, errors.New("reconnected to the bus")
		case <-disconnected:
			// The watch resumes after the reconnect; until then it is
			// down. A reconnect that already happened is on its way.
			if !m.c.NC.IsConnected() {
				m.lost(errDisconnected)
				if g == nil {
					g = m.graceTimer()
				}
			}
		case <-timerC(g):
			m.report()
			g = nil
		case e, ok := <-w.Updates():
			if !ok {
				return began, errors.New("the bus closed the watch")
			}
			m.deliver(e)
		}
	}
}

func (m *Mirror[T, PT]) deliver(e jetstream.KeyValueEntry) {
	if e == nil {
		if !m.synced.Load() {
			m.synced.Store(true)
			m.fn(Update[T]{Kind: Synced, Created: m.created})
		}
		return
	}
	if e.Revision() <= m.lastRev {
		return
	}
	m.lastRev = e.Revision()
	switch e.Operation() {
	case jetstream.KeyValueDelete, jetstream.KeyValuePurge:
		m.fn(Update[T]{Kind: Deleted, Key: e.Key(), Revision: e.Revision(), Created: m.created})
	default:
		env, v, err := schemas.Decode[T, PT](e.Value())
		if err != nil {
			m.c.Log.Error("Skipping message that does not decode",
				"subject", KVSubject(m.bucket, e.Key()), "revision", e.Revision(), "err", err)
			return
		}
		m.fn(Update[T]{Kind: Put, Key: e.Key(), Value: v, Envelope: env, Revision: e.Revision(), Created: m.created})
	}
}

// Runner is anything with a Run like Mirror's.
type Runner interface {
	Run(ctx context.Context) error
}

// RunAll runs every mirror until ctx is done and waits for them all.
func RunAll(ctx context.Context, rs ...Runner) {
	done := make(chan struct{}, len(rs))
	for _, r := range rs {
		go func() {
			defer func() { done <- struct{}{} }()
			_ = r.Run(ctx)
		}()
	}
	for range rs {
		<-done
	}
}

// Apply applies a Put, Deleted or Reset to m, the copy of a bucket by key
// that a mirror's callback keeps, and returns the keys it changed (every
// key m held, for a Reset). Synced changes nothing.
func Apply[T any](m map[string]*T, u Update[T]) []string {
	switch u.Kind {
	case Put:
		m[u.Key] = u.Value
		return []string{u.Key}
	case Deleted:
		delete(m, u.Key)
		return []string{u.Key}
	case Reset:
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		clear(m)
		return keys
	}
	return nil
}
