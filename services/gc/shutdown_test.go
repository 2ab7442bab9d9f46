package gc

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/testenv"
	"github.com/nodelet/nodelet/schemas"
)

// The kubelet's migrateConfig and groupByPriority: non-critical pods get
// shutdownGracePeriod - shutdownGracePeriodCriticalPods, pods of
// system-critical priority the critical share; off without a period.
func TestShutdownGroups(t *testing.T) {
	pod := func(name string, priority *int32) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(name)}, Spec: corev1.PodSpec{Priority: priority}}
	}
	p := func(v int32) *int32 { return &v }
	pods := []*corev1.Pod{pod("none", nil), pod("low", p(-5)), pod("high", p(1000)), pod("cluster-critical", p(2000000000)), pod("node-critical", p(2000001000))}
	groups := shutdownGroups(30*time.Second, 10*time.Second, pods)
	if len(groups) != 2 || groups[0].GracePeriod != 20 || groups[1].GracePeriod != 10 {
		t.Fatalf("groups %+v", groups)
	}
	names := func(g shutdownGroup) (out []string) {
		for _, p := range g.Pods {
			out = append(out, p.Name)
		}
		return out
	}
	if got := names(groups[0]); len(got) != 3 || got[0] != "high" || got[1] != "low" || got[2] != "none" {
		t.Errorf("non-critical group %v", got)
	}
	if got := names(groups[1]); len(got) != 2 || got[0] != "cluster-critical" || got[1] != "node-critical" {
		t.Errorf("critical group %v", got)
	}
	if g := shutdownGroups(0, 0, pods); g != nil {
		t.Errorf("off: %+v", g)
	}
	if g := shutdownGroups(10*time.Second, 0, pods); g[0].GracePeriod != 10 || g[1].GracePeriod != 0 {
		t.Errorf("no critical share: %+v", g)
	}
}

func evictionOf(t *testing.T, c *bus.Conn, uid types.UID) *schemas.PodEviction {
	t.Helper()
	ev, _, err := bus.Get[schemas.PodEviction](testCtx(t), c, bus.BucketEvictions, string(uid))
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

func shuttingDown(t *testing.T, c *bus.Conn) bool {
	t.Helper()
	np, _, err := bus.Get[schemas.NodePressure](testCtx(t), c, bus.BucketPressure, bus.KeyPressure)
	return err == nil && np != nil && np.ShuttingDown
}

// The shutdown manager against a logind stand-in on a real dbus-daemon:
// it refuses to start when logind's InhibitDelayMaxSec is shorter than
// shutdownGracePeriod; else it holds a delay lock, and on
// PrepareForShutdown marks the node shutting down, evicts the non-critical
// pods (grace: the group's or the pod's own when shorter) and only once
// they are down the critical ones, then releases the lock; a cancellation
// clears the mark and takes the lock again.
func TestShutdownManagerWithLogind(t *testing.T) {
	e := newTestEnv(t)
	e.cfg.GC.ShutdownGracePeriod = 30 * time.Second
	e.cfg.GC.ShutdownGracePeriodCriticalPods = 10 * time.Second
	g, _ := e.newGC()
	status := e.bus.Connect(bus.Status) // reads what status reads

	short := testenv.StartSystemBus(t)
	shortLogind := testenv.StartLogind(t, short, 5*time.Second)
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", short)
	if _, err := newShutdownManager(g, connectLogind).start(testCtx(t)); err == nil ||
		!strings.Contains(err.Error(), "logind's InhibitDelayMaxSec (5s) is shorter than gc.shutdownGracePeriod (30s)") {
		t.Fatalf("start with a short InhibitDelayMaxSec: %v", err)
	}
	if l := shortLogind.Inhibitors(); len(l) != 0 {
		t.Fatalf("locks taken anyway: %v", l)
	}

	addr := testenv.StartSystemBus(t)
	logind := testenv.StartLogind(t, addr, time.Minute)
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", addr)
	normal, quick, critical := newPod("normal"), newPod("quick"), newPod("critical")
	quick.Spec.TerminationGracePeriodSeconds = ptrTo[int64](3)
	critical.Spec.Priority = ptrTo[int32](2000001000)
	for _, p := range []*corev1.Pod{normal, quick, critical} {
		e.desire(p)
		e.observe(p, false)
	}
	waitFor(t, "gc to see the pods running", func() bool { return len(g.state.activePods()) == 3 })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sm := newShutdownManager(g, connectLogind)
	done := make(chan struct{})
	go func() { sm.run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	waitFor(t, "a delay lock", func() bool {
		return len(logind.Inhibitors()) == 1 && logind.Inhibitors()[0] == "shutdown:nodelet:delay"
	})

	logind.PrepareForShutdown(true)
	waitFor(t, "the node marked shutting down", func() bool { return shuttingDown(t, status) })
	waitFor(t, "the non-critical pods evicted", func() bool {
		return evictionOf(t, status, normal.UID) != nil && evictionOf(t, status, quick.UID) != nil
	})
	for uid, grace := range map[types.UID]int64{normal.UID: 20, quick.UID: 3} {
		ev := evictionOf(t, status, uid)
		if ev.Reason != "Terminated" || ev.Message != "Pod was terminated in response to imminent node shutdown." ||
			ev.GracePeriodSeconds == nil || *ev.GracePeriodSeconds != grace {
			t.Errorf("eviction of %s: %+v (grace %v), want grace %d", uid, ev, ev.GracePeriodSeconds, grace)
		}
	}
	if ev := evictionOf(t, status, critical.UID); ev != nil {
		t.Fatalf("critical pod evicted before the others are down: %+v", ev)
	}
	e.observe(normal, true)
	e.observe(quick, true)
	waitFor(t, "the critical pod evicted", func() bool { return evictionOf(t, status, critical.UID) != nil })
	if ev := evictionOf(t, status, critical.UID); *ev.GracePeriodSeconds != 10 {
		t.Errorf("critical pod's grace %d, want 10", *ev.GracePeriodSeconds)
	}
	select {
	case <-logind.Released:
		t.Fatal("lock released while the critical pod runs")
	default:
	}
	e.observe(critical, true)
	select {
	case <-logind.Released:
	case <-time.After(30 * time.Second):
		t.Fatal("lock not released once every pod was down")
	}

	logind.PrepareForShutdown(false)
	waitFor(t, "the mark cleared", func() bool { return !shuttingDown(t, status) })
	waitFor(t, "the lock taken again", func() bool { return len(logind.Inhibitors()) == 2 })
}

func ptrTo[T any](v T) *T { return &v }

// orderLogind is an inhibiter that records whether PrepareForShutdown was
// watched when the lock was taken.
type orderLogind struct {
	watching      bool
	watchedAtLock bool
	events        chan bool
	inhibitCalls  int
	delay         time.Duration
}

func (o *orderLogind) CurrentInhibitDelay() (time.Duration, error) { return o.delay, nil }
func (o *orderLogind) InhibitShutdown() (inhibitLock, error) {
	o.inhibitCalls++
	if o.inhibitCalls == 1 {
		o.watchedAtLock = o.watching
	}
	return inhibitLock(o.inhibitCalls), nil
}
func (o *orderLogind) ReleaseInhibitLock(inhibitLock) error { return nil }
func (o *orderLogind) MonitorShutdown(*slog.Logger) (<-chan bool, error) {
	o.watching = true
	return o.events, nil
}
func (o *orderLogind) Close() error { return nil }

// The shutdown manager watches for PrepareForShutdown before it takes the
// delay lock: a shutdown that begins once the lock is held is always seen
// (the kubelet takes the lock first, and a signal between the two is lost
// while the lock holds the shutdown for InhibitDelayMaxSec).
func TestShutdownSignalsWatchedBeforeTheLock(t *testing.T) {
	e := newTestEnv(t)
	e.cfg.GC.ShutdownGracePeriod = 30 * time.Second
	g, _ := e.newGC()
	l := &orderLogind{events: make(chan bool, 1), delay: time.Minute}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop, err := newShutdownManager(g, func() (inhibiter, error) { return l, nil }).start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	<-stop
	if l.inhibitCalls != 1 || !l.watchedAtLock {
		t.Fatalf("lock taken %d times, watching when first taken: %v; want once, after the watch", l.inhibitCalls, l.watchedAtLock)
	}
}
