package bus

import (
	"bytes"
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/nodelet/nodelet/schemas"
)

// Writer is a bucket's single writer. It writes a key only when its data
// changed, comparing against what the bucket already holds, so a restarted
// daemon that computes the same state writes nothing.
type Writer struct {
	c      *Conn
	bucket string

	mu      sync.Mutex
	loaded  bool
	created time.Time
	last    map[string][]byte // key → envelope data last written
	revs    map[string]uint64
	onReset func() error
}

// NewWriter returns the writer of bucket. onReset (may be nil) is called
// when the bucket was recreated under the writer (the bus's store was
// wiped): the owner should put its whole state again, or mark it to be put.
// An error from onReset (a put the just-restarted bus refused) has it
// called again, after 100ms doubling to 5s (at once after a reconnect),
// until it succeeds.
func NewWriter(c *Conn, bucket string, onReset func() error) *Writer {
	w := &Writer{c: c, bucket: bucket, onReset: onReset}
	ch, _ := c.reconnects()
	go func() {
		for range ch {
			if !w.checkRecreated() || w.onReset == nil {
				continue
			}
			for delay := 100 * time.Millisecond; ; delay = min(2*delay, 5*time.Second) {
				err := w.onReset()
				if err == nil {
					break
				}
				w.c.Log.Warn("Cannot write state again, retrying", "bucket", w.bucket, "err", err)
				select {
				case <-time.After(delay):
				case _, ok := <-ch: // reconnected meanwhile: try at once
					if !ok {
						return
					}
				}
			}
		}
	}()
	return w
}

// checkRecreated reports whether the bucket's stream is not the one the
// writer loaded (the store was wiped), and forgets what it loaded if so.
func (w *Writer) checkRecreated() bool {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	created, err := streamCreated(ctx, w.c, w.bucket)
	if err != nil {
		return false
	}
	w.mu.Lock()
	changed := w.loaded && !created.Equal(w.created)
	if changed {
		w.loaded = false
	}
	w.mu.Unlock()
	if changed {
		w.c.Log.Warn("Bucket was recreated, writing state again", "bucket", w.bucket)
	}
	return changed
}

// load reads the bucket's current data. Callers hold w.mu.
func (w *Writer) load(ctx context.Context) error {
	if w.loaded {
		return nil
	}
	kv, err := w.c.KV(ctx, w.bucket)
	if err != nil {
		return err
	}
	created, err := streamCreated(ctx, w.c, w.bucket)
	if err != nil {
		return err
	}
	watcher, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return err
	}
	defer func() { _ = watcher.Stop() }()
	last := map[string][]byte{}
	revs := map[string]uint64{}
	for e := range watcher.Updates() {
		if e == nil {
			break
		}
		if env, err := schemas.Open(e.Value()); err == nil {
			last[e.Key()] = env.Data
			revs[e.Key()] = e.Revision()
		}
	}
	w.last, w.revs, w.created, w.loaded = last, revs, created, true
	return nil
}

// Put writes m under key unless the bucket already holds the same data.
// It returns whether it wrote, and the key's revision.
func (w *Writer) Put(ctx context.Context, key string, m schemas.Message) (bool, uint64, error) {
	data, err := json.Marshal(m)
	if err != nil {
		return false, 0, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.load(ctx); err != nil {
		return false, 0, err
	}
	if prev, ok := w.last[key]; ok && bytes.Equal(compact(prev), data) {
		return false, w.revs[key], nil
	}
	b, err := schemas.Encode(w.c.Component, m)
	if err != nil {
		return false, 0, err
	}
	rev, err := w.c.PutRaw(ctx, w.bucket, key, b)
	if err != nil {
		return false, 0, err
	}
	w.last[key] = data
	w.revs[key] = rev
	return true, rev, nil
}

// Delete removes key if the bucket holds it.
func (w *Writer) Delete(ctx context.Context, key string) (bool, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.load(ctx); err != nil {
		return false, err
	}
	if _, ok := w.last[key]; !ok {
		return false, nil
	}
	if err := w.c.Delete(ctx, w.bucket, key); err != nil {
		return false, err
	}
	delete(w.last, key)
	delete(w.revs, key)
	return true, nil
}

// Keys lists the keys the bucket holds.
func (w *Writer) Keys(ctx context.Context) ([]string, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.load(ctx); err != nil {
		return nil, err
	}
	keys := make([]string, 0, len(w.last))
	for k := range w.last {
		keys = append(keys, k)
	}
	return keys, nil
}

// Data returns the stored data of key, if any.
func (w *Writer) Data(ctx context.Context, key string) ([]byte, uint64, bool, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.load(ctx); err != nil {
		return nil, 0, false, err
	}
	d, ok := w.last[key]
	return d, w.revs[key], ok, nil
}

func compact(b []byte) []byte {
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return b
	}
	return buf.Bytes()
}
