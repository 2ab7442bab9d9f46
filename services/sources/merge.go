package sources

import (
	"fmt"
	"log/slog"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/podutil"
	"github.com/nodelet/nodelet/schemas"
)

// snapshot is one source's full list of pods (the kubelet's SET). Sources
// hand over pods they no longer touch.
type snapshot struct {
	source string
	pods   []*corev1.Pod
}

// Op tells apart the changes a snapshot makes, with the kubelet's names.
type Op string

const (
	// OpAdd: a pod the source did not have.
	OpAdd Op = "ADD"
	// OpUpdate: the spec, labels or annotations changed.
	OpUpdate Op = "UPDATE"
	// OpDelete: the pod got a deletionTimestamp (a graceful delete; the
	// pod stays until its source drops it).
	OpDelete Op = "DELETE"
	// OpRemove: the source no longer has the pod.
	OpRemove Op = "REMOVE"
	// OpReconcile: only the status changed.
	OpReconcile Op = "RECONCILE"
)

// Change is one pod's change from one snapshot.
type Change struct {
	Op     Op
	Source string
	Pod    *corev1.Pod
}

// entry is one pod of one source, as the merge keeps it.
type entry struct {
	pod       *corev1.Pod
	source    string
	firstSeen time.Time
	seq       uint64 // arrival order among pods first seen at the same time
	// compared is the object of the source's last list that pod was
	// compared with (or made from): the API source hands over the same
	// object while the pod is unchanged (podCopies), and comparing it again
	// would find nothing, at the price of a DeepEqual of every pod on every
	// list.
	compared *corev1.Pod
	// gen changes whenever pod does, so that the merger writes only
	// entries it has not written.
	gen uint64
}

// store is the kubelet's podStorage: per source, the pods it last listed,
// keyed by UID. Pods keep the object first stored and take over only
// semantic changes (checkAndUpdatePod), so a list that changes nothing but
// bookkeeping (resourceVersion, managedFields) writes nothing.
type store struct {
	clock   clock.PassiveClock
	log     *slog.Logger
	sources map[string]map[types.UID]*entry
	seen    map[string]bool // sources that delivered a full list
	seq     uint64
	gen     uint64
}

func newStore(clk clock.PassiveClock, log *slog.Logger) *store {
	return &store{clock: clk, log: log, sources: map[string]map[types.UID]*entry{}, seen: map[string]bool{}}
}

// restore puts back a pod the bucket held from an earlier run, as if its
// source had listed it at firstSeen. The source's first list replaces what
// was restored.
func (s *store) restore(source string, pod *corev1.Pod, firstSeen time.Time) {
	m := s.sources[source]
	if m == nil {
		m = map[types.UID]*entry{}
		s.sources[source] = m
	}
	s.gen++
	m[pod.UID] = &entry{pod: pod, source: source, firstSeen: firstSeen, gen: s.gen}
}

// set replaces source's pods with pods and returns the changes, each
// logged. The first set of a source marks it as seen.
func (s *store) set(source string, pods []*corev1.Pod) []Change {
	s.seen[source] = true
	old := s.sources[source]
	next := make(map[types.UID]*entry, len(pods))
	var changes []Change
	now := s.clock.Now().UTC().Round(0)
	for _, ref := range pods {
		if ref.Annotations == nil {
			ref.Annotations = map[string]string{}
		}
		// Annotate with the source before any comparison, as the kubelet.
		ref.Annotations[podutil.AnnotationConfigSource] = source
		if _, dup := next[ref.UID]; dup {
			s.log.Warn("Pod listed twice by its source, ignoring the second", "source", source,
				"pod", podKey(ref), "podUID", ref.UID)
			continue
		}
		if e, ok := old[ref.UID]; ok {
			next[ref.UID] = e
			if ref == e.compared {
				continue
			}
			e.compared = ref
			if op, changed := checkAndUpdatePod(e.pod, ref); changed {
				s.gen++
				e.gen = s.gen
				changes = append(changes, Change{Op: op, Source: source, Pod: e.pod})
			}
			continue
		}
		s.seq++
		s.gen++
		ref.Annotations[podutil.AnnotationConfigSeen] = now.Format(time.RFC3339Nano)
		next[ref.UID] = &entry{pod: ref, source: source, firstSeen: now, seq: s.seq, compared: ref, gen: s.gen}
		changes = append(changes, Change{Op: OpAdd, Source: source, Pod: ref})
	}
	var removed []*corev1.Pod
	for uid, e := range old {
		if _, ok := next[uid]; !ok {
			removed = append(removed, e.pod)
		}
	}
	sort.Slice(removed, func(i, j int) bool { return podKey(removed[i]) < podKey(removed[j]) })
	for _, p := range removed {
		changes = append(changes, Change{Op: OpRemove, Source: source, Pod: p})
	}
	s.sources[source] = next
	for _, c := range changes {
		s.log.Info("Desired pod changed", "op", string(c.Op), "source", source, "pod", podKey(c.Pod), "podUID", c.Pod.UID)
	}
	return changes
}

// drop forgets every pod of source (a source no longer configured).
func (s *store) drop(source string) []Change {
	var changes []Change
	for _, e := range s.sources[source] {
		changes = append(changes, Change{Op: OpRemove, Source: source, Pod: e.pod})
		s.log.Info("Desired pod changed", "op", string(OpRemove), "source", source, "pod", podKey(e.pod),
			"podUID", e.pod.UID, "reason", "source not configured")
	}
	delete(s.sources, source)
	return changes
}

// checkAndUpdatePod is the kubelet's: it updates existing from ref and says
// what kind of change that was, if any.
func checkAndUpdatePod(existing, ref *corev1.Pod) (Op, bool) {
	if !podutil.PodsDifferSemantically(existing, ref) {
		if !equality.Semantic.DeepEqual(existing.Status, ref.Status) {
			existing.Status = ref.Status
			return OpReconcile, true
		}
		return "", false
	}
	existing.Spec = ref.Spec
	existing.Labels = ref.Labels
	existing.DeletionTimestamp = ref.DeletionTimestamp
	existing.DeletionGracePeriodSeconds = ref.DeletionGracePeriodSeconds
	existing.Generation = ref.Generation
	existing.Status = ref.Status
	annotations := make(map[string]string, len(ref.Annotations)+3)
	for k, v := range ref.Annotations {
		annotations[k] = v
	}
	for k, v := range existing.Annotations {
		if podutil.IsLocalAnnotation(k) {
			annotations[k] = v
		}
	}
	existing.Annotations = annotations
	if ref.DeletionTimestamp != nil {
		return OpDelete, true
	}
	return OpUpdate, true
}

// duplicate is a pod not published because another pod, seen earlier,
// has its full name (or UID).
type duplicate struct {
	entry *entry
	by    *entry
}

// sourceRank orders sources for pods first seen at the very same time.
func sourceRank(s string) int {
	switch s {
	case schemas.SourceFile:
		return 0
	case schemas.SourceHTTP:
		return 1
	case schemas.SourceAPI:
		return 2
	}
	return 3
}

// merged returns the pods to publish, by UID, and the duplicates left out.
// Of pods with the same namespace/name, across all sources, the one seen
// first wins and later ones are rejected (the kubelet rejects a duplicate
// full name within one source the same way). Pods restored from the bucket
// keep their first-seen time, so a restart does not change the winner.
func (s *store) merged() (map[types.UID]*entry, []duplicate) {
	var all []*entry
	for _, m := range s.sources {
		for _, e := range m {
			all = append(all, e)
		}
	}
	sort.Slice(all, func(i, j int) bool {
		a, b := all[i], all[j]
		if !a.firstSeen.Equal(b.firstSeen) {
			return a.firstSeen.Before(b.firstSeen)
		}
		if a.seq != b.seq {
			return a.seq < b.seq
		}
		if ra, rb := sourceRank(a.source), sourceRank(b.source); ra != rb {
			return ra < rb
		}
		return a.pod.UID < b.pod.UID
	})
	out := make(map[types.UID]*entry, len(all))
	names := map[string]*entry{}
	var dups []duplicate
	for _, e := range all {
		name := podKey(e.pod)
		if by, ok := names[name]; ok {
			dups = append(dups, duplicate{entry: e, by: by})
			continue
		}
		if by, ok := out[e.pod.UID]; ok {
			dups = append(dups, duplicate{entry: e, by: by})
			continue
		}
		names[name] = e
		out[e.pod.UID] = e
	}
	return out, dups
}

// allSeen reports whether every one of sources has delivered a full list.
func (s *store) allSeen(sources []string) bool {
	for _, src := range sources {
		if !s.seen[src] {
			return false
		}
	}
	return true
}

func podKey(p *corev1.Pod) string { return p.Namespace + "/" + p.Name }

// duplicateMessage is the event text for a rejected duplicate, after the
// kubelet's "Error validating pod %s from %s due to duplicate pod name %q,
// ignoring".
func duplicateMessage(d duplicate) string {
	p, by := d.entry.pod, d.by.pod
	if p.UID == by.UID && podKey(p) != podKey(by) {
		return fmt.Sprintf("Error validating pod %s from %s due to duplicate pod UID %s (pod %s from %s), ignoring",
			podKey(p), d.entry.source, p.UID, podKey(by), d.by.source)
	}
	return fmt.Sprintf("Error validating pod %s (UID %s) from %s due to duplicate pod name %q (pod UID %s from %s), ignoring",
		podKey(p), p.UID, d.entry.source, p.Name, by.UID, d.by.source)
}
