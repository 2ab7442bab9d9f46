package credentialprovider

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"

	"golang.org/x/crypto/cryptobyte"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubeletv1 "k8s.io/kubelet/config/v1"
)

// ServiceAccounts is what a provider in service-account token mode needs
// of the API: the pod's service account (its UID and annotations) and a
// token for it (the kubelet's GetServiceAccountFunc and its token
// manager's GetServiceAccountToken).
type ServiceAccounts interface {
	GetServiceAccount(ctx context.Context, namespace, name string) (*corev1.ServiceAccount, error)
	ServiceAccountToken(ctx context.Context, namespace, name string, tr *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error)
}

// Pod names the pod an image is pulled for: what a provider in
// service-account token mode asks a token for (the kubelet's
// perPodPluginProvider fields).
type Pod struct {
	Namespace, Name    string
	UID                types.UID
	ServiceAccountName string
}

// ServiceAccountCoordinates name the service account whose token gave a
// credential (the kubelet's).
type ServiceAccountCoordinates struct {
	UID       string
	Namespace string
	Name      string
}

// ForPod is the node's keyring for one pod's pulls (the kubelet's
// NewExternalCredentialProviderDockerKeyring): providers in service-account
// token mode are asked with a token of the pod's service account, the
// others as for any pod. nil when ps is.
func (ps *Plugins) ForPod(pod Pod) Keyring {
	if ps == nil {
		return nil
	}
	return podKeyring{ps, pod}
}

type podKeyring struct {
	ps  *Plugins
	pod Pod
}

// Lookup is the kubelet's externalCredentialProviderKeyring.Lookup: every
// provider whose matchImages match image is asked (or its cache); a
// credential given for a service account's token is tracked to that
// service account, the others are node-wide.
func (k podKeyring) Lookup(image string) ([]TrackedAuthConfig, bool) {
	kr := &BasicKeyring{}
	for _, p := range k.ps.providers {
		cfg, sa, err := p.provide(image, k.pod)
		if err != nil {
			// The kubelet's provideWithCoordinates: logged, and the pull
			// goes on without this provider.
			if p.sa != nil {
				p.log.Error("Failed to provide credentials for image", "provider", p.name, "image", image,
					"pod", k.pod.Namespace+"/"+k.pod.Name, "podUID", k.pod.UID, "serviceAccount", k.pod.Namespace+"/"+k.pod.ServiceAccountName, "err", err)
			} else {
				p.log.Error("Failed to provide credentials for image", "provider", p.name, "image", image, "err", err)
			}
			continue
		}
		var src *CredentialSource
		if sa != nil {
			src = &CredentialSource{ServiceAccount: sa}
		}
		kr.Add(src, cfg)
	}
	return kr.Lookup(image)
}

// serviceAccountProvider is a provider's tokenAttributes (the kubelet's).
type serviceAccountProvider struct {
	audience              string
	requireServiceAccount bool
	requiredKeys          []string
	optionalKeys          []string
	cacheType             kubeletv1.ServiceAccountTokenCacheType
	api                   ServiceAccounts
}

func newServiceAccountProvider(p kubeletv1.CredentialProvider, api ServiceAccounts) *serviceAccountProvider {
	ta := p.TokenAttributes
	if ta == nil || ta.ServiceAccountTokenAudience == "" {
		return nil
	}
	return &serviceAccountProvider{
		audience: ta.ServiceAccountTokenAudience, requireServiceAccount: ta.RequireServiceAccount != nil && *ta.RequireServiceAccount,
		requiredKeys: ta.RequiredServiceAccountAnnotationKeys, optionalKeys: ta.OptionalServiceAccountAnnotationKeys,
		cacheType: ta.CacheType, api: api,
	}
}

type requiredAnnotationNotFoundError string

func (e requiredAnnotationNotFoundError) Error() string {
	return fmt.Sprintf("required annotation %s not found", string(e))
}

// errNoAPI is a provider in service-account token mode on a node without
// an API server (a standalone node): there is no token to give it.
var errNoAPI = errors.New("no API server to get service accounts and tokens from")

// data is the kubelet's getServiceAccountData: the service account's UID
// and the annotations the plugin is given (every required one, else a
// requiredAnnotationNotFoundError; the optional ones present).
func (s *serviceAccountProvider) data(ctx context.Context, namespace, name string) (types.UID, map[string]string, error) {
	if s.api == nil {
		return "", nil, errNoAPI
	}
	sa, err := s.api.GetServiceAccount(ctx, namespace, name)
	if err != nil {
		return "", nil, err
	}
	annotations := make(map[string]string, len(s.requiredKeys)+len(s.optionalKeys))
	for _, k := range s.requiredKeys {
		v, ok := sa.Annotations[k]
		if !ok {
			return "", nil, requiredAnnotationNotFoundError(k)
		}
		annotations[k] = v
	}
	for _, k := range s.optionalKeys {
		if v, ok := sa.Annotations[k]; ok {
			annotations[k] = v
		}
	}
	return sa.UID, annotations, nil
}

// token is the kubelet's getServiceAccountToken: a token of the service
// account for the provider's audience, bound to the pod, of the API's
// default lifetime.
func (s *serviceAccountProvider) token(ctx context.Context, pod Pod, saUID types.UID) (string, error) {
	tr, err := s.api.ServiceAccountToken(ctx, pod.Namespace, pod.ServiceAccountName, &authenticationv1.TokenRequest{
		ObjectMeta: metav1.ObjectMeta{UID: saUID},
		Spec: authenticationv1.TokenRequestSpec{
			Audiences:      []string{s.audience},
			BoundObjectRef: &authenticationv1.BoundObjectReference{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID},
		},
	})
	if err != nil {
		return "", err
	}
	return tr.Status.Token, nil
}

// saRequest is what a provider in service-account token mode is run with
// for one pod, and the part of its cache key it adds.
type saRequest struct {
	token       string
	annotations map[string]string
	cacheKey    string
	coords      *ServiceAccountCoordinates
}

// forPod is the service-account part of the kubelet's
// pluginProvider.provide: skip (nil, nil) when the pod has no service
// account and the provider requires one, or when a required annotation is
// missing; otherwise the token, the annotations and the cache key (the
// service account's coordinates and annotations; its token's hash too
// with cacheType Token).
func (s *serviceAccountProvider) forPod(ctx context.Context, pod Pod) (*saRequest, bool, error) {
	if pod.ServiceAccountName == "" {
		// A pod without one (a static pod) is asked for without a token
		// unless the provider requires one.
		return nil, !s.requireServiceAccount, nil
	}
	uid, annotations, err := s.data(ctx, pod.Namespace, pod.ServiceAccountName)
	if err != nil {
		var missing requiredAnnotationNotFoundError
		if errors.As(err, &missing) {
			// The kubelet's opt-in: no annotation, no plugin run.
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("failed to get service account: %w", err)
	}
	token, err := s.token(ctx, pod, uid)
	if err != nil {
		return nil, false, fmt.Errorf("failed to get service account token: %w", err)
	}
	b := newCacheKeyBuilder().addString(pod.Namespace).addString(pod.ServiceAccountName).addString(string(uid)).addAnnotations(annotations)
	if s.cacheType == kubeletv1.TokenServiceAccountTokenCacheType {
		b.addString("token").addString(hashIfNotEmpty(token))
	}
	key, err := b.build()
	if err != nil {
		return nil, false, fmt.Errorf("error generating service account cache key: %w", err)
	}
	return &saRequest{token: token, annotations: annotations, cacheKey: key,
		coords: &ServiceAccountCoordinates{UID: string(uid), Namespace: pod.Namespace, Name: pod.ServiceAccountName}}, true, nil
}

// cacheKeyBuilder is the kubelet's: length-prefixed fields, so that no
// two different tuples make the same key.
type cacheKeyBuilder struct{ b *cryptobyte.Builder }

func newCacheKeyBuilder() *cacheKeyBuilder { return &cacheKeyBuilder{cryptobyte.NewBuilder(nil)} }

func (c *cacheKeyBuilder) addString(v string) *cacheKeyBuilder {
	c.b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) { b.AddBytes([]byte(v)) })
	return c
}

func (c *cacheKeyBuilder) addAnnotations(a map[string]string) *cacheKeyBuilder {
	keys := make([]string, 0, len(a))
	for k := range a {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	c.b.AddUint32(uint32(len(keys)))
	for _, k := range keys {
		c.addString(k).addString(a[k])
	}
	return c
}

func (c *cacheKeyBuilder) build() (string, error) {
	b, err := c.b.Bytes()
	return string(b), err
}

// cacheKey is the kubelet's generateCacheKey: the base key (image,
// registry or global) and the service account's part.
func cacheKey(base, saKey string) string {
	k, _ := newCacheKeyBuilder().addString(base).addString(saKey).build()
	return k
}

func hashIfNotEmpty(data string) string {
	if data == "" {
		return ""
	}
	return fmt.Sprintf("sha256:%x", sha256.Sum256([]byte(data)))
}
