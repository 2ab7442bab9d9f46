package server

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/schemas"
)

// podIndex is the node's desired pods by namespace/name, from the desired
// bucket: the kubelet's pod manager as its server sees it (GetPodByName).
type podIndex struct {
	mu     sync.RWMutex
	byKey  map[string]*corev1.Pod // bucket key (pod UID) → pod
	byName map[string]*corev1.Pod // namespace/name → pod
	synced chan struct{}
	once   sync.Once
}

func newPodIndex() *podIndex {
	return &podIndex{byKey: map[string]*corev1.Pod{}, byName: map[string]*corev1.Pod{}, synced: make(chan struct{})}
}

// byUID is the desired pod of uid, nil when there is none.
func (p *podIndex) byUID(uid string) *corev1.Pod {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.byKey[uid]
}

// mirror keeps the index from the desired bucket (bus.Mirror re-establishes
// a lost watch and reports the outage).
func (p *podIndex) mirror(c *bus.Conn) bus.Runner {
	return bus.NewMirror(c, bus.BucketDesired, ">", func(u bus.Update[schemas.PodDesired]) {
		p.mu.Lock()
		defer p.mu.Unlock()
		switch u.Kind {
		case bus.Put:
			if old := p.byKey[u.Key]; old != nil {
				delete(p.byName, old.Namespace+"/"+old.Name)
			}
			if u.Value.Pod == nil {
				delete(p.byKey, u.Key)
				return
			}
			p.byKey[u.Key] = u.Value.Pod
			p.byName[u.Value.Pod.Namespace+"/"+u.Value.Pod.Name] = u.Value.Pod
		case bus.Deleted:
			if old := p.byKey[u.Key]; old != nil {
				delete(p.byName, old.Namespace+"/"+old.Name)
				delete(p.byKey, u.Key)
			}
		case bus.Reset:
			p.byKey, p.byName = map[string]*corev1.Pod{}, map[string]*corev1.Pod{}
		case bus.Synced:
			p.once.Do(func() { close(p.synced) })
		}
	})
}

// get returns the pod namespace/name, waiting for the bucket's initial load
// (bounded by ctx) so that a request right after a restart is not a 404.
func (p *podIndex) get(ctx context.Context, namespace, name string) (*corev1.Pod, bool) {
	t := time.NewTimer(10 * time.Second)
	defer t.Stop()
	select {
	case <-p.synced:
	case <-ctx.Done():
		return nil, false
	case <-t.C:
		return nil, false
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	pod, ok := p.byName[namespace+"/"+name]
	return pod, ok
}

// containerSpec is the kubelet's kubecontainer.GetContainerSpec: the named
// container among the pod's containers, init containers and ephemeral
// containers, or false.
func containerSpec(pod *corev1.Pod, name string) bool {
	for _, c := range pod.Spec.Containers {
		if c.Name == name {
			return true
		}
	}
	for _, c := range pod.Spec.InitContainers {
		if c.Name == name {
			return true
		}
	}
	for _, c := range pod.Spec.EphemeralContainers {
		if c.Name == name {
			return true
		}
	}
	return false
}
