package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/nodelet/nodelet/schemas"
)

// ConnectOptions say who connects and where.
type ConnectOptions struct {
	// URL of the bus, e.g. nats://127.0.0.1:4250.
	URL string
	// Component is the credential to use (sources, runtime, tap, ...).
	Component string
	// StateDir locates the credential: <StateDir>/credentials/<component>.nk.
	StateDir string
	Log      *slog.Logger
	// NoRetry makes Connect fail at once when the bus is not reachable
	// instead of retrying in the background (for one-shot tools).
	NoRetry bool
}

// Conn is one component's connection to the bus. It reconnects forever;
// every disconnect and reconnect is logged.
type Conn struct {
	NC        *nats.Conn
	JS        jetstream.JetStream
	Component string
	Log       *slog.Logger

	mu          sync.Mutex
	kvs         map[string]jetstream.KeyValue
	reconnected []chan struct{}
	// disconnected hears every lost connection (Mirror).
	disconnected []chan struct{}
	// outages are the mirrors' watches lost longer than their grace, by
	// mirror; health hears every change (the daemon frame's heartbeats).
	outages map[any]string
	health  chan struct{}
	events  emitter
}

// URLFor turns bus.listen into a client URL.
func URLFor(listen string) string { return "nats://" + listen }

// Connect connects as o.Component with its NKey credential.
func Connect(o ConnectOptions) (*Conn, error) {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	log := o.Log.With("bus", o.URL)
	cred := SeedPath(o.StateDir, o.Component)
	seed, err := nats.NkeyOptionFromSeed(cred)
	if err != nil {
		return nil, fmt.Errorf("bus credential %s: %w", cred, err)
	}
	c := &Conn{Component: o.Component, Log: o.Log, kvs: map[string]jetstream.KeyValue{},
		outages: map[any]string{}, health: make(chan struct{}, 1)}
	opts := []nats.Option{
		seed,
		nats.Name("nodelet-" + o.Component),
		nats.CustomInboxPrefix(InboxPrefix(o.Component)),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.ReconnectJitter(100*time.Millisecond, 100*time.Millisecond),
		nats.PingInterval(5 * time.Second),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			log.Warn("Disconnected from bus", "err", err)
			c.notify(&c.disconnected)
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info("Reconnected to bus", "url", nc.ConnectedUrl())
			c.notify(&c.reconnected)
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			if sub != nil {
				log.Error("Bus error", "subject", sub.Subject, "err", err)
				return
			}
			log.Error("Bus error", "err", err)
		}),
	}
	if !o.NoRetry {
		opts = append(opts, nats.RetryOnFailedConnect(true),
			nats.ConnectHandler(func(nc *nats.Conn) { log.Info("Connected to bus") }))
	}
	nc, err := nats.Connect(o.URL, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to bus %s as %s: %w", o.URL, o.Component, err)
	}
	c.NC = nc
	if c.JS, err = jetstream.New(nc); err != nil {
		nc.Close()
		return nil, err
	}
	return c, nil
}

func (c *Conn) notify(list *[]chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, ch := range *list {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// reconnects returns a channel that receives after every reconnect.
func (c *Conn) reconnects() (<-chan struct{}, func()) { return c.listen(&c.reconnected) }

// disconnects returns a channel that receives after every disconnect.
func (c *Conn) disconnects() (<-chan struct{}, func()) { return c.listen(&c.disconnected) }

func (c *Conn) listen(list *[]chan struct{}) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	c.mu.Lock()
	*list = append(*list, ch)
	c.mu.Unlock()
	return ch, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		for i, x := range *list {
			if x == ch {
				*list = append((*list)[:i], (*list)[i+1:]...)
				return
			}
		}
	}
}

// setOutage records (msg != "") or clears the outage of mirror m.
func (c *Conn) setOutage(m any, msg string) {
	c.mu.Lock()
	old, had := c.outages[m]
	if msg == "" {
		delete(c.outages, m)
	} else {
		c.outages[m] = msg
	}
	c.mu.Unlock()
	if (msg == "" && had) || (msg != "" && msg != old) {
		select {
		case c.health <- struct{}{}:
		default:
		}
	}
}

// Outages says, one sorted line each, which mirrors on this connection have
// lost their watch for longer than their grace; none when all are live.
func (c *Conn) Outages() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, 0, len(c.outages))
	for _, msg := range c.outages {
		out = append(out, msg)
	}
	slices.Sort(out)
	return out
}

// OutagesChanged receives after Outages changed (one listener: the daemon
// frame's heartbeats).
func (c *Conn) OutagesChanged() <-chan struct{} { return c.health }

// Close drains the connection: pending publishes are flushed first.
func (c *Conn) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	if err := c.FlushEvents(ctx); err != nil {
		c.Log.Warn("Closing with events not stored", "err", err)
	}
	cancel()
	if err := c.NC.Drain(); err != nil {
		c.NC.Close()
	}
	deadline := time.Now().Add(5 * time.Second)
	for !c.NC.IsClosed() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	c.NC.Close()
}

// KV binds bucket, waiting (until ctx is done) while the bus is not there.
func (c *Conn) KV(ctx context.Context, bucket string) (jetstream.KeyValue, error) {
	c.mu.Lock()
	kv, ok := c.kvs[bucket]
	c.mu.Unlock()
	if ok {
		return kv, nil
	}
	delay := 50 * time.Millisecond
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		kv, err := c.JS.KeyValue(cctx, bucket)
		cancel()
		if err == nil {
			c.mu.Lock()
			c.kvs[bucket] = kv
			c.mu.Unlock()
			return kv, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("bind bucket %s: %w", bucket, err)
		}
		c.Log.Debug("Waiting for bucket", "bucket", bucket, "err", err)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(delay):
		}
		if delay < time.Second {
			delay *= 2
		}
	}
}

// kvOnce binds bucket with one try (a Mirror retries itself, with
// back-off and outage reporting).
func (c *Conn) kvOnce(ctx context.Context, bucket string) (jetstream.KeyValue, error) {
	c.mu.Lock()
	kv, ok := c.kvs[bucket]
	c.mu.Unlock()
	if ok {
		return kv, nil
	}
	kv, err := c.JS.KeyValue(ctx, bucket)
	if err != nil {
		return nil, fmt.Errorf("bind bucket %s: %w", bucket, err)
	}
	c.mu.Lock()
	c.kvs[bucket] = kv
	c.mu.Unlock()
	return kv, nil
}

// Put encodes m in an envelope from this component and stores it.
func (c *Conn) Put(ctx context.Context, bucket, key string, m schemas.Message) (uint64, error) {
	b, err := schemas.Encode(c.Component, m)
	if err != nil {
		return 0, err
	}
	return c.PutRaw(ctx, bucket, key, b)
}

// PutRaw stores already-encoded bytes.
func (c *Conn) PutRaw(ctx context.Context, bucket, key string, b []byte) (uint64, error) {
	if err := ValidKey(key); err != nil {
		return 0, fmt.Errorf("put %s/%s: key %w: %w", bucket, key, err, jetstream.ErrInvalidKey)
	}
	kv, err := c.KV(ctx, bucket)
	if err != nil {
		return 0, err
	}
	rev, err := kv.Put(ctx, key, b)
	if err != nil {
		return 0, fmt.Errorf("put %s/%s: %w", bucket, key, err)
	}
	return rev, nil
}

// PutAckTimeout bounds how long PutRawMany waits for the bus to
// acknowledge its puts.
var PutAckTimeout = 15 * time.Second

// ErrNoAck is a put the bus did not acknowledge within PutAckTimeout.
var ErrNoAck = errors.New("no acknowledgement from the bus")

// PutRawMany is PutRaw for several keys of bucket: the puts are published
// at once, in order, and then their acknowledgements awaited. revs and
// errs are in the order of keys.
func (c *Conn) PutRawMany(ctx context.Context, bucket string, keys []string, bodies [][]byte) (revs []uint64, errs []error) {
	revs, errs = make([]uint64, len(keys)), make([]error, len(keys))
	if len(keys) == 0 {
		return revs, errs
	}
	if _, err := c.KV(ctx, bucket); err != nil {
		for i := range errs {
			errs[i] = err
		}
		return revs, errs
	}
	futures := make([]jetstream.PubAckFuture, len(keys))
	for i, key := range keys {
		if err := ValidKey(key); err != nil {
			errs[i] = fmt.Errorf("put %s/%s: key %w: %w", bucket, key, err, jetstream.ErrInvalidKey)
			continue
		}
		f, err := c.JS.PublishAsync(KVSubject(bucket, key), bodies[i])
		if err != nil {
			errs[i] = fmt.Errorf("put %s/%s: %w", bucket, key, err)
			continue
		}
		futures[i] = f
	}
	// An acknowledgement may never come: nats-server answers nothing to a
	// publish its store failed to write (the filesystem full), so without
	// a deadline the writer would wait for good, saying nothing. kv.Put
	// (PutRaw) has jetstream's default timeout for the same reason.
	timeout := time.NewTimer(PutAckTimeout)
	defer timeout.Stop()
	for i, f := range futures {
		if f == nil {
			continue
		}
		select {
		case ack := <-f.Ok():
			revs[i] = ack.Sequence
		case err := <-f.Err():
			errs[i] = fmt.Errorf("put %s/%s: %w", bucket, keys[i], err)
		case <-ctx.Done():
			errs[i] = fmt.Errorf("put %s/%s: %w", bucket, keys[i], ctx.Err())
		case <-timeout.C:
			for j := i; j < len(futures); j++ {
				if futures[j] == nil {
					continue
				}
				select {
				case ack := <-futures[j].Ok():
					revs[j] = ack.Sequence
				case err := <-futures[j].Err():
					errs[j] = fmt.Errorf("put %s/%s: %w", bucket, keys[j], err)
				default:
					errs[j] = fmt.Errorf("put %s/%s: %w after %s (is the bus's store full? see nodelet-bus's log)", bucket, keys[j], ErrNoAck, PutAckTimeout)
				}
			}
			return revs, errs
		}
	}
	return revs, errs
}

// Delete removes key from bucket; a missing key is not an error.
func (c *Conn) Delete(ctx context.Context, bucket, key string) error {
	kv, err := c.KV(ctx, bucket)
	if err != nil {
		return err
	}
	if err := kv.Delete(ctx, key); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("delete %s/%s: %w", bucket, key, err)
	}
	return nil
}

// Get reads key from bucket and decodes it. A missing key gives (nil, 0, nil).
func Get[T any, PT interface {
	*T
	schemas.Message
}](ctx context.Context, c *Conn, bucket, key string) (*T, uint64, error) {
	kv, err := c.KV(ctx, bucket)
	if err != nil {
		return nil, 0, err
	}
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("get %s/%s: %w", bucket, key, err)
	}
	_, v, err := schemas.Decode[T, PT](e.Value())
	if err != nil {
		return nil, e.Revision(), fmt.Errorf("%s/%s: %w", bucket, key, err)
	}
	return v, e.Revision(), nil
}

// PublishHeartbeat publishes hb on nodelet.v1.health.<component>.
func (c *Conn) PublishHeartbeat(hb schemas.Heartbeat) error {
	b, err := schemas.Encode(c.Component, hb)
	if err != nil {
		return err
	}
	return c.NC.Publish(HealthSubject(c.Component), b)
}
