// Package status is nodelet-status, the kubelet's status manager, node
// status and Lease, BirthCry and event recorder as one daemon.
//
// It watches the desired pods, admission verdicts, observed runtime state,
// probe results, evictions, runtime state and node pressure on the bus,
// computes each pod's v1.PodStatus the way the kubelet's
// generateAPIPodStatus does (ComputePodStatus), and writes it to the
// status bucket, never backwards. With a kubeconfig it also writes to the
// API server: pod statuses, mirror pods, the end of graceful deletion, the
// Node and its Lease, and every event on the bus.
package status

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	cadvisorapi "github.com/google/cadvisor/lib/model"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/internal/cri"
	"github.com/nodelet/nodelet/internal/daemon"
	"github.com/nodelet/nodelet/internal/hostinfo"
	"github.com/nodelet/nodelet/internal/kubeclient"
)

// Options are what a Daemon runs with. Run builds them from the daemon's
// environment; tests build them directly.
type Options struct {
	daemon.Deps
	// CRI is the container runtime, for the runtime version, the node's
	// images and the stats of pods; nil leaves those out.
	CRI *cri.Clients
	// Kube is the node's client (node.kubeconfig); nil runs standalone.
	Kube kubernetes.Interface
	// EventsKube posts events, rate limited by status.eventRecordQPS and
	// eventBurst; nil uses Kube.
	EventsKube kubernetes.Interface
	// Clock defaults to the real clock.
	Clock clock.WithTicker
	// Machine returns cAdvisor's MachineInfo; nil reads the machine.
	Machine MachineInfoFunc
}

// MachineInfoFunc returns the node's cAdvisor MachineInfo.
type MachineInfoFunc func() (*cadvisorapi.MachineInfo, error)

// Daemon is a running nodelet-status.
type Daemon struct {
	cfg      *config.Config
	log      *slog.Logger
	bus      *bus.Conn
	cri      *cri.Clients
	clock    clock.WithTicker
	nodeName string
	hostname string
	hostIPs  []string

	st      *store
	statusW *bus.Writer
	nodeW   *bus.Writer
	metrics *metrics
	// kubelet are the kubelet's families of the same facts.
	kubelet  *kubeletMetrics
	registry *prometheus.Registry
	machine  *hostinfo.Machine
	machineF MachineInfoFunc
	node     *nodeSync
	api      *apiSync
	events   []*eventPoster
}

// New builds a Daemon. It checks what can be checked before running: the
// node's address.
func New(o Options) (*Daemon, error) {
	if o.Config == nil || o.Bus == nil {
		return nil, fmt.Errorf("status: Config and Bus are required")
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	ips, err := hostinfo.NodeAddresses(o.Config.Node.Address)
	if err != nil {
		return nil, err
	}
	// node.name plays the kubelet's --hostname-override: the hostname label
	// and address name the node as admission and the API know it.
	hostname := o.Config.Node.Name
	s := &Daemon{
		cfg: o.Config, log: o.Log, bus: o.Bus, cri: o.CRI, clock: o.Clock,
		nodeName: o.Config.Node.Name, hostname: strings.ToLower(hostname), hostIPs: ips,
		st:       newStore(),
		registry: prometheus.NewRegistry(), machine: &hostinfo.Machine{}, machineF: o.Machine,
	}
	if s.hostname == "" {
		s.hostname = s.nodeName
	}
	s.metrics = newMetrics(s.registry, s.st)
	if o.Bus != nil {
		s.registry.MustRegister(newEventCopyCollector(o.Bus.JS))
	}
	s.kubelet = newKubeletMetrics(s.registry, s.nodeName)
	s.statusW = bus.NewWriter(o.Bus, bus.BucketStatus, func() error {
		s.st.mu.Lock()
		s.st.markAllDirty()
		s.st.mu.Unlock()
		return nil
	})
	s.nodeW = bus.NewWriter(o.Bus, bus.BucketNode, func() error { s.st.wakeNode(); return nil })
	s.node = newNodeSync(s, o.Kube)
	if o.Kube != nil {
		s.api = newAPISync(s, o.Kube)
		ek := o.EventsKube
		if ek == nil {
			ek = o.Kube
		}
		s.events = newEventPosters(s, ek)
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

// Gatherer is nodelet-status's metrics registry, served on its metrics
// socket for nodelet-server's /metrics.
func (s *Daemon) Gatherer() prometheus.Gatherer { return s.registry }

// Run serves until ctx ends.
func (s *Daemon) Run(ctx context.Context) error {
	mode := "standalone"
	if s.api != nil {
		mode = "api"
	}
	s.log.Info("Starting nodelet-status", "node", s.nodeName, "mode", mode, "nodeIPs", s.hostIPs)
	// BirthCry: the node agent started. In API mode the events consumer
	// posts it like every other event.
	s.emitNodeEvent("Normal", EventStarting, "Starting nodelet.")

	var wg sync.WaitGroup
	goRun := func(f func()) {
		wg.Add(1)
		go func() { defer wg.Done(); f() }()
	}
	goRun(func() { s.st.watchAll(ctx, s.bus) })
	goRun(func() { s.statusLoop(ctx) })
	goRun(func() { s.node.run(ctx) })
	if s.api != nil {
		goRun(func() { s.api.run(ctx) })
		goRun(func() { s.runLease(ctx, s.api.kube) })
		for _, p := range s.events {
			goRun(func() { p.run(ctx) })
		}
	}
	<-ctx.Done()
	wg.Wait()
	return nil
}

// Run is the daemon: it connects to the runtime and, with the node's
// identity (node.kubeconfig), to the API server, then serves until ctx
// ends. It owns that identity's certificate: TLS bootstrap from
// node.bootstrapKubeconfig and renewal with node.rotateCertificates
// (kubeclient.StartClientCertificate), before it registers the node, as
// the kubelet does before it starts.
func Run(ctx context.Context, env *daemon.Env) error {
	cfg := env.Config
	o := Options{Deps: env.Deps()}
	clients, err := cri.Dial(ctx, &cfg.Runtime)
	if err != nil {
		env.Log.Warn("No container runtime: runtime version, images and pod stats are left out", "err", err)
	} else {
		o.CRI = clients
	}
	if cfg.NodeKubeconfig() != "" {
		if err := kubeclient.StartClientCertificate(ctx, cfg, env.Log); err != nil {
			return err
		}
		if o.Kube, o.EventsKube, err = KubeClients(ctx, cfg, env.Log); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
	s, err := New(o)
	if err != nil {
		return err
	}
	// nodelet-server federates these into the node's /metrics.
	env.SetMetrics(s.Gatherer())
	return s.Run(ctx)
}

// KubeClients builds the node's API clients (node.kubeconfig, through
// kubeclient): one for objects, rate limited by
// sources.kubeAPIQPS/kubeAPIBurst, and one for events, rate limited by
// status.eventRecordQPS/eventBurst (the kubelet's two clients).
func KubeClients(ctx context.Context, cfg *config.Config, log *slog.Logger) (kubernetes.Interface, kubernetes.Interface, error) {
	rc, err := kubeclient.RESTConfig(ctx, cfg, log)
	if err != nil {
		return nil, nil, err
	}
	rc.UserAgent = "nodelet-status/" + cfg.Node.Name
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, nil, err
	}
	ec := *rc
	ec.QPS, ec.Burst = float32(cfg.Status.EventRecordQPS), cfg.Status.EventBurst
	events, err := kubernetes.NewForConfig(&ec)
	if err != nil {
		return nil, nil, err
	}
	return kube, events, nil
}
