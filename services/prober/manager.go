package prober

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/flowcontrol"
	internalapi "k8s.io/cri-api/pkg/apis"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/daemon"
	"github.com/nodelet/nodelet/schemas"
)

// Unhealthy events are limited per pod like client-go's event spam filter
// (EventSourceObjectSpamFilter: a burst of 25, then one per 5 minutes), which
// is what the kubelet's events go through before they reach the API server.
// The failure that changes a published result always gets its event.
const (
	eventBurst = 25
	eventQPS   = 1.0 / 300
)

// restartGrace: a container that was running this long before the prober
// started is not reset to the initial result when no result for it is
// found (the kubelet's kubeletRestartGracePeriod): readiness must not drop
// because the prober restarted.
const restartGrace = 10 * time.Second

// eventSink takes the events the prober emits (a *bus.Conn).
type eventSink interface {
	Emit(schemas.Event)
}

// Options configure a Daemon.
type Options struct {
	// Deps: Bus is the connection as bus.Prober, Log defaults to
	// slog.Default(), Health hears when results cannot be published;
	// Config is not used.
	daemon.Deps
	// Runtime runs exec probes (CRI ExecSync). Without it exec probes error.
	Runtime internalapi.RuntimeService
	// Clock defaults to the real clock.
	Clock clock.WithTicker
	// HostIP is probed for host-network pods whose sandbox reports no IP.
	HostIP string
	// MaxConcurrentProbes in flight; 0 is unbounded.
	MaxConcurrentProbes int
}

// Daemon is the kubelet's probe manager as a bus client: it watches the
// desired pods (probe specs) and the observed runtime state (which
// containers run, their IDs, the pod IP), keeps one worker per probe of
// every running container, and publishes each probe's result to the probes
// bucket when it changes.
type Daemon struct {
	log     *slog.Logger
	clock   clock.WithTicker
	conn    *bus.Conn
	runner  runner
	events  eventSink
	results *results
	hostIP  string
	sem     chan struct{}
	health  func(bool, string)
	start   time.Time
	jitter  func() float64
	wg      sync.WaitGroup

	mu             sync.Mutex
	ctx            context.Context // parent of every worker's context
	pods           map[string]*podState
	desiredSynced  bool
	observedSynced bool
}

// podState is what the manager knows of one pod UID.
type podState struct {
	desired  *corev1.Pod
	observed *schemas.PodObserved
	workers  map[probeKey]*worker
	limiter  flowcontrol.PassiveRateLimiter
}

// New builds nodelet-prober; Run starts it.
func New(o Options) (*Daemon, error) {
	if o.Bus == nil {
		return nil, errors.New("prober: no bus connection")
	}
	m := newManager(o, newHandlers(o.Runtime), nil)
	m.conn = o.Bus
	m.events = o.Bus
	return m, nil
}

func newManager(o Options, r runner, ev eventSink) *Daemon {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	m := &Daemon{
		log:     o.Log,
		clock:   o.Clock,
		runner:  r,
		events:  ev,
		results: newResults(o.Log, o.Clock),
		hostIP:  o.HostIP,
		health:  o.SetHealth,
		start:   o.Clock.Now(),
		jitter:  rand.Float64,
		ctx:     context.Background(),
		pods:    map[string]*podState{},
	}
	if o.MaxConcurrentProbes > 0 {
		m.sem = make(chan struct{}, o.MaxConcurrentProbes)
	}
	return m
}

// Run loads the results this prober published before (they are the
// starting point: nothing is reset or re-probed into a failure because the
// prober restarted), then follows the desired and observed buckets until
// ctx is done. Stopping publishes what is pending and deletes nothing.
func (m *Daemon) Run(parent context.Context) error {
	if m.conn == nil {
		return errors.New("prober: no bus connection")
	}
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	m.mu.Lock()
	m.start = m.clock.Now()
	m.ctx = ctx
	m.mu.Unlock()

	w := bus.NewWriter(m.conn, bus.BucketProbes, func() error { m.results.republish(); return nil })
	if err := m.loadResults(ctx, w); err != nil {
		if parent.Err() != nil {
			return nil
		}
		return err
	}

	// The mirrors re-establish a lost watch and report the outage
	// (bus.Mirror); they return when ctx ends.
	var loops sync.WaitGroup
	loops.Add(2)
	go func() {
		defer loops.Done()
		m.results.publish(ctx, w, m.health)
	}()
	go func() {
		defer loops.Done()
		bus.RunAll(ctx,
			bus.NewMirror(m.conn, bus.BucketDesired, ">", m.onDesired),
			bus.NewMirror(m.conn, bus.BucketObserved, ">", m.onObserved))
	}()
	<-ctx.Done()
	loops.Wait()
	m.wg.Wait()
	return nil
}

// loadResults seeds the results from the probes bucket. A key or value
// that does not parse is deleted: a worker publishes a fresh one.
func (m *Daemon) loadResults(ctx context.Context, w *bus.Writer) error {
	keys, err := w.Keys(ctx)
	if err != nil {
		return fmt.Errorf("prober: read %s: %w", bus.BucketProbes, err)
	}
	for _, key := range keys {
		data, _, ok, err := w.Data(ctx, key)
		if err != nil {
			return fmt.Errorf("prober: read %s: %w", bus.BucketProbes, err)
		}
		if !ok {
			continue
		}
		k, okKey := parseBusKey(key)
		pr, derr := decodeStored(data)
		if !okKey || derr != nil {
			m.log.Error("Deleting stored probe result that does not parse", "key", key, "err", derr)
			if _, err := w.Delete(ctx, key); err != nil {
				return fmt.Errorf("prober: delete %s/%s: %w", bus.BucketProbes, key, err)
			}
			continue
		}
		m.results.seed(k, pr)
	}
	m.log.Info("Loaded probe results", "count", len(keys))
	return nil
}

func (m *Daemon) onDesired(u bus.Update[schemas.PodDesired]) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch u.Kind {
	case bus.Put:
		if u.Value.Pod == nil {
			m.log.Error("Ignoring desired pod without a pod object", "subject", bus.KVSubject(bus.BucketDesired, u.Key))
			return
		}
		m.pod(u.Key).desired = u.Value.Pod
		m.reconcileLocked(u.Key)
	case bus.Deleted:
		if ps, ok := m.pods[u.Key]; ok {
			ps.desired = nil
			m.reconcileLocked(u.Key)
		}
	case bus.Synced:
		m.desiredSynced = true
		m.reconcileAllLocked()
	case bus.Reset:
		m.desiredSynced = false
		for _, ps := range m.pods {
			ps.desired = nil
		}
	}
}

func (m *Daemon) onObserved(u bus.Update[schemas.PodObserved]) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch u.Kind {
	case bus.Put:
		ps := m.pod(u.Key)
		old := ps.observed
		ps.observed = u.Value
		m.reconcileLocked(u.Key)
		// A restarted container gets its reset result at once, not a
		// period later.
		for _, c := range allObserved(u.Value) {
			if prev := findObserved(old, c.Name); prev != nil && prev.ContainerID != c.ContainerID {
				m.triggerLocked(u.Key, c.Name)
			}
		}
	case bus.Deleted:
		if ps, ok := m.pods[u.Key]; ok {
			ps.observed = nil
			m.reconcileLocked(u.Key)
		}
	case bus.Synced:
		m.observedSynced = true
		m.reconcileAllLocked()
	case bus.Reset:
		m.observedSynced = false
		for _, ps := range m.pods {
			ps.observed = nil
		}
	}
}

func (m *Daemon) pod(uid string) *podState {
	ps, ok := m.pods[uid]
	if !ok {
		ps = &podState{workers: map[probeKey]*worker{}}
		m.pods[uid] = ps
	}
	return ps
}

func (m *Daemon) synced() bool { return m.desiredSynced && m.observedSynced }

// reconcileAllLocked reconciles every pod known from the buckets or from a
// stored result (so results of pods that went away while the prober was
// down are deleted).
func (m *Daemon) reconcileAllLocked() {
	if !m.synced() {
		return
	}
	for _, k := range m.results.keys() {
		m.pod(k.uid)
	}
	for uid := range m.pods {
		m.reconcileLocked(uid)
	}
}

// reconcileLocked starts a worker for every probe of every container that
// has been created (has a container ID) and may still run, stops the
// workers of containers and pods that are gone, and deletes their results.
// A pod that left the desired bucket but still runs (terminating) keeps the
// workers it has and gets no new ones.
func (m *Daemon) reconcileLocked(uid string) {
	if !m.synced() {
		return
	}
	ps := m.pods[uid]
	if ps == nil {
		return
	}
	pod := ps.desired
	if pod == nil {
		for _, w := range ps.workers {
			pod = w.pod
			break
		}
	}
	alive := ps.observed != nil && !ps.observed.Terminated
	want := map[probeKey]*corev1.Container{}
	keep := map[probeKey]bool{}
	if alive && pod != nil {
		for _, c := range probeContainers(pod) {
			oc := findObserved(ps.observed, c.Name)
			if oc != nil && finished(pod, c, oc) {
				continue
			}
			for _, kind := range probeKinds(c) {
				k := probeKey{uid: uid, container: c.Name, kind: kind}
				keep[k] = true
				if oc == nil || oc.ContainerID == "" {
					continue
				}
				if ps.desired == nil && ps.workers[k] == nil {
					continue
				}
				want[k] = c
			}
		}
	}
	for k, w := range ps.workers {
		if want[k] == nil {
			w.stop()
			delete(ps.workers, k)
		}
	}
	for k, c := range want {
		if ps.workers[k] == nil {
			w := newWorker(m, k, pod, c)
			ps.workers[k] = w
			m.wg.Add(1)
			go func() {
				defer m.wg.Done()
				w.run()
			}()
		}
	}
	for _, k := range m.results.keys() {
		if k.uid == uid && !keep[k] {
			m.results.remove(k)
		}
	}
	if len(ps.workers) == 0 && ps.desired == nil && ps.observed == nil {
		delete(m.pods, uid)
	}
}

func (m *Daemon) triggerLocked(uid, container string, kinds ...string) {
	ps := m.pods[uid]
	if ps == nil {
		return
	}
	for k, w := range ps.workers {
		if k.container != container {
			continue
		}
		if len(kinds) > 0 && !contains(kinds, k.kind) {
			continue
		}
		w.poke()
	}
}

func (m *Daemon) trigger(uid, container string, kinds ...string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.triggerLocked(uid, container, kinds...)
}

// view is what a worker needs to know of its container right now.
type view struct {
	pod       *corev1.Pod // the desired pod, nil once it left
	container *schemas.ContainerObserved
	podIP     string
	// deleting: the pod is being deleted or killed; liveness and startup
	// go quiet (the kubelet's StopLivenessAndStartup and graceful shutdown).
	deleting bool
}

func (m *Daemon) view(k probeKey) (view, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ps := m.pods[k.uid]
	if ps == nil || ps.observed == nil {
		return view{}, false
	}
	v := view{pod: ps.desired}
	if c := findObserved(ps.observed, k.container); c != nil {
		cc := *c
		v.container = &cc
	}
	if sb := ps.observed.Sandbox; sb != nil && len(sb.IPs) > 0 {
		v.podIP = sb.IPs[0]
	} else if ps.desired != nil && ps.desired.Spec.HostNetwork {
		v.podIP = m.hostIP
	}
	v.deleting = ps.observed.Terminating ||
		(ps.desired == nil && m.desiredSynced) ||
		(ps.desired != nil && ps.desired.DeletionTimestamp != nil)
	return v, true
}

// started says whether the container passed its startup probe (or has
// none): liveness and readiness wait for it.
func (m *Daemon) started(k probeKey, c *corev1.Container, containerID string) bool {
	if c.StartupProbe == nil {
		return true
	}
	pr, ok := m.results.get(probeKey{uid: k.uid, container: k.container, kind: schemas.ProbeStartup})
	return ok && pr.ContainerID == containerID && pr.Result == schemas.ProbeSuccess
}

// emit sends a Warning event about w's container, within the pod's event
// budget unless force.
func (m *Daemon) emit(w *worker, reason, message string, force bool) {
	if m.events == nil {
		return
	}
	m.mu.Lock()
	ps := m.pods[w.key.uid]
	allowed := force
	if ps != nil {
		if ps.limiter == nil {
			ps.limiter = flowcontrol.NewTokenBucketPassiveRateLimiterWithClock(eventQPS, eventBurst, m.clock)
		}
		if ps.limiter.TryAccept() {
			allowed = true
		}
	}
	m.mu.Unlock()
	if !allowed {
		return
	}
	m.events.Emit(schemas.Event{
		Object: corev1.ObjectReference{
			Kind:       "Pod",
			APIVersion: "v1",
			Namespace:  w.pod.Namespace,
			Name:       w.pod.Name,
			UID:        w.pod.UID,
			FieldPath:  w.fieldPath,
		},
		Type:    corev1.EventTypeWarning,
		Reason:  reason,
		Message: message,
		Time:    m.clock.Now().UTC(),
	})
}

// workerCount is the number of running workers (for tests).
func (m *Daemon) workerCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, ps := range m.pods {
		n += len(ps.workers)
	}
	return n
}
