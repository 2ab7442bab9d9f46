package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/tools/tap"
	"github.com/nodelet/nodelet/schemas"
)

// streams are the bus's stored streams: every bucket's and every
// producer's events.
func streams() []string {
	out := bus.EventStreams()
	for _, b := range bus.Buckets {
		out = append(out, tap.BucketStream(b.Name))
	}
	return out
}

// streamMarks holds each stream's last sequence number at a moment.
type streamMarks map[string]uint64

// markStreams reads every stream's last sequence (a read-only JetStream
// call the tap credential may make).
func markStreams(ctx context.Context, c *bus.Conn) (streamMarks, error) {
	m := streamMarks{}
	for _, name := range streams() {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		s, err := c.JS.Stream(cctx, name)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("stream %s: %w", name, err)
		}
		m[name] = s.CachedInfo().State.LastSeq
	}
	return m, nil
}

// stored counts the messages stored between two marks.
func stored(from, to streamMarks) (int, map[string]int) {
	total := 0
	by := map[string]int{}
	for name, last := range to {
		if d := int(last - from[name]); d > 0 && last > from[name] {
			by[name] = d
			total += d
		}
	}
	return total, by
}

// readBurst reads back what was stored on every stream after the marks
// from and up to until, feeds the pods' timelines, and counts the
// messages and their bytes (subject, headers and data, as stored).
func readBurst(ctx context.Context, c *bus.Conn, from streamMarks, until time.Time) (*timelines, *BusCost, error) {
	tl := newTimelines()
	cost := &BusCost{ByStream: map[string]int{}}
	for _, name := range streams() {
		filterStart := from[name] + 1
		rctx, cancel := context.WithTimeout(ctx, time.Minute)
		err := tap.ReadStreamFrom(rctx, c, name, filterStart, func(m tap.Stored) {
			if m.Time.After(until) {
				return
			}
			cost.Messages++
			cost.ByStream[name]++
			cost.Bytes += int64(len(m.Msg.Subject) + len(m.Msg.Data))
			for k, vs := range m.Msg.Header {
				for _, v := range vs {
					cost.Bytes += int64(len(k) + len(v))
				}
			}
			feed(tl, name, m.Msg.Data)
		})
		cancel()
		if err != nil {
			return nil, nil, err
		}
	}
	return tl, cost, nil
}

// feed decodes one stored message into the timelines. Deletes carry no
// data; messages of other schemas are not the pods' start.
func feed(tl *timelines, stream string, data []byte) {
	if len(data) == 0 {
		return
	}
	env, err := schemas.Open(data)
	if err != nil {
		return
	}
	switch stream {
	case tap.BucketStream(bus.BucketDesired):
		var v schemas.PodDesired
		if schemas.DecodeInto(data, &v) == nil {
			tl.desired(env.Time, &v)
		}
	case tap.BucketStream(bus.BucketAdmission):
		var v schemas.AdmissionVerdict
		if schemas.DecodeInto(data, &v) == nil {
			tl.admission(env.Time, &v)
		}
	case tap.BucketStream(bus.BucketObserved):
		var v schemas.PodObserved
		if schemas.DecodeInto(data, &v) == nil {
			tl.observed(env.Time, &v)
		}
	case tap.BucketStream(bus.BucketStatus):
		var v schemas.PodStatusRecord
		if schemas.DecodeInto(data, &v) == nil {
			tl.status(env.Time, &v)
		}
	}
	if bus.EventsProducer(stream) != "" {
		var v schemas.Event
		if schemas.DecodeInto(data, &v) == nil {
			tl.event(&v)
		}
	}
}
