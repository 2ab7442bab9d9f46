// Package server is nodelet-server, the kubelet's server
// (pkg/kubelet/server): the kubelet API on server.port over TLS, with the
// kubelet's authentication and authorization, serving container logs, exec,
// attach, port-forward and run through CRI, and the read-only API (pods,
// healthz, spec, stats, metrics), also on the read-only port when enabled.
//
// It owns no bucket: it watches the desired pods to find a pod by namespace
// and name (the kubelet's GetPodByName), the pod statuses nodelet-status
// computes, the runtime's state and every daemon's heartbeat (/healthz),
// asks CRI for containers, stats, log paths and streaming URLs, and proxies
// streams to the runtime's streaming server as the kubelet's proxyStream
// does.
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	cadvisorapi "github.com/google/cadvisor/lib/model"
	"golang.org/x/net/netutil"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/internal/cri"
	"github.com/nodelet/nodelet/internal/daemon"
	"github.com/nodelet/nodelet/internal/hostinfo"
	"github.com/nodelet/nodelet/internal/kubeclient"
)

// Options build nodelet-server: Run fills them in from the environment,
// tests by hand.
type Options struct {
	daemon.Deps
	// CRI is the container runtime: logs, exec, attach, port-forward, run.
	CRI *cri.Clients
	// Kube does TokenReview and SubjectAccessReview; nil turns bearer
	// tokens off and makes authorization mode Webhook deny every request.
	Kube kubernetes.Interface
	// Clock defaults to the real clock (heartbeat staleness, stats times).
	Clock clock.Clock
	// Machine returns cAdvisor's MachineInfo; nil reads the machine.
	Machine func() (*cadvisorapi.MachineInfo, error)
	// Daemons are the daemons /healthz requires a fresh heartbeat from;
	// nil means every daemon but nodelet-server itself.
	Daemons []string
	// SystemLogDir is what /logs/ serves; empty is /var/log, as the kubelet's.
	SystemLogDir string
	// Limits bound what clients may hold; zero fields take the defaults.
	Limits Limits
	// NodeKube is the node's identity: the kubelet-serving CSRs of
	// server.serverTLSBootstrap. Nil uses Kube.
	NodeKube kubernetes.Interface
}

// Limits bound what slow or greedy clients can pin: connections,
// goroutines and memory. The timeouts and header size are the kubelet's
// (ListenAndServeKubeletServer) plus a header deadline it lacks.
type Limits struct {
	// ReadHeaderTimeout: a client must send its request line and headers
	// (after the TLS handshake, which shares the deadline) within it.
	// Default 10s.
	ReadHeaderTimeout time.Duration
	// IdleTimeout closes keep-alive connections with no request. Default 90s.
	IdleTimeout time.Duration
	// ReadWriteTimeout ends any request, streams included. Default 4h.
	ReadWriteTimeout time.Duration
	// MaxHeaderBytes of a request. Default 1 MiB.
	MaxHeaderBytes int
	// MaxConnections open at once per listener; more wait in the kernel's
	// backlog. Default 1000.
	MaxConnections int
	// MaxInflight requests other than streams; more get 429. Default 200.
	MaxInflight int
	// MaxStreams: exec, attach, port-forward and followed logs at once;
	// more get 429. Default 800: the kubelet has no such bound, and real
	// clients hold many (the e2e DRA driver proxy keeps 10 port-forwards
	// open per socket, two sockets per driver, and execs beside them); it
	// leaves MaxConnections room for the rest.
	MaxStreams int
}

func (l Limits) withDefaults() Limits {
	def := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	defInt := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&l.ReadHeaderTimeout, 10*time.Second)
	def(&l.IdleTimeout, 90*time.Second)
	def(&l.ReadWriteTimeout, 4*time.Hour)
	defInt(&l.MaxHeaderBytes, 1<<20)
	defInt(&l.MaxConnections, 1000)
	defInt(&l.MaxInflight, 200)
	defInt(&l.MaxStreams, 800)
	return l
}

// Daemon is a running nodelet-server.
type Daemon struct {
	cfg         *config.Config
	log         *slog.Logger
	bus         *bus.Conn
	cri         *cri.Clients
	nodeName    string
	pods        *podIndex
	runAuthn    func(ctx context.Context)
	clock       clock.Clock
	view        *nodeView
	stats       *statsProvider
	machine     *hostinfo.Machine
	machineF    func() (*cadvisorapi.MachineInfo, error)
	limits      Limits
	inflight    chan struct{}
	streamSlots chan struct{}
	nodeKube    kubernetes.Interface
	addr        atomic.Value
	roAddr      atomic.Value
	hzAddr      atomic.Value

	// The parts behind the handler.
	auth      *authFilter
	readOnly  *readOnlyAPI
	metrics   *metricsAPI
	streams   *streamer
	logs      *containerLogs
	profiling *profiling
}

// New builds a Daemon: authenticator and authorizer as configured.
func New(o Options) (*Daemon, error) {
	if o.Config == nil || o.Bus == nil || o.CRI == nil {
		return nil, fmt.Errorf("server: Config, Bus and CRI are required")
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Daemons == nil {
		for _, d := range bus.Daemons {
			if d != bus.KubeletServer {
				o.Daemons = append(o.Daemons, d)
			}
		}
	}
	if o.SystemLogDir == "" {
		o.SystemLogDir = "/var/log"
	}
	ips, err := hostinfo.NodeAddresses(o.Config.Node.Address)
	if err != nil {
		return nil, err
	}
	s := &Daemon{cfg: o.Config, log: o.Log, bus: o.Bus, cri: o.CRI, nodeName: o.Config.Node.Name,
		pods: newPodIndex(), view: newNodeView(), clock: o.Clock,
		machine: &hostinfo.Machine{}, machineF: o.Machine, limits: o.Limits.withDefaults(),
		nodeKube: o.NodeKube}
	if s.nodeKube == nil {
		s.nodeKube = o.Kube
	}
	s.inflight, s.streamSlots = make(chan struct{}, s.limits.MaxInflight), make(chan struct{}, s.limits.MaxStreams)
	s.stats = &statsProvider{nodeName: s.nodeName, stateDir: o.Config.Node.StateDir, podLogsDir: o.Config.Node.PodLogsDir,
		hostIPs: ips, cri: o.CRI, machine: s.machine, clock: o.Clock, volumes: s.view.volumeStats,
		cgroups: podCgroupsOf(o.Config, o.Log)}
	s.readOnly = &readOnlyAPI{log: o.Log, clock: o.Clock, started: o.Clock.Now(),
		staleAfter: o.Config.Status.HeartbeatStaleAfter, daemons: o.Daemons, bus: o.Bus,
		view: s.view, pods: s.pods, stats: s.stats, machine: s.machineInfo, rt: o.CRI.Runtime,
		systemLogs: o.Config.Server.EnableSystemLogHandler, logDir: o.SystemLogDir}
	s.metrics = &metricsAPI{stateDir: o.Config.Node.StateDir, volumes: s.view.volumeStats, http: newHTTPMetrics(),
		pod:      s.pods.byUID,
		cadvisor: &criInfoProvider{machine: s.machineInfo, stats: s.stats, rt: o.CRI.Runtime}}
	s.streams = &streamer{log: o.Log, pods: s.pods, rt: o.CRI.Runtime}
	s.logs = &containerLogs{log: o.Log, pods: s.pods, rt: o.CRI.Runtime}
	s.profiling = newProfiling(o.Config.Server.EnableProfilingHandler, o.Config.Server.EnableContentionProfiling, o.Config.Node.StateDir)
	localCA, err := ensureLocalClient(o.Config.Node.StateDir)
	if err != nil {
		return nil, fmt.Errorf("node-local client certificate: %w", err)
	}
	s.auth = &authFilter{log: o.Log, nodeName: s.nodeName,
		strictStreamingVerbs: o.Config.Server.Authorization.StrictStreamingVerbs}
	if s.auth.local, err = newLocalAdmin(localCA); err != nil {
		return nil, err
	}
	if s.auth.authn, s.runAuthn, err = buildAuthn(o.Config.Server.Authentication, o.Kube, o.Log); err != nil {
		return nil, err
	}
	if s.auth.authz, err = buildAuthz(o.Config.Server.Authorization, o.Kube, o.Clock, o.Log); err != nil {
		return nil, err
	}
	return s, nil
}

// machineInfo is cAdvisor's MachineInfo, read once.
func (s *Daemon) machineInfo() (*cadvisorapi.MachineInfo, error) {
	if s.machineF != nil {
		return s.machineF()
	}
	return s.machine.Info()
}

// Addr is the address the kubelet API listens on, once it does.
func (s *Daemon) Addr() string {
	v, _ := s.addr.Load().(string)
	return v
}

// ReadOnlyAddr is the address of the read-only port, once it listens.
func (s *Daemon) ReadOnlyAddr() string {
	v, _ := s.roAddr.Load().(string)
	return v
}

// Run serves until ctx ends.
func (s *Daemon) Run(ctx context.Context) error {
	tlsCfg, err := serverTLS(s.cfg.Server, s.log)
	if err != nil {
		return err
	}
	if err := s.setServingCertificate(ctx, tlsCfg); err != nil {
		return err
	}
	addr := net.JoinHostPort(s.cfg.Server.Address, strconv.Itoa(s.cfg.Server.Port))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("server.address/server.port %s: %w", addr, err)
	}
	s.addr.Store(ln.Addr().String())
	srv := s.httpServer(s.Handler())
	srv.TLSConfig = tlsCfg
	servers := []*http.Server{srv}
	ln = netutil.LimitListener(ln, s.limits.MaxConnections)

	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := srv.Serve(tls.NewListener(ln, tlsCfg)); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("Kubelet API stopped", "address", addr, "err", err)
		}
	}()
	if roAddr, key := s.cfg.ReadOnlyAddress(); roAddr != "" {
		if key != "server.readOnlyPort" {
			s.log.Warn("Deprecated configuration key: set server.readOnlyPort (served on server.address) instead", "key", key, "address", roAddr)
		}
		rl, err := net.Listen("tcp", roAddr)
		if err != nil {
			_ = srv.Close()
			return fmt.Errorf("%s %s: %w", key, roAddr, err)
		}
		s.roAddr.Store(rl.Addr().String())
		rl = netutil.LimitListener(rl, s.limits.MaxConnections)
		ro := s.httpServer(s.readOnlyHandler())
		servers = append(servers, ro)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := ro.Serve(rl); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.log.Error("Read-only port stopped", "address", roAddr, "err", err)
			}
		}()
		s.log.Info("Serving the read-only API", "address", rl.Addr().String())
	}
	s.log.Info("Serving the kubelet API", "address", ln.Addr().String(), "node", s.nodeName,
		"authorizationMode", s.cfg.Server.Authorization.Mode)

	s.runHealthz(ctx, &wg)
	s.view.watch(ctx, &wg, s.bus, s.pods, s.log, s.clock)
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.runAuthn(ctx)
	}()
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, h := range servers {
		// Streams (logs -f, exec) are hijacked or long: Shutdown waits for
		// plain requests only, Close ends the rest.
		_ = h.Shutdown(sctx)
		_ = h.Close()
	}
	wg.Wait()
	return nil
}

// httpServer is an HTTP server for h within the limits.
func (s *Daemon) httpServer(h http.Handler) *http.Server {
	l := s.limits
	return &http.Server{Handler: h, ReadHeaderTimeout: l.ReadHeaderTimeout, IdleTimeout: l.IdleTimeout,
		ReadTimeout: l.ReadWriteTimeout, WriteTimeout: l.ReadWriteTimeout, MaxHeaderBytes: l.MaxHeaderBytes,
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelDebug)}
}

// Run is the daemon: it connects to the runtime and, with a kubeconfig
// (server.kubeconfig, else the node's identity node.kubeconfig), to the API
// server for TokenReview and SubjectAccessReview, then serves until ctx ends.
func Run(ctx context.Context, env *daemon.Env) error {
	cfg := env.Config
	clients, err := cri.Dial(ctx, &cfg.Runtime)
	if err != nil {
		return err
	}
	o := Options{Deps: env.Deps(), CRI: clients}
	if o.Kube, o.NodeKube, err = KubeClients(ctx, cfg, env.Log); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	s, err := New(o)
	if err != nil {
		return err
	}
	return s.Run(ctx)
}

// KubeClients are the client for TokenReview and SubjectAccessReview
// (server.kubeconfig, else the node's identity) and the node's identity
// (node.kubeconfig, through kubeclient: waiting for a bootstrapped
// credential, following renewals); nil on a standalone node.
func KubeClients(ctx context.Context, cfg *config.Config, log *slog.Logger) (review, node kubernetes.Interface, err error) {
	if cfg.NodeKubeconfig() != "" {
		rc, err := kubeclient.RESTConfig(ctx, cfg, log)
		if err != nil {
			return nil, nil, err
		}
		rc.UserAgent = "nodelet-server/" + cfg.Node.Name
		if node, err = kubernetes.NewForConfig(rc); err != nil {
			return nil, nil, err
		}
	}
	review = node
	if path := cfg.Server.Kubeconfig; path != "" {
		rc, err := clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			return nil, nil, fmt.Errorf("server.kubeconfig %s: %w", path, err)
		}
		rc.UserAgent = "nodelet-server/" + cfg.Node.Name
		rc.QPS, rc.Burst = float32(cfg.Sources.KubeAPIQPS), cfg.Sources.KubeAPIBurst
		if review, err = kubernetes.NewForConfig(rc); err != nil {
			return nil, nil, err
		}
	}
	return review, node, nil
}
