package runtime

import (
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	nodelisters "k8s.io/client-go/listers/node/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/nodelet/nodelet/internal/podutil"
)

// clusterObjects are the node's watches of the cluster objects the runtime
// reads for every pod: services (for the service environment variables)
// and RuntimeClasses (for the sandbox's runtime handler). One watch of
// each per node, not per pod, as the kubelet's NewMainKubelet (its
// serviceLister) and runtimeclass.NewManager. A standalone node (no API
// server) has none: no service variables, and a runtimeClassName is the
// handler itself.
type clusterObjects struct {
	services       corelisters.ServiceLister
	servicesSynced cache.InformerSynced
	runtimeClasses nodelisters.RuntimeClassLister
	// runtimeClassesSynced: listed once. Before, a class would look
	// missing and fail a sandbox that waits a moment instead.
	runtimeClassesSynced cache.InformerSynced
	factories            []informers.SharedInformerFactory
}

func newClusterObjects(c kubernetes.Interface) *clusterObjects {
	// The kubelet does not watch headless services: they give no
	// variables (NewMainKubelet, issues.k8s.io/122394).
	svc := informers.NewSharedInformerFactoryWithOptions(c, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermNotEqualSelector("spec.clusterIP", corev1.ClusterIPNone).String()
	}))
	rc := informers.NewSharedInformerFactory(c, 0)
	co := &clusterObjects{
		services:       svc.Core().V1().Services().Lister(),
		servicesSynced: svc.Core().V1().Services().Informer().HasSynced,
		runtimeClasses: rc.Node().V1().RuntimeClasses().Lister(),
		factories:      []informers.SharedInformerFactory{svc, rc},
	}
	co.runtimeClassesSynced = rc.Node().V1().RuntimeClasses().Informer().HasSynced
	return co
}

// start runs the watches until stop is closed.
func (co *clusterObjects) start(stop <-chan struct{}) {
	for _, f := range co.factories {
		f.Start(stop)
	}
}

// shutdown waits for the watches to end (after stop is closed).
func (co *clusterObjects) shutdown() {
	for _, f := range co.factories {
		f.Shutdown()
	}
}

// errRuntimeClassesNotSynced: the RuntimeClasses were not listed yet; the
// sandbox waits rather than fail.
var errRuntimeClassesNotSynced = errors.New("RuntimeClasses have not been read yet")

// serviceEnv is the kubelet's getServiceEnvVarMap for a pod: the variables
// of default/kubernetes always, and of the services in the pod's namespace
// when enableServiceLinks (default true). A standalone node has none.
// Until the services were listed once, a pod from the API server cannot
// get its environment (the kubelet's makeEnvironmentVariables: a client of
// the API must not start without KUBERNETES_SERVICE_HOST); a static pod
// takes what is there.
func (m *Daemon) serviceEnv(pod *corev1.Pod) (map[string]string, error) {
	env := map[string]string{}
	co := m.cluster
	if co == nil {
		return env, nil
	}
	if !podutil.IsStaticPod(pod) && !co.servicesSynced() {
		return nil, fmt.Errorf("services have not yet been read at least once, cannot construct envvars")
	}
	services, err := co.services.List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("failed to list services when setting up env vars")
	}
	links := pod.Spec.EnableServiceLinks == nil || *pod.Spec.EnableServiceLinks
	for _, e := range serviceEnvVars(services, pod.Namespace, links) {
		env[e.Name] = e.Value
	}
	return env, nil
}

// runtimeHandler is the CRI runtime handler of the pod's runtimeClassName:
// on a cluster node the RuntimeClass object's handler (the kubelet's
// runtimeclass.Manager.LookupRuntimeHandler; a class that does not exist
// is the API's NotFound error), on a standalone node the class name itself
// (there is no object to read; the kubelet without an API server would
// ignore the name and run the default handler, which silently runs a pod
// asking for a sandboxed runtime with runc).
func (m *Daemon) runtimeHandler(pod *corev1.Pod) (string, error) {
	name := pod.Spec.RuntimeClassName
	if name == nil || *name == "" {
		return "", nil
	}
	if m.cluster == nil {
		return *name, nil
	}
	if !m.cluster.runtimeClassesSynced() {
		return "", errRuntimeClassesNotSynced
	}
	rc, err := m.cluster.runtimeClasses.Get(*name)
	if err != nil {
		if apierrors.IsNotFound(err) {
			return "", err
		}
		return "", fmt.Errorf("failed to lookup RuntimeClass %s: %v", *name, err)
	}
	return rc.Handler, nil
}
