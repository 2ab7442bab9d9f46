package volumes

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
)

// ObjectGetter reads the secrets and config maps pods refer to (the
// runtime's ObjectGetter has the same methods).
type ObjectGetter interface {
	GetSecret(ctx context.Context, namespace, name string) (*corev1.Secret, error)
	GetConfigMap(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error)
}

// Change detection strategies (runtime.configMapAndSecretChangeDetectionStrategy).
const (
	StrategyWatch = "Watch"
	StrategyCache = "Cache"
	StrategyGet   = "Get"
)

// Object kinds a volume may reference.
const (
	kindConfigMap = "ConfigMap"
	kindSecret    = "Secret"
)

// objectKey names a referenced configMap or secret.
type objectKey struct {
	Kind, Namespace, Name string
}

func (k objectKey) String() string { return k.Kind + " " + k.Namespace + "/" + k.Name }

// objectSource is the kubelet's secret/configMap manager: pods register
// what they reference, volumes read through it.
type objectSource interface {
	get(ctx context.Context, k objectKey) (runtime.Object, error)
	register(k objectKey)
	unregister(k objectKey)
}

// fetch reads one object through getter.
func fetch(ctx context.Context, getter ObjectGetter, k objectKey) (runtime.Object, error) {
	if k.Kind == kindSecret {
		return getter.GetSecret(ctx, k.Namespace, k.Name)
	}
	return getter.GetConfigMap(ctx, k.Namespace, k.Name)
}

// getSource is the Get strategy: every read goes to the API server.
type getSource struct{ getter ObjectGetter }

func (g getSource) get(ctx context.Context, k objectKey) (runtime.Object, error) {
	return fetch(ctx, g.getter, k)
}
func (getSource) register(objectKey)   {}
func (getSource) unregister(objectKey) {}

// cacheSource is the Cache strategy: reads are served from a cache whose
// entries live ttl; a pod that registers a reference drops the cached
// entry, so a new pod starts with fresh data.
type cacheSource struct {
	getter ObjectGetter
	ttl    time.Duration
	clock  clock.PassiveClock

	mu    sync.Mutex
	items map[objectKey]*cacheItem
}

type cacheItem struct {
	refs    int
	obj     runtime.Object
	err     error
	fetched time.Time
}

func newCacheSource(getter ObjectGetter, ttl time.Duration, c clock.PassiveClock) *cacheSource {
	return &cacheSource{getter: getter, ttl: ttl, clock: c, items: map[objectKey]*cacheItem{}}
}

func (c *cacheSource) get(ctx context.Context, k objectKey) (runtime.Object, error) {
	c.mu.Lock()
	it := c.items[k]
	if it != nil && !it.fetched.IsZero() && c.clock.Since(it.fetched) < c.ttl {
		obj, err := it.obj, it.err
		c.mu.Unlock()
		return obj, err
	}
	c.mu.Unlock()
	obj, err := fetch(ctx, c.getter, k)
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, err // not cached: the next read tries again
	}
	c.mu.Lock()
	if it := c.items[k]; it != nil {
		it.obj, it.err, it.fetched = obj, err, c.clock.Now()
	}
	c.mu.Unlock()
	return obj, err
}

func (c *cacheSource) register(k objectKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	it := c.items[k]
	if it == nil {
		it = &cacheItem{}
		c.items[k] = it
	}
	it.refs++
	it.fetched = time.Time{}
}

func (c *cacheSource) unregister(k objectKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if it := c.items[k]; it != nil {
		if it.refs--; it.refs <= 0 {
			delete(c.items, k)
		}
	}
}

// watchSource is the Watch strategy: each referenced object is listed and
// watched on its own (fieldSelector metadata.name=<name>, which the Node
// authorizer allows for objects of the node's pods); reads are served
// from that watch, and onChange is told of every change.
type watchSource struct {
	ctx      context.Context
	client   kubernetes.Interface
	fallback ObjectGetter
	onChange func(objectKey)
	// syncWait bounds how long a read waits for a new watch's first list.
	syncWait time.Duration

	mu    sync.Mutex
	items map[objectKey]*watchItem
}

type watchItem struct {
	refs   int
	store  cache.Store
	synced func() bool
	cancel context.CancelFunc
}

func newWatchSource(ctx context.Context, client kubernetes.Interface, fallback ObjectGetter, onChange func(objectKey)) *watchSource {
	return &watchSource{ctx: ctx, client: client, fallback: fallback, onChange: onChange,
		syncWait: 10 * time.Second, items: map[objectKey]*watchItem{}}
}

func (w *watchSource) register(k objectKey) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if it := w.items[k]; it != nil {
		it.refs++
		return
	}
	ctx, cancel := context.WithCancel(w.ctx)
	sel := fields.OneTermEqualSelector("metadata.name", k.Name).String()
	var lw *cache.ListWatch
	var obj runtime.Object
	if k.Kind == kindSecret {
		obj = &corev1.Secret{}
		c := w.client.CoreV1().Secrets(k.Namespace)
		lw = &cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				o.FieldSelector = sel
				return c.List(ctx, o)
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				o.FieldSelector = sel
				return c.Watch(ctx, o)
			},
		}
	} else {
		obj = &corev1.ConfigMap{}
		c := w.client.CoreV1().ConfigMaps(k.Namespace)
		lw = &cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				o.FieldSelector = sel
				return c.List(ctx, o)
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				o.FieldSelector = sel
				return c.Watch(ctx, o)
			},
		}
	}
	changed := func(any) { w.onChange(k) }
	store, ctrl := cache.NewInformerWithOptions(cache.InformerOptions{
		// The client says whether it can stream the initial list (a
		// fake clientset cannot).
		ListerWatcher: cache.ToListWatcherWithWatchListSemantics(lw, w.client),
		ObjectType:    obj,
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    changed,
			UpdateFunc: func(_, o any) { changed(o) },
			DeleteFunc: changed,
		},
	})
	go ctrl.RunWithContext(ctx)
	w.items[k] = &watchItem{refs: 1, store: store, synced: ctrl.HasSynced, cancel: cancel}
}

func (w *watchSource) unregister(k objectKey) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if it := w.items[k]; it != nil {
		if it.refs--; it.refs <= 0 {
			it.cancel()
			delete(w.items, k)
		}
	}
}

func (w *watchSource) get(ctx context.Context, k objectKey) (runtime.Object, error) {
	w.mu.Lock()
	it := w.items[k]
	w.mu.Unlock()
	if it == nil {
		return fetch(ctx, w.fallback, k)
	}
	if !it.synced() {
		wctx, cancel := context.WithTimeout(ctx, w.syncWait)
		ok := cache.WaitForCacheSync(wctx.Done(), it.synced)
		cancel()
		if !ok {
			// The watch cannot list yet (the API server is slow, or has not
			// linked the pod to the object): ask directly.
			return fetch(ctx, w.fallback, k)
		}
	}
	o, exists, err := it.store.GetByKey(k.Namespace + "/" + k.Name)
	if err != nil {
		return nil, err
	}
	if !exists {
		res := "configmap"
		if k.Kind == kindSecret {
			res = "secret"
		}
		return nil, apierrors.NewNotFound(corev1.Resource(res), k.Name)
	}
	return o.(runtime.Object), nil
}

// clientGetter reads objects with a clientset.
type clientGetter struct{ c kubernetes.Interface }

func (g clientGetter) GetSecret(ctx context.Context, ns, name string) (*corev1.Secret, error) {
	return g.c.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
}

func (g clientGetter) GetConfigMap(ctx context.Context, ns, name string) (*corev1.ConfigMap, error) {
	return g.c.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
}

// errNoAPI is why a standalone node cannot read API objects.
func errNoAPI(what string) error {
	return fmt.Errorf("%s: no API server to read it from (standalone node: node.kubeconfig is empty)", what)
}
