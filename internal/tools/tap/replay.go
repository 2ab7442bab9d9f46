package tap

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/nodelet/nodelet/bus"
)

// Stored is one message read back from a stream: the events stream or a
// bucket's (whose subjects are $KV.<bucket>.<key>).
type Stored struct {
	Msg *nats.Msg
	// Time is when the bus stored it.
	Time time.Time
	// Stream and Seq place it in its stream.
	Stream string
	Seq    uint64
}

// BucketStream is the JetStream stream behind a KV bucket.
func BucketStream(bucket string) string { return "KV_" + bucket }

// ReadStream calls fn with every message of stream matching filters (all
// when empty) stored at or after since (all when zero), oldest first, and
// returns once it has caught up. It only reads: an ephemeral consumer
// without acks, deleted at the end, which the tap credential may create.
func ReadStream(ctx context.Context, c *bus.Conn, stream string, filters []string, since time.Time, fn func(Stored)) error {
	cfg := jetstream.ConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy, FilterSubjects: filters}
	if len(filters) == 1 {
		cfg.FilterSubject, cfg.FilterSubjects = filters[0], nil
	}
	if !since.IsZero() {
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &since
	}
	return readConsumer(ctx, c, stream, cfg, fn)
}

// ReadStreamFrom is ReadStream from stream sequence seq on, unfiltered.
func ReadStreamFrom(ctx context.Context, c *bus.Conn, stream string, seq uint64, fn func(Stored)) error {
	return readConsumer(ctx, c, stream, jetstream.ConsumerConfig{DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: seq}, fn)
}

func readConsumer(ctx context.Context, c *bus.Conn, stream string, cfg jetstream.ConsumerConfig, fn func(Stored)) error {
	cfg.AckPolicy = jetstream.AckNonePolicy
	cfg.InactiveThreshold = time.Minute
	cfg.MemoryStorage = true
	cons, err := c.JS.CreateConsumer(ctx, stream, cfg)
	if err != nil {
		return fmt.Errorf("read stream %s: %w", stream, err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.JS.DeleteConsumer(dctx, stream, cons.CachedInfo().Name)
	}()
	pending := cons.CachedInfo().NumPending
	for pending > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		batch, err := cons.Fetch(int(min(pending, 512)), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return fmt.Errorf("read stream %s: %w", stream, err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			md, err := m.Metadata()
			if err != nil {
				continue
			}
			pending = md.NumPending
			fn(Stored{
				Msg:    &nats.Msg{Subject: m.Subject(), Header: m.Headers(), Data: m.Data()},
				Time:   md.Timestamp.UTC(),
				Stream: stream,
				Seq:    md.Sequence.Stream,
			})
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && !errors.Is(err, nats.ErrTimeout) {
			return fmt.Errorf("read stream %s: %w", stream, err)
		}
		if n == 0 {
			return fmt.Errorf("read stream %s: %d messages pending but none delivered", stream, pending)
		}
	}
	return nil
}

// ReadEvents calls fn with every stored event about object (a pod UID,
// "node", or "*" for every object) of every producer, oldest first: each
// producer's events are a stream of their own.
func ReadEvents(ctx context.Context, c *bus.Conn, object string, since time.Time, fn func(Stored)) error {
	var all []Stored
	for _, p := range bus.EventProducers {
		err := ReadStream(ctx, c, bus.EventsStream(p), []string{bus.EventSubject(p, object)}, since, func(s Stored) {
			all = append(all, s)
		})
		if err != nil {
			return err
		}
	}
	sortStored(all)
	for _, s := range all {
		fn(s)
	}
	return nil
}

// replayStreams lists what --since reads back: every producer's events
// stream and every bucket, each with its subjects.
func replayStreams() map[string]string {
	s := map[string]string{}
	for _, p := range bus.EventProducers {
		s[bus.EventsStream(p)] = bus.EventsSubjectOf(p)
	}
	for _, b := range bus.Buckets {
		s[BucketStream(b.Name)] = bus.KVSubject(b.Name, ">")
	}
	return s
}

// replay reads back everything stored since `since` on the streams the
// subject filter can match, in the order it was stored.
func replay(ctx context.Context, c *bus.Conn, subject string, since time.Time) ([]Stored, error) {
	var all []Stored
	for stream, subjects := range replayStreams() {
		if subject != "" && !server.SubjectsCollide(subject, subjects) {
			continue
		}
		err := ReadStream(ctx, c, stream, nil, since, func(s Stored) {
			if subject == "" || server.SubjectMatchesFilter(s.Msg.Subject, subject) {
				all = append(all, s)
			}
		})
		if err != nil {
			return nil, err
		}
	}
	sortStored(all)
	return all, nil
}

// sortStored orders messages of several streams as they were stored.
func sortStored(all []Stored) {
	sort.SliceStable(all, func(i, j int) bool {
		if !all[i].Time.Equal(all[j].Time) {
			return all[i].Time.Before(all[j].Time)
		}
		if all[i].Stream != all[j].Stream {
			return all[i].Stream < all[j].Stream
		}
		return all[i].Seq < all[j].Seq
	})
}

// identity is what makes a message the same message whether it came live
// or from a stream: subject, operation and bytes.
func identity(m *nats.Msg) string {
	var b strings.Builder
	b.WriteString(m.Subject)
	b.WriteByte(0)
	if m.Header != nil {
		b.WriteString(m.Header.Get("KV-Operation"))
	}
	b.WriteByte(0)
	b.Write(m.Data)
	return b.String()
}
