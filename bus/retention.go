package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/utils/clock"
)

// A deleted key keeps its history (the bucket's History revisions and the
// delete marker) so that people and `nodelet explain` can still read what a
// gone pod was; the bus drops it once the delete is older than the
// retention. Without this a node that churns pods fills every bucket with
// the history of pods long gone (about 7,000 lifecycles fill the default
// 128 MiB), and a full bucket refuses writes.
const (
	// DefaultDeletedKeyRetention is how long a deleted key's history stays.
	DefaultDeletedKeyRetention = time.Hour
	// MinDeletedKeyRetention is the shortest retention allowed: it must be
	// well above mirrorResumeWithin, so that a mirror that resumes after
	// an outage can never miss a delete whose marker is gone.
	MinDeletedKeyRetention = 10 * time.Minute
	// maxSweepInterval bounds how long a delete outlives its retention.
	maxSweepInterval = 10 * time.Minute
	// fullShare is the share of a bucket's MaxBytes past which a sweep
	// drops the history of keys deleted MinDeletedKeyRetention ago, not
	// only of those past the retention: history is for people, and a full
	// bucket refuses the writes the node needs. The hour's history of
	// pods_desired is about 18 KiB per gone pod (issue 37's soak), so a
	// node past about 110 lifecycles a minute would otherwise fill 128Mi.
	fullShare = 0.5
)

// sweepInterval is how often the bus looks for expired deletes: a quarter
// of the retention, at most maxSweepInterval.
func sweepInterval(retention time.Duration) time.Duration {
	return min(retention/4, maxSweepInterval)
}

// sweeper drops the history of keys deleted longer ago than retention,
// every bucket of every store account.
type sweeper struct {
	clock     clock.WithTicker
	retention time.Duration
	store     map[string]jetstream.JetStream // by store account
	log       *slog.Logger

	// swept, when set (tests), hears each sweep's result.
	swept atomic.Pointer[func(dropped int, err error)]
}

// run sweeps at every tick of t until ctx ends. The first sweep waits a
// tick too: mirrors resuming after a bus restart catch up first.
func (sw *sweeper) run(ctx context.Context, t clock.Ticker) {
	log := sw.log
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		n, err := sw.sweep(ctx)
		if f := sw.swept.Load(); f != nil {
			(*f)(n, err)
		}
		switch {
		case err != nil && ctx.Err() == nil:
			log.Warn("Cannot drop the history of deleted keys", "dropped", n, "err", err)
		case n > 0:
			log.Info("Dropped the history of deleted keys", "keys", n, "retention", sw.retention)
		}
	}
}

// sweep drops the history of every key whose delete (or purge) marker is
// older than the retention, and returns how many keys it dropped; in a
// bucket more than fullShare full, of every key deleted longer ago than
// MinDeletedKeyRetention. Only the messages up to and including the marker
// go: a key written again after the sweep read it keeps its new value.
func (sw *sweeper) sweep(ctx context.Context) (int, error) {
	now := sw.clock.Now()
	before, beforeFull := now.Add(-sw.retention), now.Add(-MinDeletedKeyRetention)
	dropped := 0
	var errs []error
	for _, b := range Buckets {
		js := sw.store[storeAccountOf(streamOf(b.Name))]
		if js == nil {
			continue
		}
		cut := before
		if bytes, limit, err := bucketFill(ctx, js, b.Name); err != nil {
			errs = append(errs, fmt.Errorf("bucket %s: %w", b.Name, err))
			continue
		} else if limit > 0 && float64(bytes) > fullShare*float64(limit) && beforeFull.After(before) {
			cut = beforeFull
			sw.log.Warn("Bucket more than half full: dropping the history of keys deleted before the minimum retention, not the configured one",
				"bucket", b.Name, "bytes", bytes, "maxBytes", limit, "retention", MinDeletedKeyRetention, "configured", sw.retention)
		}
		n, err := sweepBucket(ctx, js, b.Name, cut)
		dropped += n
		if err != nil {
			errs = append(errs, fmt.Errorf("bucket %s: %w", b.Name, err))
		}
	}
	return dropped, errors.Join(errs...)
}

// bucketFill is what bucket's stream holds and its MaxBytes.
func bucketFill(ctx context.Context, js jetstream.JetStream, bucket string) (bytes uint64, limit int64, err error) {
	stream, err := js.Stream(ctx, streamOf(bucket)) // asks for the stream's info
	if err != nil {
		return 0, 0, err
	}
	info := stream.CachedInfo()
	return info.State.Bytes, info.Config.MaxBytes, nil
}

func sweepBucket(ctx context.Context, js jetstream.JetStream, bucket string, before time.Time) (int, error) {
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		return 0, err
	}
	w, err := kv.WatchAll(ctx, jetstream.MetaOnly())
	if err != nil {
		return 0, err
	}
	type marker struct {
		key string
		rev uint64
	}
	var expired []marker
	for e := range w.Updates() {
		if e == nil {
			break
		}
		if op := e.Operation(); (op == jetstream.KeyValueDelete || op == jetstream.KeyValuePurge) && e.Created().Before(before) {
			expired = append(expired, marker{e.Key(), e.Revision()})
		}
	}
	_ = w.Stop()
	if len(expired) == 0 {
		return 0, nil
	}
	stream, err := js.Stream(ctx, streamOf(bucket))
	if err != nil {
		return 0, err
	}
	for i, m := range expired {
		// The sequence bound keeps anything written after the marker.
		if err := stream.Purge(ctx, jetstream.WithPurgeSubject(kvSubjectPrefix+bucket+"."+m.key), jetstream.WithPurgeSequence(m.rev+1)); err != nil {
			return i, fmt.Errorf("key %s: %w", m.key, err)
		}
	}
	return len(expired), nil
}
