package soak

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// podTracker follows the soak's pods in the API: how many there are, how
// many lifecycles the node has completed (a pod bound to the node and then
// deleted from the API: the agent confirmed it gone), and the containers'
// restarts.
type podTracker struct {
	node string
	mu   sync.Mutex
	pods map[types.UID]*corev1.Pod
	// lifecycles counts deleted pods that were bound to the node.
	lifecycles int
	// restarts holds each live pod's restarts; finished those of deleted pods.
	restarts map[types.UID]int
	finished int
	// starts are the node's pods' start latencies, one per pod, in the
	// order they were seen; started holds the pods already counted.
	starts  []podStart
	started map[types.UID]bool
}

// podStart is how long a pod took from its binding to the node (its
// PodScheduled condition) to its first container's start, as the API
// has them (whole seconds): the wait for a sandbox, volumes and image
// included, the same for either agent.
type podStart struct {
	scheduled time.Time
	seconds   float64
}

func trackPods(ctx context.Context, kube kubernetes.Interface, node string) (*podTracker, error) {
	t := newPodTracker(node)
	f := informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithNamespace(Namespace))
	inf := f.Core().V1().Pods().Informer()
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    t.set,
		UpdateFunc: func(_, obj any) { t.set(obj) },
		DeleteFunc: t.deleted,
	})
	if err != nil {
		return nil, err
	}
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return nil, ctx.Err()
	}
	return t, nil
}

func newPodTracker(node string) *podTracker {
	return &podTracker{node: node, pods: map[types.UID]*corev1.Pod{}, restarts: map[types.UID]int{}, started: map[types.UID]bool{}}
}

func (t *podTracker) set(obj any) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.pods[p.UID] = p
	if r := podRestarts(p); r > t.restarts[p.UID] {
		t.restarts[p.UID] = r
	}
	if p.Spec.NodeName == t.node && !t.started[p.UID] {
		if scheduled, first, ok := startTimes(p); ok {
			t.started[p.UID] = true
			t.starts = append(t.starts, podStart{scheduled, max(0, first.Sub(scheduled).Seconds())})
		}
	}
}

// startTimes are when p was bound to its node and when its first
// container (init containers included) started, once both are known.
func startTimes(p *corev1.Pod) (scheduled, first time.Time, ok bool) {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionTrue {
			scheduled = c.LastTransitionTime.Time
		}
	}
	for _, s := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		for _, st := range []corev1.ContainerState{s.State, s.LastTerminationState} {
			var at time.Time
			switch {
			case st.Running != nil:
				at = st.Running.StartedAt.Time
			case st.Terminated != nil:
				at = st.Terminated.StartedAt.Time
			}
			if !at.IsZero() && (first.IsZero() || at.Before(first)) {
				first = at
			}
		}
	}
	return scheduled, first, !scheduled.IsZero() && !first.IsZero()
}

// startLatency sums up the start latencies of the pods bound to the node
// at or after since.
func (t *podTracker) startLatency(since time.Time) *Latency {
	t.mu.Lock()
	defer t.mu.Unlock()
	var v []float64
	for _, s := range t.starts {
		if !s.scheduled.Before(since.Truncate(time.Second)) {
			v = append(v, s.seconds)
		}
	}
	return latencyOf(v)
}

func (t *podTracker) deleted(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if old, ok := t.pods[p.UID]; ok && old.Spec.NodeName != "" {
		p = old
	}
	delete(t.pods, p.UID)
	if p.Spec.NodeName == t.node {
		t.lifecycles++
	}
	t.finished += max(t.restarts[p.UID], podRestarts(p))
	delete(t.restarts, p.UID)
}

func podRestarts(p *corev1.Pod) int {
	n := 0
	for _, s := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		n += int(s.RestartCount)
	}
	return n
}

// podCounts is the tracker at a moment.
type podCounts struct {
	// Live is every pod of the soak not finished (pending ones too): what
	// holds a place under the node's pod limit, or waits for one.
	Live int
	// Bound is Live on the node; Started of those, in phase Running;
	// Running of those, ready too.
	Bound, Started, Running int
	Lifecycles              int
	Restarts                int
	// Total is every pod the API has, finished ones too.
	Total int
}

func (t *podTracker) counts() podCounts {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := podCounts{Lifecycles: t.lifecycles, Restarts: t.finished, Total: len(t.pods)}
	for uid, p := range t.pods {
		c.Restarts += t.restarts[uid]
		if finished(p) {
			continue
		}
		c.Live++
		if p.Spec.NodeName == t.node {
			c.Bound++
			if p.Status.Phase == corev1.PodRunning {
				c.Started++
				if podReady(p) {
					c.Running++
				}
			}
		}
	}
	return c
}

// remaining describes the pods still in the API, the drained node's
// leftovers there: "<name> <phase>", and how long ago their graceful
// deletion ended (deletionTimestamp is the deletion's time plus the grace
// period: a pod past it should have been gone).
func (t *podTracker) remaining(now time.Time) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for _, p := range t.pods {
		s := fmt.Sprintf("%s %s uid %s", p.Name, p.Status.Phase, p.UID)
		if d := p.DeletionTimestamp; d != nil {
			s += fmt.Sprintf(", grace period over %.0fs ago", now.Sub(d.Time).Seconds())
		}
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// list returns the pods of one kind (label kindLabel), oldest first.
func (t *podTracker) list(kind string) []*corev1.Pod {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []*corev1.Pod
	for _, p := range t.pods {
		if p.Labels[kindLabel] == kind {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreationTimestamp.Before(&out[j].CreationTimestamp) })
	return out
}

func finished(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// waitPods polls until cond holds for the tracker's counts, or timeout.
func (t *podTracker) waitPods(ctx context.Context, timeout time.Duration, cond func(podCounts) bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond(t.counts()) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(500 * time.Millisecond):
		}
	}
}
