package soak

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sys/unix"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/tools/tap"
)

// busReader reads a cluster node's bus from the host with the tap
// credential (read-only): the bus listens on the node's own loopback, so
// the connection is made from inside the node's network namespace.
type busReader struct {
	nc       *nats.Conn
	js       jetstream.JetStream
	stateDir string
}

// dialBus connects to the bus at addr in the network namespace netnsPath.
func dialBus(stateDir, netnsPath, addr string) (*busReader, error) {
	seed, err := nats.NkeyOptionFromSeed(bus.CredentialPath(stateDir, bus.Tap))
	if err != nil {
		return nil, err
	}
	nc, err := nats.Connect(bus.URLFor(addr), seed,
		nats.Name("nodelet-soak"),
		nats.CustomInboxPrefix(bus.InboxPrefix(bus.Tap)),
		nats.SetCustomDialer(netnsDialer{path: netnsPath}),
		nats.MaxReconnects(-1))
	if err != nil {
		return nil, fmt.Errorf("bus %s in %s: %w", addr, netnsPath, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	return &busReader{nc: nc, js: js, stateDir: stateDir}, nil
}

func (b *busReader) Close() { b.nc.Close() }

// netnsDialer dials from inside a network namespace: the socket belongs
// to the namespace of the thread that makes it, so one locked thread
// enters the namespace, dials and goes back.
type netnsDialer struct{ path string }

func (d netnsDialer) Dial(network, addr string) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		// Unlocked only once the thread is back in its own namespace;
		// else the thread ends with the goroutine.
		c, err := d.dialInside(network, addr)
		ch <- result{c, err}
	}()
	r := <-ch
	return r.c, r.err
}

func (d netnsDialer) dialInside(network, addr string) (net.Conn, error) {
	own, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return nil, err
	}
	defer own.Close()
	target, err := os.Open(d.path)
	if err != nil {
		return nil, err
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		return nil, fmt.Errorf("setns %s: %w", d.path, err)
	}
	c, err := (&net.Dialer{Timeout: 5 * time.Second}).Dial(network, addr)
	if unix.Setns(int(own.Fd()), unix.CLONE_NEWNET) == nil {
		runtime.UnlockOSThread()
	}
	return c, err
}

// busStreams names every stream whose size the soak follows: each
// bucket's and each producer's events. (status's copies of the events are
// not the tap's to ask about; their bytes on disk are read all the same.)
func busStreams() []string {
	out := bus.EventStreams()
	for _, b := range bus.Buckets {
		out = append(out, tap.BucketStream(b.Name))
	}
	return out
}

// streams reads the store's size per stream: bytes on disk for every
// stream directory under the store, and JetStream's own figures for those
// the tap may ask about.
func (b *busReader) streams(ctx context.Context) (map[string]Stream, error) {
	out := diskStreams(filepath.Join(b.stateDir, "bus", "jetstream"))
	var errs []error
	for _, name := range busStreams() {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		s, err := b.js.Stream(cctx, name)
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("stream %s: %w", name, err))
			continue
		}
		st := out[name]
		info := s.CachedInfo().State
		st.Bytes, st.Msgs, st.Subjects, st.LastSeq = info.Bytes, info.Msgs, info.NumSubjects, info.LastSeq
		out[name] = st
	}
	return out, errors.Join(errs...)
}

// diskStreams sums the files of each stream directory of a JetStream file
// store (<store>/<account>/streams/<stream>/…), by stream name.
func diskStreams(store string) map[string]Stream {
	out := map[string]Stream{}
	dirs, _ := filepath.Glob(filepath.Join(store, "*", "streams", "*"))
	for _, d := range dirs {
		var n int64
		_ = filepath.WalkDir(d, func(_ string, e fs.DirEntry, err error) error {
			if err == nil && !e.IsDir() {
				if fi, err := e.Info(); err == nil {
					n += fi.Size()
				}
			}
			return nil
		})
		name := filepath.Base(d)
		st := out[name]
		st.DiskBytes += n
		out[name] = st
	}
	return out
}

// produced is the number of events ever stored on the producers' streams.
func produced(streams map[string]Stream) int64 {
	var n int64
	for _, s := range bus.EventStreams() {
		n += int64(streams[s].LastSeq)
	}
	return n
}

// kvOperation is the header a KV delete or purge carries (nats.go's
// kvop, unexported).
const kvOperation = "KV-Operation"

// liveKeys lists every bucket's keys that hold a value (the last message
// of each key is not a delete or a purge), as <bucket>/<key>.
func (b *busReader) liveKeys(ctx context.Context) ([]string, error) {
	var out []string
	for _, bk := range bus.Buckets {
		stream := tap.BucketStream(bk.Name)
		err := b.lastPerSubject(ctx, stream, "$KV."+bk.Name+".>", func(m jetstream.Msg) {
			switch m.Headers().Get(kvOperation) {
			case "DEL", "PURGE":
				return
			}
			out = append(out, bk.Name+"/"+trimKVPrefix(m.Subject(), bk.Name))
		})
		if err != nil {
			return out, fmt.Errorf("bucket %s: %w", bk.Name, err)
		}
	}
	return out, nil
}

func trimKVPrefix(subject, bucket string) string {
	p := "$KV." + bucket + "."
	if len(subject) > len(p) && subject[:len(p)] == p {
		return subject[len(p):]
	}
	return subject
}

// lastPerSubject calls fn with the last message of every subject of
// stream matching filter, through an ephemeral consumer as tap reads
// streams (JetStream refuses "last per subject" without a filter).
func (b *busReader) lastPerSubject(ctx context.Context, stream, filter string, fn func(jetstream.Msg)) error {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cons, err := b.js.CreateConsumer(cctx, stream, jetstream.ConsumerConfig{
		DeliverPolicy:     jetstream.DeliverLastPerSubjectPolicy,
		FilterSubject:     filter,
		AckPolicy:         jetstream.AckNonePolicy,
		InactiveThreshold: time.Minute,
		MemoryStorage:     true,
	})
	if err != nil {
		return err
	}
	defer func() {
		dctx, dcancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer dcancel()
		_ = b.js.DeleteConsumer(dctx, stream, cons.CachedInfo().Name)
	}()
	pending := cons.CachedInfo().NumPending
	for pending > 0 {
		batch, err := cons.Fetch(int(min(pending, 512)), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return err
		}
		n := 0
		for m := range batch.Messages() {
			n++
			if md, err := m.Metadata(); err == nil {
				pending = md.NumPending
			}
			fn(m)
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && !errors.Is(err, nats.ErrTimeout) {
			return err
		}
		if n == 0 {
			return fmt.Errorf("%d messages pending, none delivered", pending)
		}
	}
	return nil
}
