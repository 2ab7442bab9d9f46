package runtime

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/podutil"
	"github.com/nodelet/nodelet/schemas"
)

// podRecord is what the bus says about one pod.
type podRecord struct {
	UID string
	// Pod is the newest desired pod. It stays after the pod left the
	// desired bucket (Gone), so its kill still uses its grace period and
	// hooks.
	Pod  *corev1.Pod
	Gone bool
	// Unconfirmed: the pod went missing because the bus store was wiped,
	// not because a source dropped it; it is killed only if the sources,
	// once ready again, still do not deliver it.
	Unconfirmed bool
	Verdict     *schemas.AdmissionVerdict
	Eviction    *schemas.PodEviction
}

// store is the bus-facing part: it holds the inputs of the runtime as the
// watches deliver them (watch mirrors the input buckets, the on* callbacks
// record each change) and wakes the pods' workers.
type store struct {
	mu      sync.Mutex
	pods    map[string]*podRecord
	probes  map[string]map[string]*schemas.ProbeResult // uid → "<container>.<kind>" → result
	sources *schemas.SourcesReady
	// devices is nodelet-devices' resources and allocations.
	devices *devicePlugins
	// claims is nodelet-devices' DRA state: each pod's prepared claims.
	claims *draClaims
	// sourcesCreated is the sources bucket's stream creation time of the
	// store sources came from.
	sourcesCreated time.Time
	synced         map[string]bool
	changed        chan struct{}

	// What the callbacks use, set by Daemon's New: the bus, the pods'
	// observed state, and the PLEG.
	bus      *bus.Conn
	log      *slog.Logger
	observed observedPods
	pleg     relister
	// workers are woken on changes; nil until Daemon.Run made them.
	workers podWaker
}

// relister asks the PLEG for a relist at once (pleg).
type relister interface{ relistNow() }

// podWaker wakes a pod's worker (podWorkers).
type podWaker interface{ Update(uid string) }

var (
	_ relister = (*pleg)(nil)
	_ podWaker = (*podWorkers)(nil)
)

// watchedBuckets must all be loaded before the workers act.
var watchedBuckets = []string{bus.BucketDesired, bus.BucketAdmission, bus.BucketProbes, bus.BucketEvictions, bus.BucketSources}

func newStore() *store {
	return &store{
		pods:    map[string]*podRecord{},
		probes:  map[string]map[string]*schemas.ProbeResult{},
		synced:  map[string]bool{},
		devices: newDevicePlugins(),
		claims:  newDRAClaims(),
		changed: make(chan struct{}, 1),
	}
}

func (s *store) record(uid string) *podRecord {
	r := s.pods[uid]
	if r == nil {
		r = &podRecord{UID: uid}
		s.pods[uid] = r
	}
	return r
}

// get returns a copy of uid's record, nil when the bus knows nothing of it.
func (s *store) get(uid string) *podRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.pods[uid]
	if r == nil {
		return nil
	}
	c := *r
	return &c
}

// forget drops a pod that is gone from the bus and the runtime: one that
// left the desired bucket, or was never in it (a record a verdict or an
// eviction made), once no verdict or eviction of it is left either (their
// deletion wakes its worker again).
func (s *store) forget(uid string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.pods[uid]; r != nil && (r.Gone || r.Pod == nil) && r.Verdict == nil && r.Eviction == nil {
		delete(s.pods, uid)
	}
}

func (s *store) uids() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.pods))
	for uid := range s.pods {
		out = append(out, uid)
	}
	return out
}

// probe is the latest result of a probe of a container instance.
func (s *store) probe(uid, container, kind, id string) *schemas.ProbeResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.probes[uid][container+"."+kind]
	if r == nil || trimContainerID(r.ContainerID) != id {
		return nil
	}
	return r
}

// sourcesReady: every configured source delivered its first full list and
// the desired bucket is loaded, so a pod missing from it is truly unknown.
func (s *store) sourcesReady() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sources != nil && s.sources.AllReady && s.synced[bus.BucketDesired]
}

func (s *store) setSynced(bucket string, v bool) {
	s.mu.Lock()
	s.synced[bucket] = v
	s.mu.Unlock()
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

func (s *store) allSynced() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, b := range watchedBuckets {
		if !s.synced[b] {
			return false
		}
	}
	return true
}

func (s *store) waitSynced(ctx context.Context) error {
	for !s.allSynced() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.changed:
		}
	}
	return nil
}

// watch mirrors the input buckets until ctx is done (a lost watch is
// re-established and reported by bus.Mirror). Every change wakes the pod's
// worker.
func (s *store) watch(ctx context.Context) {
	bus.RunAll(ctx,
		bus.NewMirror(s.bus, bus.BucketDesired, ">", func(u bus.Update[schemas.PodDesired]) { s.onDesired(ctx, u) }),
		bus.NewMirror(s.bus, bus.BucketAdmission, ">", s.onVerdict),
		bus.NewMirror(s.bus, bus.BucketEvictions, ">", s.onEviction),
		bus.NewMirror(s.bus, bus.BucketProbes, ">", s.onProbeResult),
		bus.NewMirror(s.bus, bus.BucketSources, bus.KeySourcesReady, s.onSourcesReady),
		bus.NewMirror(s.bus, bus.BucketDevices, bus.KeyDevices, s.devices.onResources),
		bus.NewMirror(s.bus, bus.BucketDevices, "pods.>", func(u bus.Update[schemas.PodDevices]) {
			if uid := s.devices.onPod(u); uid != "" {
				s.wakeWorker(uid)
			}
		}),
		bus.NewMirror(s.bus, bus.BucketDevices, "claims.>", func(u bus.Update[schemas.PodClaims]) {
			if uid := s.claims.onClaims(u); uid != "" {
				s.wakeWorker(uid)
			}
		}),
	)
}

// syncReads says whether desired pod next differs from old in anything a
// sync reads: what the kubelet's PodsDifferSemantically compares, and of
// the status, the API's terminal phase (sync.go), the start time the
// active deadline counts from (podStartTime) and the claims the scheduler
// made for extended resources (podutil.ResourceClaims).
func syncReads(old, next *corev1.Pod) bool {
	eq := equality.Semantic.DeepEqual
	return podutil.PodsDifferSemantically(old, next) ||
		podutil.IsTerminalPhase(old.Status.Phase) != podutil.IsTerminalPhase(next.Status.Phase) ||
		!eq(old.Status.StartTime, next.Status.StartTime) ||
		!eq(old.Status.ExtendedResourceClaimStatus, next.Status.ExtendedResourceClaimStatus)
}

// wakeWorker wakes uid's worker once every input bucket is loaded.
func (s *store) wakeWorker(uid string) {
	if s.workers != nil && s.allSynced() {
		s.workers.Update(uid)
	}
}

func (s *store) onDesired(ctx context.Context, u bus.Update[schemas.PodDesired]) {
	switch u.Kind {
	case bus.Put:
		if u.Value.Pod == nil {
			s.log.Error("Desired pod without a pod, ignored", "key", u.Key)
			return
		}
		s.mu.Lock()
		r := s.record(u.Key)
		reconcile := r.Pod != nil && !r.Gone && !syncReads(r.Pod, u.Value.Pod)
		r.Pod, r.Gone, r.Unconfirmed = u.Value.Pod, false, false
		admitted := r.Verdict != nil
		s.mu.Unlock()
		if reconcile {
			// The kubelet's RECONCILE: the API's copy of the status
			// changed (mostly by nodelet-status's own writes), nothing
			// a sync acts on. The kubelet does not sync the pod for it
			// (HandlePodReconcile); a sync of a crashed container in
			// back-off would record BackOff once more for each.
			return
		}
		if !admitted && s.observed != nil && s.observed.get(u.Key) == nil {
			// Not admitted and never reported: nothing of the pod is in
			// CRI (only an admitted pod's worker creates anything, and
			// reports it first), and its worker would have nothing to do
			// but read CRI to find that out. Its verdict wakes it; after
			// a restart the PLEG's first relist wakes every known pod.
			return
		}
		s.wakeWorker(u.Key)
	case bus.Deleted:
		s.mu.Lock()
		r := s.record(u.Key)
		r.Gone, r.Unconfirmed = true, false
		s.mu.Unlock()
		s.wakeWorker(u.Key)
	case bus.Synced:
		s.setSynced(bus.BucketDesired, true)
	case bus.Reset:
		// The store was wiped: forget what the bucket said, keep
		// the pods (a fresh load follows; nothing is killed before
		// it is complete).
		checked, fresh := s.sourcesFromCurrentStore(ctx)
		s.mu.Lock()
		for _, r := range s.pods {
			if r.Pod != nil && !r.Gone {
				r.Gone, r.Unconfirmed = true, true
			}
		}
		// Readiness said before the wipe no longer vouches for
		// the reloaded bucket; readiness said after it does (the
		// sources watch may meet the new store first).
		if !fresh && s.sourcesCreated.Equal(checked) {
			s.sources = nil
		}
		s.mu.Unlock()
		s.setSynced(bus.BucketDesired, false)
	}
}

func (s *store) onVerdict(u bus.Update[schemas.AdmissionVerdict]) {
	switch u.Kind {
	case bus.Put:
		s.mu.Lock()
		s.record(u.Key).Verdict = u.Value
		s.mu.Unlock()
		s.wakeWorker(u.Key)
	case bus.Deleted:
		s.mu.Lock()
		if r := s.pods[u.Key]; r != nil {
			r.Verdict = nil
		}
		s.mu.Unlock()
		s.wakeWorker(u.Key)
	case bus.Synced:
		s.setSynced(bus.BucketAdmission, true)
	case bus.Reset:
		s.mu.Lock()
		for _, r := range s.pods {
			r.Verdict = nil
		}
		s.mu.Unlock()
		s.setSynced(bus.BucketAdmission, false)
	}
}

func (s *store) onEviction(u bus.Update[schemas.PodEviction]) {
	switch u.Kind {
	case bus.Put:
		s.mu.Lock()
		s.record(u.Key).Eviction = u.Value
		s.mu.Unlock()
		s.wakeWorker(u.Key)
	case bus.Deleted:
		s.mu.Lock()
		if r := s.pods[u.Key]; r != nil {
			r.Eviction = nil
		}
		s.mu.Unlock()
		s.wakeWorker(u.Key)
	case bus.Synced:
		s.setSynced(bus.BucketEvictions, true)
	case bus.Reset:
		s.setSynced(bus.BucketEvictions, false)
	}
}

func (s *store) onProbeResult(u bus.Update[schemas.ProbeResult]) {
	switch u.Kind {
	case bus.Put, bus.Deleted:
		uid, rest, ok := strings.Cut(u.Key, ".")
		if !ok {
			s.log.Error("Probe result key is not <uid>.<container>.<kind>, ignored", "key", u.Key)
			return
		}
		s.mu.Lock()
		if u.Kind == bus.Put {
			if s.probes[uid] == nil {
				s.probes[uid] = map[string]*schemas.ProbeResult{}
			}
			s.probes[uid][rest] = u.Value
		} else {
			delete(s.probes[uid], rest)
			// A pod's last result gone is the pod gone from the map: a
			// pod's empty map must not outlive it.
			if len(s.probes[uid]) == 0 {
				delete(s.probes, uid)
			}
		}
		s.mu.Unlock()
		if u.Kind == bus.Put && (u.Value.Probe == schemas.ProbeLiveness || u.Value.Probe == schemas.ProbeStartup) {
			s.wakeWorker(uid)
		}
	case bus.Synced:
		s.setSynced(bus.BucketProbes, true)
	case bus.Reset:
		s.mu.Lock()
		s.probes = map[string]map[string]*schemas.ProbeResult{}
		s.mu.Unlock()
		s.setSynced(bus.BucketProbes, false)
	}
}

func (s *store) onSourcesReady(u bus.Update[schemas.SourcesReady]) {
	switch u.Kind {
	case bus.Put:
		s.mu.Lock()
		was := s.sources != nil && s.sources.AllReady
		s.sources, s.sourcesCreated = u.Value, u.Created
		s.mu.Unlock()
		if !was && u.Value.AllReady && s.workers != nil {
			// Orphans and pods lost in a wipe may be killed now.
			for _, uid := range s.uids() {
				s.workers.Update(uid)
			}
			s.pleg.relistNow()
		}
	case bus.Deleted:
		s.mu.Lock()
		s.sources = nil
		s.mu.Unlock()
	case bus.Synced:
		s.setSynced(bus.BucketSources, true)
	case bus.Reset:
		s.mu.Lock()
		s.sources = nil
		s.mu.Unlock()
		s.setSynced(bus.BucketSources, false)
	}
}

// sourcesFromCurrentStore says whether the sources readiness the store
// holds came from the bus's current store (its bucket's stream was made
// when the value's was), so that it survives the wipe of another bucket;
// checked is the value's stream time it judged (a newer value that
// arrives meanwhile is from the current store).
func (s *store) sourcesFromCurrentStore(ctx context.Context) (checked time.Time, fresh bool) {
	s.mu.Lock()
	had, at := s.sources != nil, s.sourcesCreated
	s.mu.Unlock()
	if !had || at.IsZero() {
		return at, false
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	now, err := bus.StreamCreated(cctx, s.bus, bus.BucketSources)
	return at, err == nil && now.Equal(at)
}
