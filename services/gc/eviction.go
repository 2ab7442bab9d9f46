package gc

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/internal/nodestatus"
	"github.com/nodelet/nodelet/internal/podutil"
	"github.com/nodelet/nodelet/schemas"
)

// Eviction signals, as gc.evictionHard/evictionSoft name them.
const (
	SignalMemoryAvailable   = "memory.available"
	SignalNodeFsAvailable   = "nodefs.available"
	SignalNodeFsInodesFree  = "nodefs.inodesFree"
	SignalImageFsAvailable  = "imagefs.available"
	SignalImageFsInodesFree = "imagefs.inodesFree"
	SignalPIDAvailable      = "pid.available"
)

// EvictionReason is the reason of an evicted pod's status and event.
const EvictionReason = "Evicted"

const (
	// podCleanupTimeout bounds the wait for an evicted pod's end before the
	// next eviction, as the kubelet's.
	podCleanupTimeout = 30 * time.Second
	// hardEvictionGracePeriod is the kubelet's immediateEvictionGracePeriodSeconds.
	hardEvictionGracePeriod = int64(1)

	resourceInodes corev1.ResourceName = "inodes"
	resourcePIDs   corev1.ResourceName = "pids"
)

var signalToCondition = map[string]corev1.NodeConditionType{
	SignalMemoryAvailable:   corev1.NodeMemoryPressure,
	SignalNodeFsAvailable:   corev1.NodeDiskPressure,
	SignalNodeFsInodesFree:  corev1.NodeDiskPressure,
	SignalImageFsAvailable:  corev1.NodeDiskPressure,
	SignalImageFsInodesFree: corev1.NodeDiskPressure,
	SignalPIDAvailable:      corev1.NodePIDPressure,
}

var signalToResource = map[string]corev1.ResourceName{
	SignalMemoryAvailable:   corev1.ResourceMemory,
	SignalNodeFsAvailable:   corev1.ResourceEphemeralStorage,
	SignalNodeFsInodesFree:  resourceInodes,
	SignalImageFsAvailable:  corev1.ResourceEphemeralStorage,
	SignalImageFsInodesFree: resourceInodes,
	SignalPIDAvailable:      resourcePIDs,
}

// threshold is one eviction threshold: signal < value, met for GracePeriod.
type threshold struct {
	Signal      string
	Quantity    *resource.Quantity // or
	Percentage  float64            // of capacity
	GracePeriod time.Duration      // 0: hard
}

func (t threshold) hard() bool { return t.GracePeriod == 0 }

func (t threshold) key() string {
	return fmt.Sprintf("%s/%v/%s/%g", t.Signal, t.GracePeriod, t.Quantity, t.Percentage)
}

// quantity is the threshold's value against capacity (GetThresholdQuantity).
func (t threshold) quantity(capacity *resource.Quantity) *resource.Quantity {
	if t.Quantity != nil {
		q := t.Quantity.DeepCopy()
		return &q
	}
	return resource.NewQuantity(int64(float64(capacity.Value())*t.Percentage), resource.BinarySI)
}

// parseThresholds reads gc.evictionHard and gc.evictionSoft.
func parseThresholds(c config.GCConfig) ([]threshold, error) {
	var out []threshold
	add := func(key string, m map[string]string, soft bool) error {
		sigs := make([]string, 0, len(m))
		for s := range m {
			sigs = append(sigs, s)
		}
		sort.Strings(sigs)
		for _, sig := range sigs {
			if _, ok := signalToResource[sig]; !ok {
				return fmt.Errorf("%s: unknown signal %q", key, sig)
			}
			q, pct, err := config.ParseThreshold(m[sig])
			if err != nil {
				return fmt.Errorf("%s: %s: %w", key, sig, err)
			}
			t := threshold{Signal: sig, Quantity: q, Percentage: pct}
			if soft {
				d, err := time.ParseDuration(c.EvictionSoftGracePeriod[sig])
				if err != nil || d <= 0 {
					return fmt.Errorf("gc.evictionSoftGracePeriod: %s: %q is not a positive duration", sig, c.EvictionSoftGracePeriod[sig])
				}
				t.GracePeriod = d
			}
			out = append(out, t)
		}
		return nil
	}
	if err := add("gc.evictionHard", c.EvictionHard, false); err != nil {
		return nil, err
	}
	if err := add("gc.evictionSoft", c.EvictionSoft, true); err != nil {
		return nil, err
	}
	return out, nil
}

// observation is one signal's measured value.
type observation struct {
	available, capacity *resource.Quantity
}

type observations map[string]observation

func makeObservations(ns *NodeStats) observations {
	obs := observations{}
	if ns.MemoryCapacity > 0 {
		obs[SignalMemoryAvailable] = observation{
			available: resource.NewQuantity(max(ns.MemoryCapacity-ns.MemoryWorkingSet, 0), resource.BinarySI),
			capacity:  resource.NewQuantity(ns.MemoryCapacity, resource.BinarySI),
		}
	}
	fsObs := func(fs *FsStats, bytesSig, inodesSig string) {
		if fs == nil {
			return
		}
		obs[bytesSig] = observation{resource.NewQuantity(fs.Available, resource.BinarySI), resource.NewQuantity(fs.Capacity, resource.BinarySI)}
		if fs.Inodes > 0 {
			obs[inodesSig] = observation{resource.NewQuantity(fs.InodesFree, resource.DecimalSI), resource.NewQuantity(fs.Inodes, resource.DecimalSI)}
		}
	}
	fsObs(ns.NodeFs, SignalNodeFsAvailable, SignalNodeFsInodesFree)
	fsObs(ns.ImageFs, SignalImageFsAvailable, SignalImageFsInodesFree)
	if ns.MaxPID > 0 {
		obs[SignalPIDAvailable] = observation{resource.NewQuantity(ns.MaxPID-ns.Processes, resource.DecimalSI), resource.NewQuantity(ns.MaxPID, resource.DecimalSI)}
	}
	return obs
}

// thresholdsMet returns the thresholds whose signal is below their value,
// grace periods aside.
func thresholdsMet(ts []threshold, obs observations) []threshold {
	var out []threshold
	for _, t := range ts {
		o, ok := obs[t.Signal]
		if !ok {
			continue
		}
		if t.quantity(o.capacity).Cmp(*o.available) > 0 {
			out = append(out, t)
		}
	}
	return out
}

// evictionManager is the kubelet's eviction manager
// (pkg/kubelet/eviction/eviction_manager.go managerImpl): it measures the
// signals, publishes the node's pressure conditions, reclaims node-level
// resources through container and image GC, and evicts pods. Everything in
// its state is either recomputed each pass or, for the published
// conditions, read back from the pressure bucket after a restart.
type evictionManager struct {
	log        *slog.Logger
	clock      clock.Clock
	bus        *bus.Conn
	pressureW  *bus.Writer // the pressure bucket
	measure    Measurer
	pods       evictionPods
	evictions  evictionWriter
	events     podEvents
	containers containerReclaimer
	images     imageReclaimer

	mu                 sync.Mutex
	thresholds         []threshold
	transition         time.Duration
	firstObservedAt    map[string]time.Time // by threshold key
	condLastObservedAt map[corev1.NodeConditionType]time.Time
	published          *schemas.NodePressure
	loaded             bool
	// shuttingDown: the shutdown manager handles a node shutdown.
	shuttingDown bool
	// prevPass is when the pass before the current one began.
	prevPass, thisPass time.Time
	// deferred counts the passes in a row that evicted nothing because
	// containers had been removed since the previous pass.
	deferred int
}

// maxDeferredEvictions bounds the passes in a row that wait for removed
// containers' space instead of evicting: dead containers removed on every
// pass (a pod crash-looping under pressure) must not hold eviction off.
const maxDeferredEvictions = 2

// evictionPods is what the eviction manager asks of the pod state: the
// kubelet's activePodsFunc and podCleanedUpFunc.
type evictionPods interface {
	activePods() []*corev1.Pod
	observedTerminated(uid string) bool
}

// evictionWriter records an eviction (the runtime kills the pod, status
// fails it).
type evictionWriter interface {
	put(ctx context.Context, ev *schemas.PodEviction) error
}

// containerReclaimer is container GC as the eviction manager's node-level
// reclaim uses it (the kubelet's ContainerGC.DeleteAllUnusedContainers).
type containerReclaimer interface {
	garbageCollect(ctx context.Context, evictNonDeletedPods bool) (containerGCResult, error)
	// lastRemovalAt is when any container GC pass last removed a container.
	lastRemovalAt() time.Time
}

// imageReclaimer is image GC as the eviction manager's node-level reclaim
// uses it (the kubelet's ImageGC.DeleteUnusedImages).
type imageReclaimer interface {
	deleteUnusedImages(ctx context.Context) (imageGCResult, error)
}

var (
	_ evictionPods       = (*podState)(nil)
	_ evictionWriter     = (*evictionRecords)(nil)
	_ podEvents          = (*eventRecorder)(nil)
	_ containerReclaimer = (*containerGC)(nil)
	_ imageReclaimer     = (*imageGC)(nil)
)

// newEvictionManager completes m with its thresholds (parseThresholds),
// gc.evictionPressureTransitionPeriod and the pressure bucket's writer.
func newEvictionManager(thresholds []threshold, transition time.Duration, m *evictionManager) *evictionManager {
	m.thresholds = thresholds
	m.transition = transition
	m.firstObservedAt = map[string]time.Time{}
	m.condLastObservedAt = map[corev1.NodeConditionType]time.Time{}
	m.pressureW = bus.NewWriter(m.bus, bus.BucketPressure, func() error {
		// The store was wiped: the next pass publishes the conditions again.
		m.mu.Lock()
		m.published = nil
		m.mu.Unlock()
		return nil
	})
	return m
}

// synchronize is one pass of the kubelet's eviction manager: measure, work
// out the node conditions and publish them, enforce local storage limits,
// and when a threshold is met past its grace period, reclaim node-level
// resources first and else evict one pod. It returns the pods it evicted.
func (m *evictionManager) synchronize(ctx context.Context) ([]*corev1.Pod, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clock.Now()
	m.prevPass, m.thisPass = m.thisPass, now
	if err := m.loadPressure(ctx, now); err != nil {
		return nil, err
	}
	ns, err := m.measure.NodeStats(ctx)
	if ns == nil {
		return nil, fmt.Errorf("eviction manager: measure node: %w", err)
	}
	if err != nil {
		m.log.Error("Eviction manager: some signals could not be measured", "err", err)
	}
	obs := makeObservations(ns)
	for sig, o := range obs {
		signalAvailable.WithLabelValues(sig).Set(float64(o.available.Value()))
	}
	withImageFs := ns.ImageFs != nil && ns.NodeFs != nil && ns.ImageFs.Device != ns.NodeFs.Device

	met := thresholdsMet(m.thresholds, obs)
	first := map[string]time.Time{}
	for _, t := range met {
		at, ok := m.firstObservedAt[t.key()]
		if !ok {
			at = now
		}
		first[t.key()] = at
	}
	m.firstObservedAt = first
	for _, t := range met {
		m.condLastObservedAt[signalToCondition[t.Signal]] = now
	}
	conditions := map[corev1.NodeConditionType]bool{}
	for c, at := range m.condLastObservedAt {
		if now.Sub(at) < m.transition || at.Equal(now) {
			conditions[c] = true
		}
	}
	if err := m.publishPressure(ctx, conditions, now); err != nil {
		m.log.Error("Eviction manager: failed to publish node conditions", "err", err)
	}

	active := m.pods.activePods()
	// Pods are measured only when a decision needs their figures: those
	// with a local storage limit on every pass, all of them once a
	// threshold is to be reclaimed. The kubelet gathers every pod's stats
	// on every pass; on containerd 1.6 that costs about 80 ms of CPU
	// (ListContainerStats) and 0.6 s (ListPodSandboxStats) in containerd
	// and its shims every 10 s with 50 pods, for figures unused while the
	// node is under no pressure and no pod has a limit.
	if limited := storageLimited(active); len(limited) > 0 {
		if evicted := m.localStorageEviction(ctx, limited, m.podUsage(ctx, limited, false)); len(evicted) > 0 {
			return evicted, nil
		}
	}

	var reclaim []threshold
	for _, t := range met {
		if now.Sub(first[t.key()]) >= t.GracePeriod {
			reclaim = append(reclaim, t)
		} else {
			m.log.Info("Eviction manager: eviction criteria not yet met", "signal", t.Signal, "gracePeriod", t.GracePeriod, "duration", now.Sub(first[t.key()]))
		}
	}
	if len(reclaim) == 0 {
		return nil, nil
	}
	// Memory first, as the kubelet's byEvictionPriority.
	sort.SliceStable(reclaim, func(i, j int) bool {
		return reclaim[i].Signal == SignalMemoryAvailable && reclaim[j].Signal != SignalMemoryAvailable
	})
	t := reclaim[0]
	res := signalToResource[t.Signal]
	m.log.Warn("Eviction manager: attempting to reclaim", "resourceName", res)
	m.events.nodeEvent(corev1.EventTypeWarning, "EvictionThresholdMet", fmt.Sprintf("Attempting to reclaim %s", res))
	if m.reclaimNodeLevelResources(ctx, t.Signal, res, withImageFs) {
		return nil, nil
	}
	if len(active) == 0 {
		m.log.Error("Eviction manager: eviction thresholds have been met, but no pods are active to evict")
		return nil, nil
	}
	usage := m.podUsage(ctx, active, t.Signal == SignalPIDAvailable)
	rankPods(t.Signal, withImageFs, active, usage)
	var grace *int64
	if t.hard() {
		v := hardEvictionGracePeriod
		grace = &v
	}
	for _, pod := range active {
		msg := evictionMessage(res, pod, usage[string(pod.UID)], reclaim, obs)
		if m.evictPod(ctx, pod, grace, msg, t.Signal) {
			return []*corev1.Pod{pod}, nil
		}
	}
	m.log.Info("Eviction manager: unable to evict any pods from the node")
	return nil, nil
}

// podUsage measures pods for an eviction decision (with their process
// counts for pid pressure); a failure leaves them without figures, which
// ranks them first as the kubelet does.
func (m *evictionManager) podUsage(ctx context.Context, pods []*corev1.Pod, processes bool) map[string]*PodUsage {
	usage, err := m.measure.PodUsage(ctx, pods, processes)
	if err != nil {
		m.log.Error("Eviction manager: failed to measure pod usage", "err", err)
		return map[string]*PodUsage{}
	}
	return usage
}

// reclaimNodeLevelResources runs the node-level reclaim of the signal
// (dead containers, then unused images, for disk signals) and says whether
// that ended every threshold without evicting a pod. With a separate image
// filesystem, nodefs pressure has nothing to reclaim at node level.
func (m *evictionManager) reclaimNodeLevelResources(ctx context.Context, signal string, res corev1.ResourceName, withImageFs bool) bool {
	disk := res == corev1.ResourceEphemeralStorage || res == resourceInodes
	nodefs := signal == SignalNodeFsAvailable || signal == SignalNodeFsInodesFree
	if !disk || (withImageFs && nodefs) {
		return false
	}
	cres, err := m.containers.garbageCollect(ctx, true)
	if err != nil {
		m.log.Info("Eviction manager: unexpected error when attempting to reduce resource pressure", "resourceName", res, "err", err)
	}
	if _, err := m.images.deleteUnusedImages(ctx); err != nil {
		m.log.Info("Eviction manager: unexpected error when attempting to reduce resource pressure", "resourceName", res, "err", err)
	}
	ns, err := m.measure.NodeStats(ctx)
	if ns == nil {
		m.log.Error("Eviction manager: failed to measure node after reclaim", "err", err)
		return false
	}
	if len(thresholdsMet(m.thresholds, makeObservations(ns))) == 0 {
		m.log.Info("Eviction manager: able to reduce resource pressure without evicting pods.", "resourceName", res)
		m.deferred = 0
		return true
	}
	// Unlike the kubelet, which evicts at once: containerd removes a
	// container's writable layer from disk in its own garbage collection,
	// after CRI RemoveContainer returned (a second or more later, at its gc
	// scheduler's pace), so statfs does not yet show what a removal since
	// the last pass freed — typically the layer of the pod evicted the pass
	// before, which this reclaim or the container GC loop removed. Evicting
	// now would take a second pod for space that is about to return; the
	// next pass measures again (at most maxDeferredEvictions in a row).
	removed := len(cres.Containers) > 0 || m.containers.lastRemovalAt().After(m.prevPass)
	if !removed || m.deferred >= maxDeferredEvictions {
		m.deferred = 0
		return false
	}
	m.deferred++
	m.log.Info("Eviction manager: dead containers removed since the last pass, measuring again before evicting",
		"resourceName", res, "containers", len(cres.Containers), "deferred", m.deferred)
	return true
}

// evictPod asks the runtime to kill pod and status to fail it: a record in
// the evictions bucket, an Evicted event. Critical pods (static, mirror, or
// system-critical priority) are never evicted.
func (m *evictionManager) evictPod(ctx context.Context, pod *corev1.Pod, grace *int64, message, signal string) bool {
	if podutil.IsCriticalPod(pod) {
		m.log.Error("Eviction manager: cannot evict a critical pod", "pod", podutil.Ref(pod.Namespace, pod.Name), "podUID", pod.UID)
		return false
	}
	ev := &schemas.PodEviction{UID: string(pod.UID), Namespace: pod.Namespace, Name: pod.Name,
		Reason: EvictionReason, Message: message, Time: m.clock.Now().UTC(), GracePeriodSeconds: grace}
	if err := m.evictions.put(ctx, ev); err != nil {
		m.log.Error("Eviction manager: pod failed to evict", "pod", podutil.Ref(pod.Namespace, pod.Name), "podUID", pod.UID, "err", err)
		return false
	}
	m.events.podEvent(pod, corev1.EventTypeWarning, EvictionReason, message)
	evictionsTotal.WithLabelValues(signal).Inc()
	kubeletEvictions.WithLabelValues(signal).Inc()
	m.log.Info("Eviction manager: pod is evicted successfully", "pod", podutil.Ref(pod.Namespace, pod.Name), "podUID", pod.UID, "message", message)
	return true
}

// waitForPodsCleanup waits until the runtime reports the evicted pods final,
// or podCleanupTimeout, before the next eviction pass.
func (m *evictionManager) waitForPodsCleanup(ctx context.Context, pods []*corev1.Pod) {
	deadline := m.clock.Now().Add(podCleanupTimeout)
	for m.clock.Now().Before(deadline) {
		done := true
		for _, p := range pods {
			done = done && m.pods.observedTerminated(string(p.UID))
		}
		if done {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-m.clock.After(time.Second):
		}
	}
	m.log.Info("Eviction manager: timed out waiting for pods to be cleaned up", "pods", len(pods))
}

// loadPressure reads back the conditions published before a restart, so
// that their transition times survive it and a condition that was True is
// held for another transition period rather than dropped at once.
func (m *evictionManager) loadPressure(ctx context.Context, now time.Time) error {
	if m.loaded {
		return nil
	}
	np, rev, err := bus.Get[schemas.NodePressure](ctx, m.bus, bus.BucketPressure, bus.KeyPressure)
	if err != nil && rev == 0 {
		return fmt.Errorf("eviction manager: read published conditions: %w", err)
	}
	if err != nil {
		// A value that does not decode is replaced by the next write.
		m.log.Error("Eviction manager: ignoring published conditions that do not decode", "err", err)
	}
	if np != nil {
		m.published = np
		for _, c := range np.Conditions {
			if c.Status == corev1.ConditionTrue {
				m.condLastObservedAt[c.Type] = now
			}
		}
	}
	m.loaded = true
	return nil
}

// publishPressure writes the three conditions, keeping each one's
// transition time while its status holds. Heartbeat time equals transition
// time: the bucket changes only when a condition does, and nodelet-status
// stamps its own heartbeats. Callers hold mu.
func (m *evictionManager) publishPressure(ctx context.Context, pressure map[corev1.NodeConditionType]bool, now time.Time) error {
	prev := map[corev1.NodeConditionType]corev1.NodeCondition{}
	if m.published != nil {
		for _, c := range m.published.Conditions {
			prev[c.Type] = c
		}
	}
	np := &schemas.NodePressure{ShuttingDown: m.shuttingDown}
	for _, p := range nodestatus.PressureConditions {
		t := p.Type
		c := p.Condition(pressure[t])
		if pressure[t] {
			nodePressure.WithLabelValues(string(t)).Set(1)
		} else {
			nodePressure.WithLabelValues(string(t)).Set(0)
		}
		if prevC, ok := prev[t]; ok && prevC.Status == c.Status {
			c.LastTransitionTime = prevC.LastTransitionTime
		} else {
			c.LastTransitionTime = metav1.NewTime(now.UTC().Truncate(time.Second))
			if ok || c.Status == corev1.ConditionTrue {
				// nodelet-status records the kubelet's node event
				// (NodeHasInsufficientMemory, …) when it sets the condition
				// on the Node, as the kubelet's setter does.
				m.log.Info("Node condition changed", "condition", t, "status", c.Status, "reason", c.Reason)
			}
		}
		c.LastHeartbeatTime = c.LastTransitionTime
		np.Conditions = append(np.Conditions, c)
	}
	if _, _, err := m.pressureW.Put(ctx, bus.KeyPressure, np); err != nil {
		return err
	}
	m.published = np
	return nil
}
