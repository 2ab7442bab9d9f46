package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"k8s.io/utils/clock"
)

// ServerOptions configure the embedded bus.
type ServerOptions struct {
	// StateDir is node.stateDir: the store goes to <StateDir>/bus, the
	// credentials to <StateDir>/credentials.
	StateDir string
	// Listen is host:port, loopback only. Port 0 picks a free port.
	Listen string
	// MonitorListen enables nats-server's HTTP monitoring on a loopback
	// host:port; empty leaves it off.
	MonitorListen string
	Log           *slog.Logger
	// Limits bound what the bus stores; zero fields take the defaults.
	Limits Limits
	// Clock times the sweep of deleted keys. Default: the real clock.
	Clock clock.WithTicker
}

// Limits bound the bus's store. The defaults are sized for a node of 110
// pods with room to spare; config (bus.*) sets them.
type Limits struct {
	// MaxStore is JetStream's whole file store. Every stream reserves its
	// MaxBytes from it, so it must hold them all.
	MaxStore int64
	// BucketMaxBytes bounds each KV bucket (history included). A full
	// bucket refuses writes (the owner logs them) rather than dropping
	// other keys' values.
	BucketMaxBytes int64
	// MaxValueSize bounds one value: a pod larger than this is rejected
	// by its source with an event instead of retried.
	MaxValueSize int32
	// EventsMaxBytes bounds the events streams together: each producer's
	// stream holds an equal share, and status's copy of it as much again.
	// EventsMaxAge bounds every events stream's age (and how long status's
	// durable consumer outlives a stopped nodelet-status). A producer's
	// oldest events go first, and only to make room for its own.
	EventsMaxBytes int64
	EventsMaxAge   time.Duration
	// DeletedKeyRetention is how long a deleted key's history stays in
	// its bucket (retention.go); at least MinDeletedKeyRetention.
	DeletedKeyRetention time.Duration
	// MaxEventSize bounds one event on the bus; Emit shortens a longer
	// message to fit.
	MaxEventSize int32
	// ConnectionsPerCredential and SubscriptionsPerCredential bound what
	// one credential (its account) holds at once; ConsumersPerCredential
	// the consumers it has made through the proxy, on all streams
	// together. One daemon uses one connection, a few dozen subscriptions
	// and a consumer per bucket it watches.
	ConnectionsPerCredential   int
	SubscriptionsPerCredential int
	ConsumersPerCredential     int
}

// defaultMaxEventSize bounds one event: an event's message is a line or
// two for people (the API server keeps events small too), so a larger one
// is a producer gone wrong.
const defaultMaxEventSize = 64 << 10

// DefaultLimits are the bus's defaults.
var DefaultLimits = Limits{
	MaxStore:       2 << 30,
	BucketMaxBytes: 128 << 20,
	MaxValueSize:   1536 << 10,
	EventsMaxBytes: 128 << 20,
	EventsMaxAge:   eventsMaxAgeHours * time.Hour,

	DeletedKeyRetention: DefaultDeletedKeyRetention,
	MaxEventSize:        defaultMaxEventSize,

	ConnectionsPerCredential:   64,
	SubscriptionsPerCredential: 1024,
	ConsumersPerCredential:     128,
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits
	if l.MaxStore == 0 {
		l.MaxStore = d.MaxStore
	}
	if l.BucketMaxBytes == 0 {
		l.BucketMaxBytes = d.BucketMaxBytes
	}
	if l.MaxValueSize == 0 {
		l.MaxValueSize = d.MaxValueSize
	}
	if l.EventsMaxBytes == 0 {
		l.EventsMaxBytes = d.EventsMaxBytes
	}
	if l.EventsMaxAge == 0 {
		l.EventsMaxAge = d.EventsMaxAge
	}
	if l.DeletedKeyRetention == 0 {
		l.DeletedKeyRetention = d.DeletedKeyRetention
	}
	if l.MaxEventSize == 0 {
		l.MaxEventSize = d.MaxEventSize
	}
	if l.ConnectionsPerCredential == 0 {
		l.ConnectionsPerCredential = d.ConnectionsPerCredential
	}
	if l.SubscriptionsPerCredential == 0 {
		l.SubscriptionsPerCredential = d.SubscriptionsPerCredential
	}
	if l.ConsumersPerCredential == 0 {
		l.ConsumersPerCredential = d.ConsumersPerCredential
	}
	return l
}

// Server is the embedded nats-server with JetStream and every nodelet
// bucket and stream in place.
type Server struct {
	ns       *server.Server
	log      *slog.Logger
	stateDir string
	limits   Limits
	seeds    map[string][]byte // the bus's own users, by account
	logger   *natsLogger

	mu    sync.Mutex
	conns []*nats.Conn
	proxy *proxy
	// store is the bus's JetStream context in each store account, which
	// the proxy and the sweeper share (storeJetStreams).
	store map[string]jetstream.JetStream

	sweeper    *sweeper
	stopSweep  context.CancelFunc
	sweepEnded chan struct{}
}

// CheckLoopback fails unless hostport names a loopback address.
func CheckLoopback(key, hostport string) error {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return fmt.Errorf("%s: %q is not host:port: %w", key, hostport, err)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("%s: bad port %q", key, port)
	}
	if host == "localhost" {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("%s: %q is not a loopback address: the bus listens on loopback only", key, host)
	}
	return nil
}

// StartServer starts the bus and returns once it is ready: JetStream up and
// every bucket and stream created (already existing ones are kept).
func StartServer(ctx context.Context, o ServerOptions) (*Server, error) {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if err := CheckLoopback("bus.listen", o.Listen); err != nil {
		return nil, err
	}
	host, portStr, _ := net.SplitHostPort(o.Listen)
	port, _ := strconv.Atoi(portStr)
	if port == 0 {
		port = server.RANDOM_PORT
	}
	pubs, err := EnsureCredentials(o.StateDir)
	if err != nil {
		return nil, err
	}
	dropOldLayout(filepath.Join(o.StateDir, "bus"), o.Log)
	keys, seeds, err := newBusKeys()
	if err != nil {
		return nil, err
	}
	limits := o.Limits.withDefaults()
	opts := &server.Options{}
	// The accounts are nats-server configuration text: the form its own
	// cross-account JetStream tests use, so the exports and imports mean
	// exactly what they mean there.
	if err := opts.ProcessConfigString(declared.accountsConfig(pubs, keys, limits)); err != nil {
		return nil, fmt.Errorf("bus: accounts: %w", err)
	}
	for _, u := range opts.Nkeys {
		if c := declared.componentOfAccount(u.Account.Name); c != "" {
			if u.Permissions, err = Permissions(c); err != nil {
				return nil, err
			}
		}
	}
	opts.ServerName = "nodelet-bus"
	opts.Host, opts.Port = host, port
	opts.NoSigs = true
	opts.JetStream = true
	opts.StoreDir = filepath.Join(o.StateDir, "bus")
	opts.JetStreamMaxStore = limits.MaxStore
	opts.MaxPayload = 8 << 20
	opts.DisableShortFirstPing = true
	if o.MonitorListen != "" {
		if err := CheckLoopback("bus.monitorListen", o.MonitorListen); err != nil {
			return nil, err
		}
		mh, mp, _ := net.SplitHostPort(o.MonitorListen)
		opts.HTTPHost = mh
		opts.HTTPPort, _ = strconv.Atoi(mp)
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("bus: %w", err)
	}
	logger := &natsLogger{l: o.Log}
	ns.SetLoggerV2(logger, false, false, false)
	ns.Start()
	if !ns.ReadyForConnections(30 * time.Second) {
		ns.Shutdown()
		return nil, errors.New("bus: nats-server not ready for connections after 30s")
	}
	s := &Server{ns: ns, log: o.Log, stateDir: o.StateDir, limits: limits, seeds: seeds, logger: logger}
	if err := s.ensureStreams(ctx); err != nil {
		s.closeConns()
		ns.Shutdown()
		return nil, err
	}
	if err := s.startProxy(); err != nil {
		s.closeConns()
		ns.Shutdown()
		return nil, err
	}
	if err := s.startSweeper(o.Clock); err != nil {
		s.closeConns()
		ns.Shutdown()
		return nil, err
	}
	return s, nil
}

// dropOldLayout removes the store of the bus as it was before accounts:
// every stream in nats-server's global account ($G), which no longer has
// JetStream and whose data would only take disk. Like a wiped store, the
// node converges again from the sources and CRI.
func dropOldLayout(storeDir string, log *slog.Logger) {
	old := filepath.Join(storeDir, server.JetStreamStoreDir, server.DEFAULT_GLOBAL_ACCOUNT)
	if _, err := os.Stat(old); err != nil {
		return
	}
	log.Warn("Removing the store of an earlier bus layout (one account for all streams)", "path", old)
	if err := os.RemoveAll(old); err != nil {
		log.Error("Cannot remove the store of an earlier bus layout", "path", old, "err", err)
	}
}

// newBusKeys makes the bus's own users: an admin per store account and the
// proxy. They are made at every start and kept in memory only, so no file
// on the node holds a key that can create, delete or write any stream.
func newBusKeys() (busKeys, map[string][]byte, error) {
	keys := busKeys{store: map[string]string{}}
	seeds := map[string][]byte{}
	for _, acct := range append(declared.storeAccounts(), accountProxy) {
		kp, err := nkeys.CreateUser()
		if err != nil {
			return keys, nil, err
		}
		pub, err := kp.PublicKey()
		if err != nil {
			return keys, nil, err
		}
		if seeds[acct], err = kp.Seed(); err != nil {
			return keys, nil, err
		}
		if acct == accountProxy {
			keys.proxy = pub
		} else {
			keys.store[acct] = pub
		}
	}
	return keys, seeds, nil
}

// connectAs opens an in-process connection as one of the bus's own users.
func (s *Server) connectAs(acct string) (*nats.Conn, error) {
	kp, err := nkeys.FromSeed(s.seeds[acct])
	if err != nil {
		return nil, err
	}
	pub, _ := kp.PublicKey()
	nc, err := nats.Connect("", nats.InProcessServer(s.ns), nats.Name("nodelet-bus-"+strings.ToLower(acct)),
		nats.Nkey(pub, kp.Sign), nats.MaxReconnects(-1))
	if err != nil {
		return nil, fmt.Errorf("bus: in-process connection to %s: %w", acct, err)
	}
	s.mu.Lock()
	s.conns = append(s.conns, nc)
	s.mu.Unlock()
	return nc, nil
}

func (s *Server) closeConns() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proxy != nil {
		s.proxy.close()
	}
	for _, nc := range s.conns {
		nc.Close()
	}
	s.conns, s.store = nil, nil
}

func (s *Server) startProxy() error {
	nc, err := s.connectAs(accountProxy)
	if err != nil {
		return err
	}
	kp, err := nkeys.FromSeed(s.seeds[accountProxy])
	if err != nil {
		return err
	}
	p := &proxy{nc: nc, log: s.log.With("bus", "consumer-proxy"), limits: s.limits,
		queues: map[string]chan wireMsg{}, workers: map[string]int{},
		creators: map[consumerKey]string{}, held: map[string]int{}, inflight: map[string]int{}}
	p.dial = func() (*wire, error) {
		conn, err := inProcess(s.ns)
		if err != nil {
			return nil, err
		}
		w, err := dialWire(conn, kp, "nodelet-bus-proxy-listener")
		if err != nil {
			conn.Close()
		}
		return w, err
	}
	if p.store, err = s.storeJetStreams(); err != nil {
		return err
	}
	// What a credential made before a restart counts against it.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.recount(ctx); err != nil {
		return fmt.Errorf("bus: consumer proxy: %w", err)
	}
	s.mu.Lock()
	s.proxy = p
	s.mu.Unlock()
	return p.run()
}

// storeJetStreams returns the bus's JetStream context in every store
// account, by account, opening a connection of the bus's own to each at
// the first call. The consumer proxy and the sweeper share them (one
// JetStream context serves concurrent callers): an in-process connection
// costs a nats.go reader and writer of 32 KiB each, the server's client
// and four goroutines, and there are a dozen store accounts
// (docs/performance.md, memory at rest). Called from StartServer's
// goroutine only, one start-up step after the other.
func (s *Server) storeJetStreams() (map[string]jetstream.JetStream, error) {
	if s.store != nil {
		return s.store, nil
	}
	out := map[string]jetstream.JetStream{}
	for _, acct := range declared.storeAccounts() {
		nc, err := s.connectAs(acct)
		if err != nil {
			return nil, err
		}
		if out[acct], err = jetstream.New(nc); err != nil {
			return nil, err
		}
	}
	s.store = out
	return out, nil
}

// startSweeper starts dropping the history of keys deleted longer ago
// than the retention (retention.go), over the bus's store connections.
func (s *Server) startSweeper(clk clock.WithTicker) error {
	if clk == nil {
		clk = clock.RealClock{}
	}
	store, err := s.storeJetStreams()
	if err != nil {
		return err
	}
	sw := &sweeper{clock: clk, retention: s.limits.DeletedKeyRetention, store: store, log: s.log.With("bus", "retention")}
	ctx, cancel := context.WithCancel(context.Background())
	s.sweeper, s.stopSweep, s.sweepEnded = sw, cancel, make(chan struct{})
	t := clk.NewTicker(sweepInterval(sw.retention))
	go func() {
		defer close(s.sweepEnded)
		sw.run(ctx, t)
	}()
	return nil
}

// ensureStreams creates every bucket and the events streams, each in its
// store account. "Already exists" is success, so a restart keeps what is
// stored.
func (s *Server) ensureStreams(ctx context.Context) error {
	for _, acct := range declared.storeAccounts() {
		nc, err := s.connectAs(acct)
		if err != nil {
			return err
		}
		js, err := jetstream.New(nc)
		if err != nil {
			return err
		}
		err = ensureAccountStreams(ctx, js, acct, s.limits)
		nc.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// ensureAccountStreams creates the streams of one store account.
func ensureAccountStreams(ctx context.Context, js jetstream.JetStream, acct string, l Limits) error {
	for _, b := range Buckets {
		if storeAccountOf(streamOf(b.Name)) != acct {
			continue
		}
		cfg := jetstream.KeyValueConfig{
			Bucket:       b.Name,
			Description:  "written by nodelet-" + b.Owner,
			History:      b.History,
			Storage:      jetstream.FileStorage,
			MaxBytes:     l.BucketMaxBytes,
			MaxValueSize: l.MaxValueSize,
		}
		_, err := js.CreateKeyValue(ctx, cfg)
		if errors.Is(err, jetstream.ErrBucketExists) {
			// Limits come from the config: take a changed one on restart.
			_, err = js.UpdateKeyValue(ctx, cfg)
		}
		if err != nil {
			return fmt.Errorf("bus: bucket %s: %w", b.Name, err)
		}
	}
	if acct != accountEvents {
		return nil
	}
	dropLegacyEvents(ctx, js)
	producers := declared.eventProducers()
	share := l.EventsMaxBytes / int64(len(producers))
	size := l.MaxEventSize
	if int64(size) > share {
		size = int32(share)
	}
	for _, p := range producers {
		events := jetstream.StreamConfig{
			Name:        EventsStream(p),
			Description: "lifecycle events of nodelet-" + p,
			Subjects:    []string{EventsSubjectOf(p)},
			Storage:     jetstream.FileStorage,
			MaxAge:      l.EventsMaxAge,
			MaxBytes:    share,
			MaxMsgs:     eventsMaxMessages,
			MaxMsgSize:  size,
			Discard:     jetstream.DiscardOld,
			// De-duplication is per stream, so per producer: message IDs
			// only ever meet the IDs of the one account that can publish
			// here.
			Duplicates:  2 * time.Minute,
			AllowDirect: true,
		}
		if _, err := js.CreateOrUpdateStream(ctx, events); err != nil {
			return fmt.Errorf("bus: stream %s: %w", events.Name, err)
		}
		status := events
		status.Name = StatusEventsStream(p)
		status.Description = "nodelet-" + p + "'s events as nodelet-status consumes them (a copy only status reaches)"
		status.Subjects = nil
		status.Duplicates = 0
		status.Sources = []*jetstream.StreamSource{{Name: events.Name}}
		if _, err := js.CreateOrUpdateStream(ctx, status); err != nil {
			return fmt.Errorf("bus: stream %s: %w", status.Name, err)
		}
	}
	return nil
}

// dropLegacyEvents deletes the one events stream (and status's copy) of a
// bus before events were kept per producer: their store would be reserved
// beside the new streams', and nothing reads them any more. Events status
// had not posted yet are lost with them, once.
func dropLegacyEvents(ctx context.Context, js jetstream.JetStream) {
	for _, name := range []string{"NODELET_V1_STATUS_EVENTS", "NODELET_V1_EVENTS"} {
		if err := js.DeleteStream(ctx, name); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			slog.Default().Warn("Cannot delete the events stream of an earlier bus layout", "stream", name, "err", err)
		}
	}
}

// Healthy fails when the bus cannot do its job although its process runs:
// JetStream disabled (nats-server turns it off when the store fails, and
// only a restart turns it on again).
func (s *Server) Healthy() error {
	if !s.ns.JetStreamEnabled() {
		return errors.New("JetStream is disabled")
	}
	for _, acct := range declared.storeAccounts() {
		a, err := s.ns.LookupAccount(acct)
		if err != nil {
			return fmt.Errorf("account %s: %w", acct, err)
		}
		if !a.JetStreamEnabled() {
			return fmt.Errorf("JetStream is disabled for account %s", acct)
		}
	}
	return nil
}

// StoreWriteError is the first critical write error a stream's store
// reported (the filesystem full, an I/O error), nil if none: from then on
// that stream refuses writes until the server starts again, while reads
// still work.
func (s *Server) StoreWriteError() error {
	if m := s.logger.writeErr.Load(); m != nil {
		return errors.New(*m)
	}
	return nil
}

// StoreDir is the directory of the bus's store, <stateDir>/bus.
func (s *Server) StoreDir() string { return filepath.Join(s.stateDir, "bus") }

// ClientURL is the nats:// URL clients connect to.
func (s *Server) ClientURL() string { return s.ns.ClientURL() }

// Addr is the host:port the bus listens on.
func (s *Server) Addr() string {
	if a, ok := s.ns.Addr().(*net.TCPAddr); ok {
		return a.String()
	}
	return ""
}

// Shutdown stops the bus, flushing the store.
func (s *Server) Shutdown() {
	s.stopSweep()
	<-s.sweepEnded
	s.closeConns()
	s.ns.Shutdown()
	s.ns.WaitForShutdown()
}

// natsLogger forwards nats-server's logs to slog, and keeps the first
// critical write error a stream's store reported.
type natsLogger struct {
	l        *slog.Logger
	writeErr atomic.Pointer[string]
}

func (n *natsLogger) Noticef(f string, v ...any) { n.l.Info(fmt.Sprintf(f, v...)) }
func (n *natsLogger) Warnf(f string, v ...any)   { n.l.Warn(fmt.Sprintf(f, v...)) }
func (n *natsLogger) Fatalf(f string, v ...any)  { n.l.Error(fmt.Sprintf(f, v...)) }
func (n *natsLogger) Errorf(f string, v ...any) {
	msg := fmt.Sprintf(f, v...)
	// nats-server's filestore makes a failed write (ENOSPC, EIO) sticky:
	// the stream refuses every later write until it is loaded again, and
	// says so only in its log ("Critical write error",
	// "critical write error"); JetStream itself stays enabled.
	if strings.Contains(strings.ToLower(msg), "critical write error") {
		n.writeErr.CompareAndSwap(nil, &msg)
	}
	n.l.Error(msg)
}
func (n *natsLogger) Debugf(f string, v ...any) { n.l.Debug(fmt.Sprintf(f, v...)) }
func (n *natsLogger) Tracef(f string, v ...any) {}
