package gc

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/internal/podutil"
	"github.com/nodelet/nodelet/schemas"
)

// Graceful node shutdown: the kubelet's nodeshutdown manager
// (pkg/kubelet/nodeshutdown/nodeshutdown_manager_linux.go and
// nodeshutdown_manager.go). With gc.shutdownGracePeriod set, nodelet-gc
// holds a systemd-logind "delay" inhibitor lock on shutdown. When logind
// signals PrepareForShutdown(true) the node is shutting down: the pressure
// record says so (admission refuses new pods with NodeShutdown, status
// reports the node NotReady "node is shutting down"), and the pods are
// terminated by priority group — non-critical pods with
// shutdownGracePeriod - shutdownGracePeriodCriticalPods, then critical pods
// with shutdownGracePeriodCriticalPods — each through an eviction record
// (reason Terminated, the kubelet's message, the group's grace period or the
// pod's own when shorter), which the runtime kills and status turns into
// Failed with a DisruptionTarget condition. Then the lock is released and
// logind goes on. PrepareForShutdown(false) (a cancelled shutdown) takes
// the lock again.
const (
	// The kubelet's nodeShutdownReason and nodeShutdownMessage.
	shutdownReason  = "Terminated"
	shutdownMessage = "Pod was terminated in response to imminent node shutdown."
	// The kubelet's events.NodeShutdown event reason (on the node).
	eventNodeShutdown = "NodeShutdown"
	// dbusReconnectPeriod between attempts to watch logind again.
	dbusReconnectPeriod = time.Second
	// defaultPriority is scheduling.DefaultPriorityWhenNoDefaultClassExists.
	defaultPriority = 0
)

// shutdownGroup is the kubelet's ShutdownGracePeriodByPodPriority with its
// pods.
type shutdownGroup struct {
	Priority    int32
	GracePeriod int64 // seconds
	Pods        []*corev1.Pod
}

// shutdownGroups is the kubelet's migrateConfig then groupByPriority:
// pods of a priority below system-cluster-critical in the first group, the
// others in the second (by spec.priority alone, as the kubelet). nil when
// graceful shutdown is off.
func shutdownGroups(total, critical time.Duration, pods []*corev1.Pod) []shutdownGroup {
	if total <= 0 || critical > total {
		return nil
	}
	groups := []shutdownGroup{
		{Priority: defaultPriority, GracePeriod: int64((total - critical) / time.Second)},
		{Priority: podutil.SystemCriticalPriority, GracePeriod: int64(critical / time.Second)},
	}
	for _, p := range pods {
		if p.Spec.Priority != nil && *p.Spec.Priority >= podutil.SystemCriticalPriority {
			groups[1].Pods = append(groups[1].Pods, p)
		} else {
			groups[0].Pods = append(groups[0].Pods, p)
		}
	}
	for i := range groups {
		sort.Slice(groups[i].Pods, func(a, b int) bool { return groups[i].Pods[a].UID < groups[i].Pods[b].UID })
	}
	return groups
}

// shutdownManager watches logind for the gc daemon.
type shutdownManager struct {
	policy    *config.GCConfig
	log       *slog.Logger
	clock     clock.Clock
	pods      evictionPods
	evictions evictionWriter
	events    nodeEvents
	pressure  shutdownPressure
	connect   func() (inhibiter, error)

	mu           sync.Mutex
	conn         inhibiter
	lock         inhibitLock
	shuttingDown bool
}

// shutdownPressure says in the pressure record that the node is shutting
// down (admission refuses new pods, status reports the node NotReady).
type shutdownPressure interface {
	republishPressure(ctx context.Context, shuttingDown bool)
}

var (
	_ evictionPods     = (*podState)(nil)
	_ evictionWriter   = (*evictionRecords)(nil)
	_ nodeEvents       = (*eventRecorder)(nil)
	_ shutdownPressure = (*evictionManager)(nil)
)

// newShutdownManager builds gc's shutdown manager from its parts.
func newShutdownManager(g *Daemon, connect func() (inhibiter, error)) *shutdownManager {
	return &shutdownManager{
		policy: &g.cfg.GC, log: g.log, clock: g.clock,
		pods: g.state, evictions: g.evictions, events: g.events, pressure: g.eviction,
		connect: connect,
	}
}

// periodRequested is the whole shutdownGracePeriod.
func (s *shutdownManager) periodRequested() time.Duration { return s.policy.ShutdownGracePeriod }

// run is the kubelet's Start: watch logind, and watch again (every
// dbusReconnectPeriod) whenever the watch ends or cannot start.
func (s *shutdownManager) run(ctx context.Context) {
	log := s.log
	log.Info("Creating node shutdown manager", "shutdownGracePeriodRequested", s.periodRequested(),
		"shutdownGracePeriodCriticalPods", s.policy.ShutdownGracePeriodCriticalPods)
	for {
		stop, err := s.start(ctx)
		if err != nil {
			log.Error("Unable to watch the node for shutdown events", "err", err)
		} else {
			select {
			case <-stop:
			case <-ctx.Done():
			}
		}
		select {
		case <-ctx.Done():
			s.mu.Lock()
			if s.conn != nil {
				_ = s.conn.Close()
			}
			s.mu.Unlock()
			return
		case <-s.clock.After(dbusReconnectPeriod):
		}
	}
}

// start connects, checks logind's InhibitDelayMaxSec, takes the lock and
// handles PrepareForShutdown signals until the connection ends (stop is
// closed then).
func (s *shutdownManager) start(ctx context.Context) (chan struct{}, error) {
	conn, err := s.connect()
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.conn != nil {
		_ = s.conn.Close()
	}
	s.conn = conn
	s.mu.Unlock()
	ok := false
	defer func() {
		if !ok {
			_ = conn.Close()
		}
	}()
	delay, err := conn.CurrentInhibitDelay()
	if err != nil {
		return nil, err
	}
	if want := s.periodRequested(); want > delay {
		// The kubelet writes /etc/systemd/logind.conf.d/99-kubelet.conf and
		// makes logind reload it; nodelet-gc runs with a read-only /etc, so
		// it asks the operator to.
		return nil, fmt.Errorf("logind's InhibitDelayMaxSec (%v) is shorter than gc.shutdownGracePeriod (%v): "+
			"set InhibitDelayMaxSec=%.0f in /etc/systemd/logind.conf.d/ and reload systemd-logind", delay, want, want.Seconds())
	}
	// Subscribed before the lock is taken: the kubelet's start takes the
	// lock first (nodeshutdown_manager_linux.go), and a shutdown that
	// begins between the two is then held for InhibitDelayMaxSec with its
	// PrepareForShutdown never seen. Signals that come before the lock wait
	// in events until the loop below runs.
	events, err := conn.MonitorShutdown(s.log)
	if err != nil {
		return nil, fmt.Errorf("failed to monitor shutdown: %w", err)
	}
	if err := s.acquireLock(conn); err != nil {
		return nil, err
	}
	ok = true
	stop := make(chan struct{})
	go func() {
		defer close(stop)
		for {
			select {
			case <-ctx.Done():
				return
			case active, open := <-events:
				if !open {
					s.log.Error("Ended to watching the node for shutdown events")
					return
				}
				s.handle(ctx, conn, active)
			}
		}
	}()
	return stop, nil
}

// handle is one PrepareForShutdown signal.
func (s *shutdownManager) handle(ctx context.Context, conn inhibiter, active bool) {
	if active {
		s.log.Info("Shutdown manager detected new shutdown event", "event", "shutdown")
		s.events.nodeEvent(corev1.EventTypeNormal, eventNodeShutdown, "Shutdown manager detected shutdown event")
	} else {
		s.log.Info("Shutdown manager detected new shutdown event", "event", "cancelled")
		s.events.nodeEvent(corev1.EventTypeNormal, eventNodeShutdown, "Shutdown manager detected shutdown cancellation")
	}
	s.mu.Lock()
	s.shuttingDown = active
	s.mu.Unlock()
	s.pressure.republishPressure(ctx, active)
	if !active {
		if err := s.acquireLock(conn); err != nil {
			s.log.Error("Cannot take the shutdown inhibitor lock again", "err", err)
		}
		return
	}
	s.killPods(ctx)
	if err := s.release(); err != nil {
		s.log.Error("Cannot release the shutdown inhibitor lock", "err", err)
	}
	s.log.Info("Shutdown manager completed processing shutdown event, node will shutdown shortly")
}

func (s *shutdownManager) acquireLock(conn inhibiter) error {
	lock, err := conn.InhibitShutdown()
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lock != 0 {
		_ = conn.ReleaseInhibitLock(s.lock)
	}
	s.lock = lock
	return nil
}

func (s *shutdownManager) release() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lock == 0 || s.conn == nil {
		return nil
	}
	err := s.conn.ReleaseInhibitLock(s.lock)
	s.lock = 0
	return err
}

// killPods is the kubelet's podManager.killPods: each group in turn, every
// pod of it at once with min(group grace, the pod's own), waiting until
// the runtime reports them terminated or the group's grace period passed.
func (s *shutdownManager) killPods(ctx context.Context) {
	cfg := s.policy
	for _, group := range shutdownGroups(cfg.ShutdownGracePeriod, cfg.ShutdownGracePeriodCriticalPods, s.pods.activePods()) {
		if ctx.Err() != nil || len(group.Pods) == 0 {
			continue
		}
		for _, pod := range group.Pods {
			grace := group.GracePeriod
			if pod.Spec.TerminationGracePeriodSeconds != nil && *pod.Spec.TerminationGracePeriodSeconds <= grace {
				grace = *pod.Spec.TerminationGracePeriodSeconds
			}
			s.log.Info("Shutdown manager killing pod with gracePeriod", "pod", podutil.Ref(pod.Namespace, pod.Name), "podUID", pod.UID, "gracePeriod", grace)
			ev := &schemas.PodEviction{UID: string(pod.UID), Namespace: pod.Namespace, Name: pod.Name,
				Reason: shutdownReason, Message: shutdownMessage, Time: s.clock.Now().UTC(), GracePeriodSeconds: &grace}
			if err := s.evictions.put(ctx, ev); err != nil {
				s.log.Error("Shutdown manager failed killing pod", "pod", podutil.Ref(pod.Namespace, pod.Name), "podUID", pod.UID, "err", err)
				continue
			}
		}
		deadline := s.clock.Now().Add(time.Duration(group.GracePeriod) * time.Second)
		for {
			done := true
			for _, p := range group.Pods {
				done = done && s.pods.observedTerminated(string(p.UID))
			}
			if done {
				s.log.Info("Done waiting for all pods in group to terminate", "gracePeriod", group.GracePeriod, "priority", group.Priority)
				break
			}
			if !s.clock.Now().Before(deadline) {
				s.log.Info("Shutdown manager pod killing time out", "gracePeriod", group.GracePeriod, "priority", group.Priority)
				break
			}
			select {
			case <-ctx.Done():
				return
			case <-s.clock.After(100 * time.Millisecond):
			}
		}
	}
}

// republishPressure writes the pressure record again with shuttingDown,
// keeping the conditions last published.
func (m *evictionManager) republishPressure(ctx context.Context, shuttingDown bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.shuttingDown = shuttingDown
	pressure := map[corev1.NodeConditionType]bool{}
	if m.published != nil {
		for _, c := range m.published.Conditions {
			pressure[c.Type] = c.Status == corev1.ConditionTrue
		}
	}
	if err := m.publishPressure(ctx, pressure, m.clock.Now()); err != nil {
		m.log.Error("Cannot publish that the node is shutting down", "err", err)
	}
}
