package soak

import (
	"context"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/nodelet/nodelet/internal/daemon"
)

// eventSource is the source.component of a node agent's events: the
// kubelet's, and nodelet-status posts under the same name.
const eventSource = "kubelet"

// received counts the events the API received from one node: every Event
// object of source kubelet on the node, at the highest count seen, from a
// list and watch of every namespace that runs from before the soak's first
// pod to its end. An event that expires (the API's event TTL, an hour)
// keeps the count it had; an aggregated one ("combined from similar
// events") is one object counted as often as it was posted.
type received struct {
	node string
	mu   sync.Mutex
	by   map[types.UID]eventCount
}

type eventCount struct {
	reason string
	count  int64
}

// watchEvents starts counting the node's events until ctx ends, and
// returns once the first list is in.
func watchEvents(ctx context.Context, kube kubernetes.Interface, node string) (*received, error) {
	r := &received{node: node, by: map[types.UID]eventCount{}}
	lw := cache.NewListWatchFromClient(kube.CoreV1().RESTClient(), "events", metav1.NamespaceAll,
		fields.OneTermEqualSelector("source", eventSource))
	inf := cache.NewSharedIndexInformer(lw, &corev1.Event{}, 0, cache.Indexers{})
	// Keep only what is counted: a long soak makes tens of thousands.
	_ = inf.SetTransform(func(obj any) (any, error) {
		ev, ok := obj.(*corev1.Event)
		if !ok {
			return obj, nil
		}
		return &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: ev.Name, Namespace: ev.Namespace, UID: ev.UID,
			ResourceVersion: ev.ResourceVersion}, Reason: ev.Reason, Count: ev.Count, Source: ev.Source}, nil
	})
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    r.see,
		UpdateFunc: func(_, obj any) { r.see(obj) },
	})
	if err != nil {
		return nil, err
	}
	go inf.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return nil, ctx.Err()
	}
	return r, nil
}

func (r *received) see(obj any) {
	ev, ok := obj.(*corev1.Event)
	if !ok || ev.Source.Host != r.node {
		return
	}
	n := int64(max(ev.Count, 1))
	r.mu.Lock()
	defer r.mu.Unlock()
	if c, ok := r.by[ev.UID]; !ok || n > c.count {
		r.by[ev.UID] = eventCount{reason: ev.Reason, count: n}
	}
}

// tally is the count so far: Received, Objects and ByReason.
func (r *received) tally() Events {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := Events{Objects: len(r.by), ByReason: map[string]int64{}}
	for _, c := range r.by {
		e.Received += c.count
		e.ByReason[c.reason] += c.count
	}
	return e
}

// statusCounters reads nodelet-status's event counters from its metrics
// socket: posted, and dropped by reason.
// g is the node view's one gatherer: each gatherer keeps its own idle
// connection to the daemon, which the daemon holds open (a fresh one per
// sample grew nodelet-status's fds by one a sample).
func statusCounters(g *daemon.RemoteGatherer) (posted int64, dropped map[string]int64, err error) {
	fams, err := g.Gather()
	if err != nil {
		return 0, nil, err
	}
	dropped = map[string]int64{}
	found := false
	for _, f := range fams {
		switch f.GetName() {
		case "nodelet_events_posted_total":
			found = true
			for _, m := range f.GetMetric() {
				posted += int64(m.GetCounter().GetValue())
			}
		case "nodelet_events_dropped_total":
			for _, m := range f.GetMetric() {
				reason := ""
				for _, l := range m.GetLabel() {
					if l.GetName() == "reason" {
						reason = l.GetValue()
					}
				}
				dropped[reason] += int64(m.GetCounter().GetValue())
			}
		}
	}
	if !found {
		return 0, nil, errNoStatusMetrics
	}
	return posted, dropped, nil
}
