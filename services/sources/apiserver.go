package sources

import (
	"context"
	"fmt"
	"log/slog"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/internal/kubeclient"
	"github.com/nodelet/nodelet/schemas"
)

// apiSource is the API server source: the pods bound to this node, through
// a client-go informer on pods with spec.nodeName=<node>, as the node's own
// identity. Every change sends the informer's whole list (what the
// kubelet's UndeltaStore does); the merge works out what changed.
type apiSource struct {
	client   kubernetes.Interface
	nodeName string
	log      *slog.Logger
	// newClient, when client is nil, builds it in run: while the node's
	// credential is being bootstrapped, so the other sources go on.
	newClient func(context.Context) (kubernetes.Interface, error)
}

// newAPIClient builds the node's API client (node.kubeconfig, through
// kubeclient: waiting for a bootstrapped credential, following renewals,
// rate limited by sources.kubeAPIQPS and sources.kubeAPIBurst).
func newAPIClient(ctx context.Context, cfg *config.Config, log *slog.Logger) (kubernetes.Interface, error) {
	rc, err := kubeclient.RESTConfig(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	rc.UserAgent = "nodelet-sources"
	c, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("node.kubeconfig %s: %w", cfg.NodeKubeconfig(), err)
	}
	return c, nil
}

func (s *apiSource) run(ctx context.Context, out chan<- snapshot) {
	if s.client == nil {
		c, err := s.newClient(ctx)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Error("API server source stopped", "err", err)
			}
			return
		}
		s.client = c
	}
	selector := fields.OneTermEqualSelector("spec.nodeName", s.nodeName).String()
	s.log.Info("Watching API server pods", "fieldSelector", selector)
	factory := informers.NewSharedInformerFactoryWithOptions(s.client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = selector }))
	inf := factory.Core().V1().Pods().Informer()
	// Managed fields are the API server's bookkeeping; they change on
	// every write and nothing on the node reads them.
	_ = inf.SetTransform(func(obj any) (any, error) {
		if m, ok := obj.(metav1.Object); ok {
			m.SetManagedFields(nil)
		}
		return obj, nil
	})
	kick := make(chan struct{}, 1)
	notify := func() {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { notify() },
		UpdateFunc: func(any, any) { notify() },
		DeleteFunc: func(any) { notify() },
	})
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return
	}
	s.log.Info("API server pods synced")
	var copies podCopies
	for {
		pods := copies.take(inf.GetStore().List())
		select {
		case out <- snapshot{source: schemas.SourceAPI, pods: pods}:
		case <-ctx.Done():
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-kick:
		}
	}
}

// podCopies hands over the informer's pods as copies the merge may keep and
// change (the informer's objects are shared and must not be), copying only
// what changed since the last list. The informer replaces a pod's object on
// every change, so an object listed before is unchanged and the copy made
// of it then is handed over again: at 110 pods every status update of one
// pod copied all 110 (issue 37's soak, sources' heap).
//
// An unchanged copy handed over again is the very object the merge holds
// for the pod (an ADD keeps what it was given) or one it compared and took
// the changes of; either way the merge finds nothing new in it.
type podCopies struct {
	last map[*corev1.Pod]*corev1.Pod // informer's object → its copy
}

// take returns the pods among objs, copied where they changed, and forgets
// the copies of objects no longer listed.
func (c *podCopies) take(objs []any) []*corev1.Pod {
	pods := make([]*corev1.Pod, 0, len(objs))
	next := make(map[*corev1.Pod]*corev1.Pod, len(objs))
	for _, o := range objs {
		p, ok := o.(*corev1.Pod)
		if !ok {
			continue
		}
		cp, ok := c.last[p]
		if !ok {
			cp = p.DeepCopy()
		}
		next[p] = cp
		pods = append(pods, cp)
	}
	c.last = next
	return pods
}
