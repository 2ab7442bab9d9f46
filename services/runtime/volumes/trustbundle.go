package volumes

import (
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	certificatesv1alpha1 "k8s.io/api/certificates/v1alpha1"
	certificatesv1beta1 "k8s.io/api/certificates/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	lrucache "k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// The kubelet's figures (kubelet.go, clustertrustbundle_manager.go): a
// cache of 2 × maxPods normalised bundles, each kept 5 minutes, and a
// selector at most 100 KiB long.
const (
	trustBundleCacheSize   = 2 * 110
	trustBundleCacheTTL    = 5 * time.Minute
	maxLabelSelectorLength = 100 * 1024
)

// errCTBStatic is the kubelet's NoopManager error, given on a standalone
// node and where kube-apiserver serves no version of ClusterTrustBundle.
var errCTBStatic = errors.New("ClusterTrustBundle projection is not supported in static kubelet mode")

// ctbView is what a projection reads of a ClusterTrustBundle, whatever
// its API version.
type ctbView struct {
	name, signerName, trustBundle string
}

// ctbLister lists and gets one API version's bundles as views.
type ctbLister interface {
	get(name string) (ctbView, error)
	list(sel labels.Selector) ([]ctbView, error)
}

// trustBundles is the kubelet's clustertrustbundle.LazyInformerManager:
// on the first projection that needs one it asks discovery which version
// of certificates.k8s.io serves clustertrustbundles (v1, then v1beta1,
// then v1alpha1), starts an informer on it (the Node authorizer lets a
// node get, list and watch them) and waits up to 10 s for it to sync; no
// version served makes every projection fail as on a static kubelet. A
// bundle that changes drops the cached anchors of its signer (or name)
// and wakes the pods that project bundles.
type trustBundles struct {
	client  kubernetes.Interface
	log     *slog.Logger
	changed func()

	mu       sync.Mutex
	decided  bool
	static   bool
	informer cache.SharedIndexInformer
	lister   ctbLister
	// normalized caches PEM by cacheKey.
	normalized *lrucache.LRUExpireCache
}

type ctbCacheKey struct {
	ctbName, signerName, labelSelector string
}

func newTrustBundles(client kubernetes.Interface, log *slog.Logger, changed func()) *trustBundles {
	return &trustBundles{client: client, log: log, changed: changed, normalized: lrucache.NewLRUExpireCache(trustBundleCacheSize)}
}

// ensure is the kubelet's ensureManagerSet.
func (t *trustBundles) ensure(ctx context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.decided {
		return nil
	}
	if t.client == nil {
		t.decided, t.static = true, true
		return nil
	}
	factory := informers.NewSharedInformerFactoryWithOptions(t.client, 0)
	for _, gv := range []schema.GroupVersion{certificatesv1.SchemeGroupVersion, certificatesv1beta1.SchemeGroupVersion, certificatesv1alpha1.SchemeGroupVersion} {
		ok, err := t.served(gv)
		if err != nil {
			return fmt.Errorf("failed to ensure informer manager for ClusterTrustBundles: failed to determine which informer manager to choose: %w", err)
		}
		if !ok {
			continue
		}
		switch gv {
		case certificatesv1.SchemeGroupVersion:
			i := factory.Certificates().V1().ClusterTrustBundles()
			t.informer, t.lister = i.Informer(), typedCTBLister[certificatesv1.ClusterTrustBundle]{i.Lister(), viewV1}
		case certificatesv1beta1.SchemeGroupVersion:
			i := factory.Certificates().V1beta1().ClusterTrustBundles()
			t.informer, t.lister = i.Informer(), typedCTBLister[certificatesv1beta1.ClusterTrustBundle]{i.Lister(), viewV1beta1}
		default:
			i := factory.Certificates().V1alpha1().ClusterTrustBundles()
			t.informer, t.lister = i.Informer(), typedCTBLister[certificatesv1alpha1.ClusterTrustBundle]{i.Lister(), viewV1alpha1}
		}
		if _, err := t.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    t.drop,
			UpdateFunc: func(_, o any) { t.drop(o) },
			DeleteFunc: t.drop,
		}); err != nil {
			return fmt.Errorf("while registering event handler on informer: %w", err)
		}
		t.decided = true
		factory.Start(ctx.Done())
		t.log.Info("Started ClusterTrustBundle informer", "apiGroup", gv.String())
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if !cache.WaitForCacheSync(wctx.Done(), t.informer.HasSynced) {
			t.log.Info("ClusterTrustBundle informer not synced, continuing to attempt in background")
		}
		return nil
	}
	t.decided, t.static = true, true
	t.log.Info("No version of the ClusterTrustBundle API was found, the ClusterTrustBundle informer won't be started")
	return nil
}

// served is the kubelet's clusterTrustBundlesAvailable.
func (t *trustBundles) served(gv schema.GroupVersion) (bool, error) {
	list, err := t.client.Discovery().ServerResourcesForGroupVersion(gv.String())
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if list != nil {
		for _, r := range list.APIResources {
			if r.Name == "clustertrustbundles" {
				return true, nil
			}
		}
	}
	return false, err
}

// drop is the kubelet's dropCacheFor: a bundle with a signer drops every
// cached selection of that signer, one without drops its name.
func (t *trustBundles) drop(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	v, ok := anyCTBView(obj)
	if !ok {
		return
	}
	if v.signerName != "" {
		t.normalized.RemoveAll(func(k any) bool { return k.(ctbCacheKey).signerName == v.signerName })
	} else {
		t.normalized.RemoveAll(func(k any) bool { return k.(ctbCacheKey).ctbName == v.name })
	}
	if t.changed != nil {
		t.changed()
	}
}

// ready says why trust bundles cannot be read yet: no API serving them
// (static mode), or the informer not synced.
func (t *trustBundles) ready(ctx context.Context) error {
	if err := t.ensure(ctx); err != nil {
		return err
	}
	if t.static {
		return errCTBStatic
	}
	if !t.informer.HasSynced() {
		return errors.New("ClusterTrustBundle informer has not yet synced")
	}
	return nil
}

// byName is the kubelet's GetTrustAnchorsByName.
func (t *trustBundles) byName(ctx context.Context, name string, allowMissing bool) ([]byte, error) {
	if err := t.ready(ctx); err != nil {
		return nil, err
	}
	key := ctbCacheKey{ctbName: name}
	if v, ok := t.normalized.Get(key); ok {
		return v.([]byte), nil
	}
	ctb, err := t.lister.get(name)
	if apierrors.IsNotFound(err) && allowMissing {
		return []byte{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("while getting ClusterTrustBundle: %w", err)
	}
	out := normalizeTrustAnchors([]ctbView{ctb})
	t.normalized.Add(key, out, trustBundleCacheTTL)
	return out, nil
}

// bySigner is the kubelet's GetTrustAnchorsBySigner: a nil selector
// matches nothing, an empty one everything.
func (t *trustBundles) bySigner(ctx context.Context, signer string, selector *metav1.LabelSelector, allowMissing bool) ([]byte, error) {
	if err := t.ready(ctx); err != nil {
		return nil, err
	}
	sel, err := metav1.LabelSelectorAsSelector(selector)
	if err != nil {
		return nil, fmt.Errorf("while parsing label selector: %w", err)
	}
	key := ctbCacheKey{signerName: signer, labelSelector: sel.String()}
	if n := len(key.labelSelector); n > maxLabelSelectorLength {
		return nil, fmt.Errorf("label selector length (%d) is larger than %d", n, maxLabelSelectorLength)
	}
	if v, ok := t.normalized.Get(key); ok {
		return v.([]byte), nil
	}
	all, err := t.lister.list(sel)
	if err != nil {
		return nil, fmt.Errorf("while listing ClusterTrustBundles matching label selector %v: %w", selector, err)
	}
	var mine []ctbView
	for _, c := range all {
		if c.signerName == signer {
			mine = append(mine, c)
		}
	}
	if len(mine) == 0 {
		if allowMissing {
			return []byte{}, nil
		}
		return nil, errors.New("combination of signerName and labelSelector matched zero ClusterTrustBundles")
	}
	out := normalizeTrustAnchors(mine)
	t.normalized.Add(key, out, trustBundleCacheTTL)
	return out, nil
}

// normalizeTrustAnchors is the kubelet's: every certificate of the
// bundles once, headers and text between blocks dropped, in an order
// shuffled each time a selection is normalised (so that no consumer comes
// to depend on it).
func normalizeTrustAnchors(ctbs []ctbView) []byte {
	set := sets.Set[string]{}
	for _, c := range ctbs {
		rest := []byte(c.trustBundle)
		for {
			var b *pem.Block
			b, rest = pem.Decode(rest)
			if b == nil {
				break
			}
			set.Insert(string(b.Bytes))
		}
	}
	list := sets.List(set)
	rand.Shuffle(len(list), func(i, j int) { list[i], list[j] = list[j], list[i] })
	out := []byte{}
	for _, der := range list {
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte(der)})...)
	}
	return out
}

// typedCTBLister adapts one version's lister.
type typedCTBLister[T any] struct {
	l interface {
		Get(string) (*T, error)
		List(labels.Selector) ([]*T, error)
	}
	view func(*T) ctbView
}

func (l typedCTBLister[T]) get(name string) (ctbView, error) {
	c, err := l.l.Get(name)
	if err != nil {
		return ctbView{}, err
	}
	return l.view(c), nil
}

func (l typedCTBLister[T]) list(sel labels.Selector) ([]ctbView, error) {
	cs, err := l.l.List(sel)
	out := make([]ctbView, 0, len(cs))
	for _, c := range cs {
		out = append(out, l.view(c))
	}
	return out, err
}

func viewV1(c *certificatesv1.ClusterTrustBundle) ctbView {
	return ctbView{c.Name, c.Spec.SignerName, c.Spec.TrustBundle}
}

func viewV1beta1(c *certificatesv1beta1.ClusterTrustBundle) ctbView {
	return ctbView{c.Name, c.Spec.SignerName, c.Spec.TrustBundle}
}

func viewV1alpha1(c *certificatesv1alpha1.ClusterTrustBundle) ctbView {
	return ctbView{c.Name, c.Spec.SignerName, c.Spec.TrustBundle}
}

func anyCTBView(obj any) (ctbView, bool) {
	switch c := obj.(type) {
	case *certificatesv1.ClusterTrustBundle:
		return viewV1(c), true
	case *certificatesv1beta1.ClusterTrustBundle:
		return viewV1beta1(c), true
	case *certificatesv1alpha1.ClusterTrustBundle:
		return viewV1alpha1(c), true
	}
	return ctbView{}, false
}
