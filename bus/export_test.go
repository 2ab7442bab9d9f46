package bus

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/nodelet/nodelet/schemas"
)

// DisableJetStream turns JetStream off as nats-server does itself when its
// store fails under it (a write refused by the file system).
func DisableJetStream(s *Server) error { return s.ns.DisableJetStream() }

// DeleteBucket deletes bucket's stream as the bus itself can (a store
// that lost a stream under running readers).
func DeleteBucket(ctx context.Context, s *Server, bucket string) error {
	nc, err := s.connectAs(storeAccountOf(streamOf(bucket)))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	return js.DeleteKeyValue(ctx, bucket)
}

// EnsureBuckets creates the missing streams, as the bus does at start.
func EnsureBuckets(ctx context.Context, s *Server) error { return s.ensureStreams(ctx) }

// OnMirrorAttempt makes m call f with the error of each failed attempt to
// establish its watch and the back-off it waits before the next.
func OnMirrorAttempt[T any, PT interface {
	*T
	schemas.Message
}](m *Mirror[T, PT], f func(err error, backoff time.Duration)) {
	m.attempted = f
}
