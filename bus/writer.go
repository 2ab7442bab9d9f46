package bus

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
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
// After each reconnect the writer asks which stream the bucket has until
// the bus answers, and an error from onReset (a put the just-restarted bus
// refused) has it called again, until it succeeds: both after 100ms
// doubling to 5s, and at once after another reconnect.
func NewWriter(c *Conn, bucket string, onReset func() error) *Writer {
	w := &Writer{c: c, bucket: bucket, onReset: onReset}
	ch, _ := c.reconnects()
	go func() {
		for range ch {
			var changed bool
			w.retry(ch, slog.LevelDebug, "Cannot check the bucket after a reconnect", func() (err error) {
				changed, err = w.checkRecreated()
				return err
			})
			if changed && w.onReset != nil {
				w.retry(ch, slog.LevelWarn, "Cannot write state again, retrying", w.onReset)
			}
		}
	}()
	return w
}

// retry calls f until it succeeds or the connection is closed for good,
// logging each failure at level.
func (w *Writer) retry(reconnected <-chan struct{}, level slog.Level, msg string, f func() error) {
	for delay := 100 * time.Millisecond; ; delay = min(2*delay, 5*time.Second) {
		err := f()
		if err == nil || w.c.NC.IsClosed() {
			return
		}
		w.c.Log.Log(context.Background(), level, msg, "bucket", w.bucket, "err", err)
		select {
		case <-time.After(delay):
		case <-reconnected:
		}
	}
}

// checkRecreated reports whether the bucket's stream is not the one the
// writer loaded (the store was wiped), and forgets what it loaded if so.
func (w *Writer) checkRecreated() (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	created, err := streamCreated(ctx, w.c, w.bucket)
	if err != nil {
		return false, err
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
	return changed, nil
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
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.load(ctx); err != nil {
		return false, 0, err
	}
	data, body, rev, err := w.prepare(key, m)
	if err != nil || body == nil {
		return false, rev, err
	}
	rev, err = w.c.PutRaw(ctx, w.bucket, key, body)
	if err != nil {
		return false, 0, err
	}
	w.last[key] = data
	w.revs[key] = rev
	return true, rev, nil
}

// prepare is what a put of m under key needs: its data and envelope, or,
// when the bucket already holds the same data, no envelope and the key's
// revision. Callers hold w.mu with the bucket loaded.
func (w *Writer) prepare(key string, m schemas.Message) (data, body []byte, rev uint64, err error) {
	if data, err = json.Marshal(m); err != nil {
		return nil, nil, 0, err
	}
	if prev, ok := w.last[key]; ok && bytes.Equal(compact(prev), data) {
		return data, nil, w.revs[key], nil
	}
	body, err = schemas.Encode(w.c.Component, m)
	return data, body, 0, err
}

// Entry is one key and message of a PutMany.
type Entry struct {
	Key string
	Msg schemas.Message
}

// PutResult is what PutMany did with one entry, as Put would say it.
type PutResult struct {
	Wrote bool
	Rev   uint64
	Err   error
}

// PutMany is Put for several keys: what changed is published in order
// without waiting, and the acknowledgements are awaited together, so a
// burst costs one round trip to the bus rather than one per key. Results
// are in the order of entries. A failed entry leaves the others written.
func (w *Writer) PutMany(ctx context.Context, entries []Entry) []PutResult {
	res := make([]PutResult, len(entries))
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.load(ctx); err != nil {
		for i := range res {
			res[i].Err = err
		}
		return res
	}
	var keys []string
	var bodies [][]byte
	var datas [][]byte
	var idx []int
	for i, e := range entries {
		data, b, rev, err := w.prepare(e.Key, e.Msg)
		if err != nil || b == nil {
			res[i] = PutResult{Rev: rev, Err: err}
			continue
		}
		keys, bodies, datas, idx = append(keys, e.Key), append(bodies, b), append(datas, data), append(idx, i)
	}
	revs, errs := w.c.PutRawMany(ctx, w.bucket, keys, bodies)
	for j, i := range idx {
		if errs[j] != nil {
			res[i].Err = errs[j]
			continue
		}
		w.last[keys[j]], w.revs[keys[j]] = datas[j], revs[j]
		res[i] = PutResult{Wrote: true, Rev: revs[j]}
	}
	return res
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
