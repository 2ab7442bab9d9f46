package volumes

import (
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// trackedPods are the pods whose volumes are set up, as the kubelet's
// desired state of world holds them, and which of them need their
// configMap, secret, downwardAPI and projected volumes rewritten (dirty):
// a watched object changed, a trust bundle changed, a token or pod
// certificate was issued. The reconciler (reconciler.go) drains them.
type trackedPods struct {
	// objects are told which configMaps and secrets the pods reference
	// (the Watch and Cache strategies); nil: none.
	objects objectRegistry
	// forget are the parts that keep something per pod (tokens, pod
	// certificates), told when a pod goes.
	forget []podForgetter
	// wakePod asks the runtime to sync a pod again; nil: none.
	wakePod func(types.UID)

	mu    sync.Mutex
	pods  map[types.UID]*podVolumes
	dirty map[types.UID]bool
	kick  chan struct{}
}

// objectRegistry is told which API objects the pods reference
// (objects.go: watchSource, cacheSource).
type objectRegistry interface {
	register(objectKey)
	unregister(objectKey)
}

// podForgetter drops what a part keeps for a pod.
type podForgetter interface {
	forgetPod(uid types.UID)
}

var (
	_ objectRegistry = (*watchSource)(nil)
	_ objectRegistry = (*cacheSource)(nil)
	_ podForgetter   = (*tokenManager)(nil)
	_ podForgetter   = (*podCertificates)(nil)
	_ podForgetter   = (*inUseTracker)(nil)
)

func newTrackedPods(wakePod func(types.UID)) *trackedPods {
	return &trackedPods{wakePod: wakePod, pods: map[types.UID]*podVolumes{}, dirty: map[types.UID]bool{}, kick: make(chan struct{}, 1)}
}

// podVolumes is what the reconciler knows of one pod.
type podVolumes struct {
	// mu serialises setup, refresh and teardown of the pod's volumes.
	mu sync.Mutex
	// pod is the newest spec Setup saw.
	pod *corev1.Pod
	// spec is the pod as first seen, readable under the trackedPods' lock
	// (its volumes never change).
	spec *corev1.Pod
	refs []objectKey
	// ready: volumes set up at least once, which a refresh rewrites.
	ready map[string]bool
	// persistent: host paths of the PVC and CSI volumes set up, which
	// later syncs reuse (the kubelet processes a pod's volumes once).
	persistent map[string]string
	// mounted: host paths of every volume set up, which the volume stats
	// measure (the kubelet's mounted volumes).
	mounted map[string]string
	// lastErr per volume, so a failing refresh is logged once.
	lastErr map[string]string
	gone    bool
}

// track finds the pod's entry, registering the objects it references the
// first time it is seen.
func (t *trackedPods) track(pod *corev1.Pod) *podVolumes {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.pods[pod.UID]
	if p == nil {
		p = &podVolumes{spec: pod, refs: referencedObjects(pod), ready: map[string]bool{}, lastErr: map[string]string{}, persistent: map[string]string{}, mounted: map[string]string{}}
		t.pods[pod.UID] = p
		if t.objects != nil {
			for _, k := range p.refs {
				t.objects.register(k)
			}
		}
	}
	return p
}

// untrack drops the pod, and what the other parts keep for it; it returns
// the pod's entry, marked gone, or nil.
func (t *trackedPods) untrack(uid types.UID) *podVolumes {
	t.mu.Lock()
	p := t.pods[uid]
	delete(t.pods, uid)
	delete(t.dirty, uid)
	t.mu.Unlock()
	for _, f := range t.forget {
		f.forgetPod(uid)
	}
	if p == nil {
		return nil
	}
	if t.objects != nil {
		for _, k := range p.refs {
			t.objects.unregister(k)
		}
	}
	p.mu.Lock()
	p.gone = true
	p.mu.Unlock()
	return p
}

// get is the pod's entry, or nil.
func (t *trackedPods) get(uid types.UID) *podVolumes {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.pods[uid]
}

// objectChanged marks the pods that reference k for a refresh.
func (t *trackedPods) objectChanged(k objectKey) {
	t.mu.Lock()
	for uid, p := range t.pods {
		for _, r := range p.refs {
			if r == k {
				t.dirty[uid] = true
			}
		}
	}
	t.mu.Unlock()
	t.wake()
}

// markDirty marks the pods whose spec matches for a refresh.
func (t *trackedPods) markDirty(match func(*corev1.Pod) bool) {
	t.mu.Lock()
	for uid, p := range t.pods {
		if p.spec != nil && match(p.spec) {
			t.dirty[uid] = true
		}
	}
	t.mu.Unlock()
	t.wake()
}

// credentialsChanged: a pod certificate was issued, denied or failed. Its
// volumes are rewritten, and a pod still waiting for them synced again.
func (t *trackedPods) credentialsChanged(uid types.UID) {
	t.mu.Lock()
	if _, ok := t.pods[uid]; ok {
		t.dirty[uid] = true
	}
	t.mu.Unlock()
	t.wake()
	if t.wakePod != nil {
		t.wakePod(uid)
	}
}

// wake makes the reconciler refresh the dirty pods and compute its next
// wait again.
func (t *trackedPods) wake() {
	select {
	case t.kick <- struct{}{}:
	default:
	}
}

// woken is signalled by wake.
func (t *trackedPods) woken() <-chan struct{} { return t.kick }

func (t *trackedPods) takeDirty() []types.UID {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]types.UID, 0, len(t.dirty))
	for uid := range t.dirty {
		out = append(out, uid)
	}
	t.dirty = map[types.UID]bool{}
	return out
}

func (t *trackedPods) all() []types.UID {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]types.UID, 0, len(t.pods))
	for uid := range t.pods {
		out = append(out, uid)
	}
	return out
}

// mountedVolumes lists the volumes set up for each pod, by pod UID, with
// the newest spec of each pod.
func (t *trackedPods) mountedVolumes() (map[string][]mountedVolume, map[string]*corev1.Pod) {
	t.mu.Lock()
	tracked := make(map[string]*podVolumes, len(t.pods))
	for uid, p := range t.pods {
		tracked[string(uid)] = p
	}
	t.mu.Unlock()
	pods := map[string][]mountedVolume{}
	specs := map[string]*corev1.Pod{}
	for uid, p := range tracked {
		p.mu.Lock()
		if pod := p.pod; pod != nil {
			specs[uid] = pod
			for _, v := range pod.Spec.Volumes {
				if path, ok := p.mounted[v.Name]; ok {
					pods[uid] = append(pods[uid], mountedVolume{spec: v, path: path})
				}
			}
		}
		p.mu.Unlock()
	}
	return pods, specs
}

// projectsTrustBundles: a projected volume of the pod has a
// clusterTrustBundle source.
func projectsTrustBundles(pod *corev1.Pod) bool {
	for _, v := range pod.Spec.Volumes {
		if v.Projected != nil {
			for _, s := range v.Projected.Sources {
				if s.ClusterTrustBundle != nil {
					return true
				}
			}
		}
	}
	return false
}

// referencedObjects lists the configMaps and secrets the pod's volumes
// read (env references are read when a container starts).
func referencedObjects(pod *corev1.Pod) []objectKey {
	seen := map[objectKey]bool{}
	var out []objectKey
	add := func(kind, name string) {
		k := objectKey{Kind: kind, Namespace: pod.Namespace, Name: name}
		if name != "" && !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	for _, v := range pod.Spec.Volumes {
		switch {
		case v.ConfigMap != nil:
			add(kindConfigMap, v.ConfigMap.Name)
		case v.Secret != nil:
			add(kindSecret, v.Secret.SecretName)
		case v.Projected != nil:
			for _, s := range v.Projected.Sources {
				if s.ConfigMap != nil {
					add(kindConfigMap, s.ConfigMap.Name)
				}
				if s.Secret != nil {
					add(kindSecret, s.Secret.Name)
				}
			}
		}
	}
	return out
}
