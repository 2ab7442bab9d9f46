package bus

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/nodelet/nodelet/schemas"
)

// UpdateKind tells what a watch update is.
type UpdateKind int

const (
	// Put: Key has a new Value.
	Put UpdateKind = iota
	// Deleted: Key was deleted or purged.
	Deleted
	// Synced: every key's current value has been delivered; live updates
	// follow.
	Synced
	// Reset: the bucket was recreated (the bus's store was wiped) or the
	// watch had to start over; forget what was seen, a fresh initial load
	// and Synced follow.
	Reset
)

func (k UpdateKind) String() string {
	return [...]string{"put", "deleted", "synced", "reset"}[k]
}

// Update is one change seen by Watch.
type Update[T any] struct {
	Kind     UpdateKind
	Key      string
	Value    *T
	Envelope *schemas.Envelope
	Revision uint64
	// Created is when the bucket's stream the update comes from was made:
	// it changes when the bus's store is wiped, and tells which store a
	// value came from (StreamCreated says which is current).
	Created time.Time
}

// Watch calls fn, from one goroutine and in order, with the current value of
// every key of bucket matching filter (">" for all), then Synced, then each
// change. After a reconnect it resumes where it stopped; when the bucket was
// recreated it sends Reset and loads again. A value that does not decode is
// logged with its subject and skipped. Watch returns when ctx is done.
func Watch[T any, PT interface {
	*T
	schemas.Message
}](ctx context.Context, c *Conn, bucket, filter string, fn func(Update[T])) error {
	if filter == "" {
		filter = ">"
	}
	reconnected, stop := c.reconnects()
	defer stop()
	var (
		lastRev  uint64
		created  time.Time
		synced   bool
		resuming bool
	)
	for {
		kv, err := c.KV(ctx, bucket)
		if err != nil {
			return err
		}
		info, err := streamCreated(ctx, c, bucket)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			c.Log.Warn("Watch: stream info", "bucket", bucket, "err", err)
			sleep(ctx, 500*time.Millisecond)
			continue
		}
		if !created.IsZero() && !info.Equal(created) {
			// The store was wiped: everything we saw is gone.
			c.Log.Warn("Bucket was recreated, reloading", "bucket", bucket)
			fn(Update[T]{Kind: Reset, Created: info})
			lastRev, synced, resuming = 0, false, false
		}
		created = info
		var opts []jetstream.WatchOpt
		if resuming && lastRev > 0 {
			opts = append(opts, jetstream.IncludeHistory(), jetstream.ResumeFromRevision(lastRev+1))
		}
		wctx, cancel := context.WithCancel(ctx)
		w, err := kv.Watch(wctx, filter, opts...)
		if err != nil {
			cancel()
			if ctx.Err() != nil {
				return ctx.Err()
			}
			c.Log.Warn("Watch failed, retrying", "bucket", bucket, "err", err)
			sleep(ctx, 500*time.Millisecond)
			continue
		}
		if resuming && lastRev > 0 {
			// A resumed watch delivers no initial-load marker of interest.
			synced = true
		}
		restart := func() bool {
			defer cancel()
			defer func() { _ = w.Stop() }()
			for {
				select {
				case <-ctx.Done():
					return false
				case <-reconnected:
					return true
				case e, ok := <-w.Updates():
					if !ok {
						return true
					}
					if e == nil {
						if !synced {
							synced = true
							fn(Update[T]{Kind: Synced, Created: created})
						}
						continue
					}
					if e.Revision() <= lastRev {
						continue
					}
					lastRev = e.Revision()
					switch e.Operation() {
					case jetstream.KeyValueDelete, jetstream.KeyValuePurge:
						fn(Update[T]{Kind: Deleted, Key: e.Key(), Revision: e.Revision(), Created: created})
					default:
						env, v, err := schemas.Decode[T, PT](e.Value())
						if err != nil {
							c.Log.Error("Skipping message that does not decode",
								"subject", KVSubject(bucket, e.Key()), "revision", e.Revision(), "err", err)
							continue
						}
						fn(Update[T]{Kind: Put, Key: e.Key(), Value: v, Envelope: env, Revision: e.Revision(), Created: created})
					}
				}
			}
		}()
		if !restart {
			return ctx.Err()
		}
		resuming = synced
	}
}

// StreamCreated is when bucket's stream was made: a value whose
// Update.Created differs came from a store that has since been wiped.
func StreamCreated(ctx context.Context, c *Conn, bucket string) (time.Time, error) {
	return streamCreated(ctx, c, bucket)
}

func streamCreated(ctx context.Context, c *Conn, bucket string) (time.Time, error) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s, err := c.JS.Stream(cctx, streamOf(bucket))
	if err != nil {
		return time.Time{}, err
	}
	if s.CachedInfo() == nil {
		return time.Time{}, errors.New("no stream info")
	}
	return s.CachedInfo().Created, nil
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
