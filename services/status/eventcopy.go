package status

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodelet/nodelet/bus"
)

// eventCopyTimeout bounds the stream-info requests of one scrape.
const eventCopyTimeout = 2 * time.Second

// eventCopyCollector says, at scrape time, how far status's copy of each
// producer's events stream is behind the producer's stream. nats-server
// copies a stream source through a consumer of its own; when that stalls
// (under load its requests time out) the server retries after a back-off
// of up to 2 minutes, and that producer's events reach the API late by as
// much. The kubelet has no such stage (its recorder posts from memory), so
// these are nodelet's own metrics:
//
//   - nodelet_status_event_copy_lag_messages{producer}: events in the
//     producer's stream the copy has not taken yet.
//   - nodelet_status_event_copy_last_active_seconds{producer}: since the
//     copy last heard from its source (-1: never).
//
// A producer whose copy cannot be read has no series in that scrape.
type eventCopyCollector struct {
	js      jetstream.JetStream
	streams map[string]string // producer → status's copy
	lag     *prometheus.Desc
	active  *prometheus.Desc
}

func newEventCopyCollector(js jetstream.JetStream) *eventCopyCollector {
	c := &eventCopyCollector{
		js:      js,
		streams: map[string]string{},
		lag: prometheus.NewDesc("nodelet_status_event_copy_lag_messages",
			"Events in a producer's stream that nodelet-status's copy of it has not taken yet", []string{"producer"}, nil),
		active: prometheus.NewDesc("nodelet_status_event_copy_last_active_seconds",
			"Seconds since nodelet-status's copy of a producer's events last heard from its source (-1: never)", []string{"producer"}, nil),
	}
	for _, p := range bus.EventProducers {
		c.streams[p] = bus.StatusEventsStream(p)
	}
	return c
}

func (c *eventCopyCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.lag
	ch <- c.active
}

func (c *eventCopyCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), eventCopyTimeout)
	defer cancel()
	for producer, name := range c.streams {
		st, err := c.js.Stream(ctx, name)
		if err != nil {
			continue
		}
		info := st.CachedInfo()
		if info == nil || len(info.Sources) == 0 {
			continue
		}
		src := info.Sources[0]
		active := src.Active.Seconds()
		if src.Active < 0 {
			active = -1
		}
		ch <- prometheus.MustNewConstMetric(c.lag, prometheus.GaugeValue, float64(src.Lag), producer)
		ch <- prometheus.MustNewConstMetric(c.active, prometheus.GaugeValue, active, producer)
	}
}
