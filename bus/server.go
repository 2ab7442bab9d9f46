package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
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
}

// Server is the embedded nats-server with JetStream and every nodelet
// bucket and stream in place.
type Server struct {
	ns       *server.Server
	log      *slog.Logger
	stateDir string
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
	users, err := nkeyUsers(pubs)
	if err != nil {
		return nil, err
	}
	opts := &server.Options{
		ServerName:            "nodelet-bus",
		Host:                  host,
		Port:                  port,
		NoSigs:                true,
		JetStream:             true,
		StoreDir:              filepath.Join(o.StateDir, "bus"),
		Nkeys:                 users,
		MaxPayload:            8 << 20,
		DisableShortFirstPing: true,
	}
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
	ns.SetLoggerV2(&natsLogger{o.Log}, false, false, false)
	ns.Start()
	if !ns.ReadyForConnections(30 * time.Second) {
		ns.Shutdown()
		return nil, errors.New("bus: nats-server not ready for connections after 30s")
	}
	s := &Server{ns: ns, log: o.Log, stateDir: o.StateDir}
	if err := s.ensureStreams(ctx); err != nil {
		ns.Shutdown()
		return nil, err
	}
	return s, nil
}

// ensureStreams creates every bucket and the events stream. "Already
// exists" is success, so a restart keeps what is stored.
func (s *Server) ensureStreams(ctx context.Context) error {
	seed, err := nats.NkeyOptionFromSeed(CredentialPath(s.stateDir, BusAdmin))
	if err != nil {
		return err
	}
	nc, err := nats.Connect("", nats.InProcessServer(s.ns), nats.Name("nodelet-bus"), seed)
	if err != nil {
		return fmt.Errorf("bus: in-process connection: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	return EnsureStreams(ctx, js)
}

// EnsureStreams creates every bucket and stream nodelet uses, idempotently.
func EnsureStreams(ctx context.Context, js jetstream.JetStream) error {
	for _, b := range Buckets {
		_, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket:      b.Name,
			Description: "written by nodelet-" + b.Owner,
			History:     b.History,
			Storage:     jetstream.FileStorage,
		})
		if err != nil && !errors.Is(err, jetstream.ErrBucketExists) {
			if _, gerr := js.KeyValue(ctx, b.Name); gerr != nil {
				return fmt.Errorf("bus: bucket %s: %w", b.Name, err)
			}
		}
	}
	_, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        StreamEvents,
		Description: "lifecycle events of every nodelet component",
		Subjects:    []string{SubjectEventsAll},
		Storage:     jetstream.FileStorage,
		MaxAge:      eventsMaxAgeHours * time.Hour,
		MaxMsgs:     eventsMaxMessages,
		Discard:     jetstream.DiscardOld,
	})
	if err != nil {
		return fmt.Errorf("bus: stream %s: %w", StreamEvents, err)
	}
	return nil
}

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
	s.ns.Shutdown()
	s.ns.WaitForShutdown()
}

// natsLogger forwards nats-server's logs to slog.
type natsLogger struct{ l *slog.Logger }

func (n *natsLogger) Noticef(f string, v ...any) { n.l.Info(fmt.Sprintf(f, v...)) }
func (n *natsLogger) Warnf(f string, v ...any)   { n.l.Warn(fmt.Sprintf(f, v...)) }
func (n *natsLogger) Fatalf(f string, v ...any)  { n.l.Error(fmt.Sprintf(f, v...)) }
func (n *natsLogger) Errorf(f string, v ...any)  { n.l.Error(fmt.Sprintf(f, v...)) }
func (n *natsLogger) Debugf(f string, v ...any)  { n.l.Debug(fmt.Sprintf(f, v...)) }
func (n *natsLogger) Tracef(f string, v ...any)  {}
