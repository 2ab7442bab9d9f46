package admission

import (
	"context"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/internal/kubeclient"
)

// followAPINode keeps the node admission decides on in step with the API's
// Node object: the kubelet's predicate handler takes its node from the node
// lister (getNodeAnyWay), so the labels and taints an admin or a controller
// puts on the Node (a DaemonSet's node selector, a NoExecute taint) apply
// to the next pod. Until the Node is known, and standalone, the node is the
// configured one (NodeFromConfig), as the kubelet's manufactured node.
// Capacity and allocatable stay admission's own: they are what
// nodelet-status reports on that Node.
func followAPINode(ctx context.Context, client kubernetes.Interface, base *corev1.Node, set func(*corev1.Node), log *slog.Logger) {
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector(metav1.ObjectNameField, base.Name).String()
		}))
	inf := factory.Core().V1().Nodes().Informer()
	apply := func(obj any) {
		n, ok := obj.(*corev1.Node)
		if !ok || n.Name != base.Name {
			return
		}
		set(nodeFromAPI(base, n))
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    apply,
		UpdateFunc: func(_, obj any) { apply(obj) },
	}); err != nil {
		log.Error("Cannot follow the Node object", "node", base.Name, "err", err)
		return
	}
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	<-ctx.Done()
	factory.Shutdown()
}

// nodeFromAPI is base with api's labels and taints.
func nodeFromAPI(base, api *corev1.Node) *corev1.Node {
	n := base.DeepCopy()
	n.Labels = make(map[string]string, len(api.Labels))
	for k, v := range api.Labels {
		n.Labels[k] = v
	}
	n.Spec.Taints = append([]corev1.Taint(nil), api.Spec.Taints...)
	return n
}

// nodeClient is the node's API client from its kubeconfig, retried until
// the credential is there (TLS bootstrap may still be writing it).
func nodeClient(ctx context.Context, cfg *config.Config, log *slog.Logger) kubernetes.Interface {
	for ctx.Err() == nil {
		rc, err := kubeclient.RESTConfig(ctx, cfg, log)
		if err == nil {
			rc.UserAgent = "nodelet-admission"
			var c kubernetes.Interface
			if c, err = kubernetes.NewForConfig(rc); err == nil {
				return c
			}
		}
		log.Warn("No API client to follow the Node yet, will retry", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Second):
		}
	}
	return nil
}
