package runtime

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/internal/kubeclient"
)

// APIObjects reads secrets, config maps and the node's pod CIDR from the
// API server with the node's identity.
type APIObjects struct {
	client   kubernetes.Interface
	nodeName string

	mu      sync.Mutex
	cidr    string
	cidrAt  time.Time
	cidrTTL time.Duration
}

// NewAPIObjects builds an APIObjects with the node's identity
// (node.kubeconfig, through kubeclient: it waits while nodelet-status
// bootstraps the credential and follows its renewals).
func NewAPIObjects(ctx context.Context, cfg *config.Config, log *slog.Logger) (*APIObjects, error) {
	rc, err := kubeclient.RESTConfig(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	rc.UserAgent = "nodelet-runtime"
	c, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	return NewAPIObjectsFor(c, cfg.Node.Name), nil
}

// NewAPIObjectsFor wraps an existing client.
func NewAPIObjectsFor(c kubernetes.Interface, nodeName string) *APIObjects {
	return &APIObjects{client: c, nodeName: nodeName, cidrTTL: 10 * time.Second}
}

// Client is the node's clientset (for watches and token requests).
func (a *APIObjects) Client() kubernetes.Interface { return a.client }

func (a *APIObjects) GetSecret(ctx context.Context, ns, name string) (*corev1.Secret, error) {
	return a.client.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
}

func (a *APIObjects) GetConfigMap(ctx context.Context, ns, name string) (*corev1.ConfigMap, error) {
	return a.client.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
}

// GetServiceAccount and ServiceAccountToken serve credential-provider
// plugins in service-account token mode (credentialprovider.ServiceAccounts).
// A token is asked for each time the pod's credentials are looked up: a
// lookup is made only to pull or to verify a pod may use an image, and a
// pod-bound token cached here would outlive its pod.
func (a *APIObjects) GetServiceAccount(ctx context.Context, ns, name string) (*corev1.ServiceAccount, error) {
	return a.client.CoreV1().ServiceAccounts(ns).Get(ctx, name, metav1.GetOptions{})
}

func (a *APIObjects) ServiceAccountToken(ctx context.Context, ns, name string, tr *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
	return a.client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, tr, metav1.CreateOptions{})
}

// PodCIDR is the Node's spec.podCIDRs joined by commas, as the kubelet's
// updatePodCIDR hands them to the runtime ("10.1.0.0/24,fd00:1::/64" on a
// dual-stack node; "" when unassigned or unreadable), read at most every
// 10 seconds.
func (a *APIObjects) PodCIDR(ctx context.Context) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	ttl := a.cidrTTL
	if a.cidr == "" {
		// Not assigned yet: node IPAM assigns one moments after the Node
		// registers, and the network waits for it.
		ttl = min(ttl, 2*time.Second)
	}
	if time.Since(a.cidrAt) < ttl {
		return a.cidr
	}
	a.cidrAt = time.Now()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	n, err := a.client.CoreV1().Nodes().Get(cctx, a.nodeName, metav1.GetOptions{})
	if err == nil {
		a.cidr = strings.Join(n.Spec.PodCIDRs, ",")
		if a.cidr == "" {
			a.cidr = n.Spec.PodCIDR
		}
	}
	return a.cidr
}
