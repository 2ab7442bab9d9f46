package status

import (
	"context"
	"strings"
	"sync"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/podutil"
	"github.com/nodelet/nodelet/schemas"
)

// store holds what the other daemons published, as the watches deliver it,
// and the statuses this daemon wrote. Everything in it is rebuilt from the
// buckets after a restart.
type store struct {
	mu        sync.Mutex
	desired   map[string]*schemas.PodDesired
	verdicts  map[string]*schemas.AdmissionVerdict
	observed  map[string]*schemas.PodObserved
	probes    map[string]map[ProbeID]schemas.ProbeResult
	evictions map[string]*schemas.PodEviction
	runtime   *schemas.RuntimeState
	pressure  *schemas.NodePressure
	// volumeStats are the runtime's persistent volume stats (for
	// /stats/summary).
	volumeStats *schemas.PodVolumeStats
	// volumesInUse are the runtime's mounted attachable volumes (the
	// Node's status.volumesInUse).
	volumesInUse *schemas.VolumesInUse
	// devices is nodelet-devices' device plugin resources (capacity, allocatable).
	devices *schemas.DeviceResources
	// claims are nodelet-devices' prepared ResourceClaims by pod UID
	// (containers' allocatedResourcesStatus).
	claims map[string]*schemas.PodClaims
	// draHealth is nodelet-devices' health of the DRA drivers' devices.
	draHealth *schemas.DRAHealth
	// records are the statuses last written to the status bucket.
	records map[string]*schemas.PodStatusRecord
	// names remembers namespace/name of every pod seen in the desired
	// bucket, so that the API syncer hears of a pod's removal too.
	names map[string]string
	// synced says which buckets have delivered their initial load.
	synced map[string]bool
	// dirty holds the pods whose status must be computed again.
	dirty    map[string]bool
	wake     chan struct{}
	nodeWake chan struct{}
}

// watchedBuckets are the buckets whose initial load must be complete before
// any status is computed: a status computed from half the picture could go
// backwards.
var watchedBuckets = []string{
	bus.BucketDesired, bus.BucketAdmission, bus.BucketObserved, bus.BucketProbes,
	bus.BucketEvictions, bus.BucketStatus,
}

func newStore() *store {
	return &store{
		desired:   map[string]*schemas.PodDesired{},
		verdicts:  map[string]*schemas.AdmissionVerdict{},
		observed:  map[string]*schemas.PodObserved{},
		probes:    map[string]map[ProbeID]schemas.ProbeResult{},
		evictions: map[string]*schemas.PodEviction{},
		claims:    map[string]*schemas.PodClaims{},
		records:   map[string]*schemas.PodStatusRecord{},
		names:     map[string]string{},
		synced:    map[string]bool{},
		dirty:     map[string]bool{},
		wake:      make(chan struct{}, 1),
		nodeWake:  make(chan struct{}, 1),
	}
}

func (s *store) markDirty(uid string) {
	s.dirty[uid] = true
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *store) markAllDirty() {
	for uid := range s.desired {
		s.dirty[uid] = true
	}
	for uid := range s.observed {
		s.dirty[uid] = true
	}
	for uid := range s.records {
		s.dirty[uid] = true
	}
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *store) wakeNode() {
	select {
	case s.nodeWake <- struct{}{}:
	default:
	}
}

// allSynced reports whether every watched bucket delivered its initial load.
func (s *store) allSynced() bool {
	for _, b := range watchedBuckets {
		if !s.synced[b] {
			return false
		}
	}
	return true
}

// takeDirty returns and clears the dirty set once everything is loaded.
func (s *store) takeDirty() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.allSynced() {
		return nil
	}
	out := make([]string, 0, len(s.dirty))
	for uid := range s.dirty {
		out = append(out, uid)
	}
	s.dirty = map[string]bool{}
	return out
}

// synced marks bucket loaded (or not, after a Reset).
func (s *store) setSynced(bucket string, v bool) {
	wasAll := s.allSynced()
	s.synced[bucket] = v
	if v && !wasAll && s.allSynced() {
		s.markAllDirty()
	}
}

// podInputs gathers the inputs of one pod. The caller holds s.mu.
func (s *store) podInputsLocked(uid string) (PodInputs, bool) {
	d := s.desired[uid]
	if d == nil || d.Pod == nil {
		return PodInputs{}, false
	}
	in := PodInputs{
		Pod:      d.Pod,
		Static:   podutil.IsStaticDesired(d),
		Verdict:  s.verdicts[uid],
		Observed: s.observed[uid],
		Probes:   s.probes[uid],
		Eviction: s.evictions[uid],
		Claims:   s.claims[uid],
	}
	if in.Claims != nil {
		in.DRAHealth = s.draHealth
	}
	if r := s.records[uid]; r != nil {
		in.Old = &r.Status
	}
	return in, true
}

// watchAll mirrors every input bucket until ctx ends (a lost watch is
// re-established and reported by bus.Mirror).
func (s *store) watchAll(ctx context.Context, c *bus.Conn) {
	applyDesired := podUpdate(s, bus.BucketDesired, s.desired)
	bus.RunAll(ctx,
		bus.NewMirror(c, bus.BucketDesired, ">", func(u bus.Update[schemas.PodDesired]) {
			if u.Kind == bus.Put && u.Value.Pod != nil {
				s.mu.Lock()
				s.names[u.Key] = u.Value.Pod.Namespace + "/" + u.Value.Pod.Name
				s.mu.Unlock()
			}
			applyDesired(u)
		}),
		bus.NewMirror(c, bus.BucketAdmission, ">", podUpdate(s, bus.BucketAdmission, s.verdicts)),
		bus.NewMirror(c, bus.BucketObserved, ">", podUpdate(s, bus.BucketObserved, s.observed)),
		bus.NewMirror(c, bus.BucketEvictions, ">", podUpdate(s, bus.BucketEvictions, s.evictions)),
		bus.NewMirror(c, bus.BucketStatus, ">", s.statusUpdate),
		bus.NewMirror(c, bus.BucketProbes, ">", s.probeUpdate),
		bus.NewMirror(c, bus.BucketRuntime, bus.KeyRuntimeState, nodeValue(s, &s.runtime, true)),
		bus.NewMirror(c, bus.BucketRuntime, bus.KeyVolumeStats, nodeValue(s, &s.volumeStats, false)),
		bus.NewMirror(c, bus.BucketRuntime, bus.KeyVolumesInUse, nodeValue(s, &s.volumesInUse, true)),
		bus.NewMirror(c, bus.BucketPressure, bus.KeyPressure, nodeValue(s, &s.pressure, true)),
		bus.NewMirror(c, bus.BucketDevices, bus.KeyDevices, nodeValue(s, &s.devices, true)),
		bus.NewMirror(c, bus.BucketDevices, "claims.>", s.claimsUpdate),
		bus.NewMirror(c, bus.BucketDevices, bus.KeyDRAHealth, s.draHealthUpdate),
	)
}

// nodeValue keeps one key of a bucket in *v; with wake, each change wakes
// the node status loop.
func nodeValue[T any](s *store, v **T, wake bool) func(bus.Update[T]) {
	return func(u bus.Update[T]) {
		s.mu.Lock()
		defer s.mu.Unlock()
		switch u.Kind {
		case bus.Put:
			*v = u.Value
		case bus.Deleted, bus.Reset:
			*v = nil
		}
		if wake {
			s.wakeNode()
		}
	}
}

// podUpdate applies updates of a bucket keyed by pod UID to m.
func podUpdate[T any](s *store, bucket string, m map[string]*T) func(bus.Update[T]) {
	return func(u bus.Update[T]) {
		s.mu.Lock()
		defer s.mu.Unlock()
		keys := bus.Apply(m, u)
		switch u.Kind {
		case bus.Put, bus.Deleted:
			s.markDirty(u.Key)
		case bus.Synced:
			s.setSynced(bucket, true)
		case bus.Reset:
			for _, k := range keys {
				s.dirty[k] = true
			}
			s.setSynced(bucket, false)
		}
	}
}

// statusUpdate loads this daemon's own bucket: after a restart the last
// written statuses are what a new status must not go behind. Later puts are
// our own writes; a Reset (the store was wiped) keeps what we know, so
// nothing goes backwards, and the writer puts it all again.
func (s *store) statusUpdate(u bus.Update[schemas.PodStatusRecord]) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch u.Kind {
	case bus.Put:
		if _, ok := s.records[u.Key]; !ok || !s.synced[bus.BucketStatus] {
			s.records[u.Key] = u.Value
			s.markDirty(u.Key)
		}
	case bus.Synced:
		s.setSynced(bus.BucketStatus, true)
	case bus.Reset:
		s.markAllDirty()
	}
}

func (s *store) probeUpdate(u bus.Update[schemas.ProbeResult]) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch u.Kind {
	case bus.Put:
		uid := u.Value.UID
		if uid == "" {
			uid, _, _ = splitProbeKey(u.Key)
		}
		if s.probes[uid] == nil {
			s.probes[uid] = map[ProbeID]schemas.ProbeResult{}
		}
		s.probes[uid][ProbeID{Container: u.Value.Container, Kind: u.Value.Probe}] = *u.Value
		s.markDirty(uid)
	case bus.Deleted:
		uid, container, kind := splitProbeKey(u.Key)
		delete(s.probes[uid], ProbeID{Container: container, Kind: kind})
		if len(s.probes[uid]) == 0 {
			delete(s.probes, uid)
		}
		s.markDirty(uid)
	case bus.Synced:
		s.setSynced(bus.BucketProbes, true)
	case bus.Reset:
		for uid := range s.probes {
			s.dirty[uid] = true
		}
		s.probes = map[string]map[ProbeID]schemas.ProbeResult{}
		s.setSynced(bus.BucketProbes, false)
	}
}

// splitProbeKey splits <podUID>.<container>.<kind>; UIDs and container
// names hold no dots.
func splitProbeKey(key string) (uid, container, kind string) {
	first := strings.IndexByte(key, '.')
	last := strings.LastIndexByte(key, '.')
	if first < 0 || last <= first {
		return key, "", ""
	}
	return key[:first], key[first+1 : last], key[last+1:]
}

// snapshot is a consistent copy of what the HTTP API and the API syncer read.
type snapshot struct {
	desired  map[string]*schemas.PodDesired
	records  map[string]*schemas.PodStatusRecord
	observed map[string]*schemas.PodObserved
	verdicts map[string]*schemas.AdmissionVerdict
	runtime  *schemas.RuntimeState
	pressure *schemas.NodePressure
	synced   bool
}

// snapshot copies the maps (not the values, which are never modified in
// place: every update replaces them).
func (s *store) snapshot() snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	snap := snapshot{
		desired:  make(map[string]*schemas.PodDesired, len(s.desired)),
		records:  make(map[string]*schemas.PodStatusRecord, len(s.records)),
		observed: make(map[string]*schemas.PodObserved, len(s.observed)),
		verdicts: make(map[string]*schemas.AdmissionVerdict, len(s.verdicts)),
		runtime:  s.runtime,
		pressure: s.pressure,
		synced:   s.allSynced(),
	}
	for k, v := range s.desired {
		snap.desired[k] = v
	}
	for k, v := range s.records {
		snap.records[k] = v
	}
	for k, v := range s.observed {
		snap.observed[k] = v
	}
	for k, v := range s.verdicts {
		snap.verdicts[k] = v
	}
	return snap
}
