package gc

import (
	"context"
	"sync"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/schemas"
)

// podState is what nodelet-gc knows of the node's pods, rebuilt from the
// bus at every start: the desired pods (sources), what the runtime observes,
// whether every source has delivered its first list, and the evictions gc
// itself asked for. It answers the kubelet's podStateProvider questions.
type podState struct {
	mu        sync.Mutex
	desired   map[string]*schemas.PodDesired
	observed  map[string]*schemas.PodObserved
	evictions map[string]*schemas.PodEviction
	sources   *schemas.SourcesReady

	desiredSynced, observedSynced, sourcesSynced, evictionsSynced bool
}

func newPodState() *podState {
	return &podState{
		desired:   map[string]*schemas.PodDesired{},
		observed:  map[string]*schemas.PodObserved{},
		evictions: map[string]*schemas.PodEviction{},
	}
}

// run mirrors the four buckets until ctx is done (a lost watch is
// re-established and reported by bus.Mirror).
func (s *podState) run(ctx context.Context, conn *bus.Conn) {
	bus.RunAll(ctx,
		bus.NewMirror(conn, bus.BucketDesired, ">", func(u bus.Update[schemas.PodDesired]) {
			applyUpdate(&s.mu, s.desired, &s.desiredSynced, u)
		}),
		bus.NewMirror(conn, bus.BucketObserved, ">", func(u bus.Update[schemas.PodObserved]) {
			applyUpdate(&s.mu, s.observed, &s.observedSynced, u)
		}),
		bus.NewMirror(conn, bus.BucketEvictions, ">", func(u bus.Update[schemas.PodEviction]) {
			if u.Kind == bus.Reset {
				// gc is the bucket's writer: what it asked for stays true
				// when the store is wiped, and is written again (evictionsSnapshot).
				return
			}
			applyUpdate(&s.mu, s.evictions, &s.evictionsSynced, u)
		}),
		bus.NewMirror(conn, bus.BucketSources, bus.KeySourcesReady, s.onSourcesReady),
	)
}

func (s *podState) onSourcesReady(u bus.Update[schemas.SourcesReady]) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch u.Kind {
	case bus.Put:
		s.sources = u.Value
	case bus.Deleted:
		s.sources = nil
	case bus.Synced:
		s.sourcesSynced = true
	case bus.Reset:
		s.sources, s.sourcesSynced = nil, false
	}
}

// applyUpdate keeps a map of a bucket (bus.Apply) and whether its initial
// load is complete.
func applyUpdate[T any](mu *sync.Mutex, m map[string]*T, synced *bool, u bus.Update[T]) {
	mu.Lock()
	defer mu.Unlock()
	bus.Apply(m, u)
	switch u.Kind {
	case bus.Synced:
		*synced = true
	case bus.Reset:
		*synced = false
	}
}

// allSourcesReady is the kubelet's sourcesReady.AllReady() plus "the bus has
// told us everything it holds": only then does a pod missing from desired
// mean the pod is gone, and not merely not delivered yet.
func (s *podState) allSourcesReady() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.allReadyLocked()
}

func (s *podState) allReadyLocked() bool {
	return s.desiredSynced && s.observedSynced && s.sourcesSynced && s.sources != nil && s.sources.AllReady
}

// shouldContentBeRemoved is the kubelet's ShouldPodContentBeRemoved: the pod
// was evicted and the runtime has nothing of it running any more (its
// observed entry is gone or final), or it is gone from the sources and its
// observed entry is gone. Nothing is removable until allSourcesReady.
//
// A pod gone from the sources is nodelet-runtime's to remove (syncGone
// removes its sandbox and containers, then deletes its observed entry),
// where the kubelet leaves it to its garbage collector: gc removes what is
// left of it only once that entry is gone, what a runtime stopped midway
// left, rather than race the runtime's removal ("container is already in
// removing state", NotFound from ContainerStatus).
func (s *podState) shouldContentBeRemoved(uid string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.allReadyLocked() {
		return false
	}
	obs := s.observed[uid]
	if _, ok := s.desired[uid]; !ok {
		return obs == nil
	}
	_, evicted := s.evictions[uid]
	return evicted && (obs == nil || obs.Terminated)
}

// shouldRuntimeBeRemoved is the kubelet's ShouldPodRuntimeBeRemoved: the
// pod's containers are all stopped for good (a completed pod that still
// exists). Under disk pressure their dead containers go too. A pod gone
// from the sources is the runtime's while it has an observed entry
// (shouldContentBeRemoved).
func (s *podState) shouldRuntimeBeRemoved(uid string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.allReadyLocked() {
		return false
	}
	obs := s.observed[uid]
	if _, desired := s.desired[uid]; !desired {
		return obs == nil
	}
	return obs != nil && obs.Terminated
}

// activePods are the pods eviction may choose from: desired, seen running
// by the runtime (so admitted), not terminating and not already evicted.
func (s *podState) activePods() []*corev1.Pod {
	s.mu.Lock()
	defer s.mu.Unlock()
	var pods []*corev1.Pod
	for uid, d := range s.desired {
		if d.Pod == nil {
			continue
		}
		obs := s.observed[uid]
		if obs == nil || obs.Terminated || obs.Terminating {
			continue
		}
		if _, evicted := s.evictions[uid]; evicted {
			continue
		}
		if d.Pod.Status.Phase == corev1.PodSucceeded || d.Pod.Status.Phase == corev1.PodFailed {
			continue
		}
		pods = append(pods, d.Pod)
	}
	return pods
}

// pod returns the desired pod of uid, if any.
func (s *podState) pod(uid string) *corev1.Pod {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d := s.desired[uid]; d != nil {
		return d.Pod
	}
	return nil
}

// observedTerminated says whether the runtime reports uid as final, or no
// longer reports it at all.
func (s *podState) observedTerminated(uid string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	obs := s.observed[uid]
	return obs == nil || obs.Terminated
}

// staleEvictions lists the evictions whose pod is gone from desired and from
// the runtime: nobody needs them any more.
func (s *podState) staleEvictions() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.allReadyLocked() || !s.evictionsSynced {
		return nil
	}
	var out []string
	for uid := range s.evictions {
		if _, ok := s.desired[uid]; ok {
			continue
		}
		if _, ok := s.observed[uid]; ok {
			continue
		}
		out = append(out, uid)
	}
	return out
}

// evicted says whether gc already asked to evict uid.
func (s *podState) evicted(uid string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.evictions[uid]
	return ok
}

// noteEviction records an eviction gc just wrote, before its watch sees it.
func (s *podState) noteEviction(ev *schemas.PodEviction) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.evictions[ev.UID] = ev
}

// evictionsSnapshot copies the evictions gc has asked for.
func (s *podState) evictionsSnapshot() []*schemas.PodEviction {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*schemas.PodEviction, 0, len(s.evictions))
	for _, ev := range s.evictions {
		out = append(out, ev)
	}
	return out
}

// synced says whether every watched bucket has delivered its initial load.
func (s *podState) synced() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.desiredSynced && s.observedSynced && s.sourcesSynced && s.evictionsSynced
}
