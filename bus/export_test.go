package bus

import (
	"context"
	"net"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

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

// Wire is the bare protocol client, for tests that send what nats.go never
// would (header blocks with bare line feeds).
type Wire struct{ w *wire }

// DialWire connects to addr (host:port) as component with its seed from
// stateDir.
func DialWire(addr, stateDir, component string) (*Wire, error) {
	seed, err := readSecret(CredentialPath(stateDir, component))
	if err != nil {
		return nil, err
	}
	kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(seed))))
	if err != nil {
		return nil, err
	}
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	w, err := dialWire(conn, kp, "test-wire-"+component)
	if err != nil {
		conn.Close()
		return nil, err
	}
	return &Wire{w}, nil
}

func (w *Wire) Sub(subject string, sid int) error { return w.w.sub(subject, sid) }
func (w *Wire) HPub(subject, reply string, hdr, data []byte) error {
	return w.w.hpub(subject, reply, hdr, data)
}

// Next returns the next message's subject, header block and data.
func (w *Wire) Next() (string, []byte, []byte, error) {
	m, err := w.w.next()
	return m.Subject, m.Header, m.Data, err
}
func (w *Wire) Close() { _ = w.w.close() }

// Barrier waits until the server has handled everything sent on w before,
// skipping what it sent meanwhile (errors for refused publishes).
func (w *Wire) Barrier() error {
	if err := w.w.write("PING\r\n"); err != nil {
		return err
	}
	for {
		l, err := w.w.line()
		if err != nil {
			return err
		}
		if l == "PONG" {
			return nil
		}
	}
}

// OnSweep makes the bus call f after each sweep of deleted keys.
func OnSweep(s *Server, f func(dropped int, err error)) { s.sweeper.swept.Store(&f) }

// KeyMessages is how many messages the bucket's stream holds for key: its
// revisions and delete marker.
func KeyMessages(ctx context.Context, s *Server, bucket, key string) (uint64, error) {
	js := s.sweeper.store[storeAccountOf(streamOf(bucket))]
	st, err := js.Stream(ctx, streamOf(bucket))
	if err != nil {
		return 0, err
	}
	subj := kvSubjectPrefix + bucket + "." + key
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(subj))
	if err != nil {
		return 0, err
	}
	return info.State.Subjects[subj], nil
}

// BucketFill is what bucket's stream holds and its MaxBytes, as the sweep
// reads them.
func BucketFill(ctx context.Context, s *Server, bucket string) (uint64, int64, error) {
	return bucketFill(ctx, s.sweeper.store[storeAccountOf(streamOf(bucket))], bucket)
}

// ProxyWorkers is how many goroutines serve the consumer proxy's queues
// now, all components together.
func ProxyWorkers(s *Server) int {
	s.mu.Lock()
	p := s.proxy
	s.mu.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, w := range p.workers {
		n += w
	}
	return n
}

// StoreConnections is how many store-account JetStream contexts the bus
// holds (the proxy and the sweeper share them).
func StoreConnections(s *Server) (proxy, sweeper map[string]jetstream.JetStream) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proxy.store, s.sweeper.store
}
