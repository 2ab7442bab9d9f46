package credentialprovider

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubeletv1 "k8s.io/kubelet/config/v1"
	credentialproviderv1 "k8s.io/kubelet/pkg/apis/credentialprovider/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

// fakeAPI has service accounts and issues a new token at every request,
// remembering each request.
type fakeAPI struct {
	mu       sync.Mutex
	accounts map[string]*corev1.ServiceAccount // ns/name
	requests []*authenticationv1.TokenRequest
	err      error
}

func (f *fakeAPI) GetServiceAccount(_ context.Context, ns, name string) (*corev1.ServiceAccount, error) {
	if f.err != nil {
		return nil, f.err
	}
	sa, ok := f.accounts[ns+"/"+name]
	if !ok {
		return nil, fmt.Errorf("serviceaccounts %q not found", name)
	}
	return sa, nil
}

func (f *fakeAPI) ServiceAccountToken(_ context.Context, ns, name string, tr *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = append(f.requests, tr)
	out := tr.DeepCopy()
	out.Status.Token = fmt.Sprintf("token-%s-%s-%d", ns, name, len(f.requests))
	return out, nil
}

func account(ns, name, uid string, annotations map[string]string) *corev1.ServiceAccount {
	return &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid), Annotations: annotations}}
}

// The kubelet's service-account token mode: the plugin is run with a token
// of the pod's service account for the provider's audience, bound to the
// pod, and the annotations it asks for; a pod without a service account,
// or one without a required annotation, is skipped; the answer is cached
// per service account (cacheType ServiceAccount) or per token (Token), and
// the credentials are tracked to the service account.
func TestServiceAccountTokenMode(t *testing.T) {
	const img = "reg.example.com/team/app"
	role := "example.com/role"
	api := &fakeAPI{accounts: map[string]*corev1.ServiceAccount{
		"a/puller":  account("a", "puller", "uid-puller", map[string]string{role: "reader", "example.com/extra": "x", "other": "y"}),
		"a/plain":   account("a", "plain", "uid-plain", nil),
		"b/puller":  account("b", "puller", "uid-b-puller", map[string]string{role: "writer"}),
		"a/puller2": account("a", "puller2", "uid-puller2", map[string]string{role: "reader"}),
	}}
	podOf := func(ns, sa string) Pod {
		return Pod{Namespace: ns, Name: "p-" + sa, UID: types.UID("uid-pod-" + ns + "-" + sa), ServiceAccountName: sa}
	}
	type ask struct {
		pod Pod
		// runs is the plugin's runs after the ask; found whether there
		// were credentials, tracked to the pod's service account.
		runs  int
		found bool
	}
	for _, tc := range []struct {
		name     string
		require  bool
		cache    kubeletv1.ServiceAccountTokenCacheType
		required []string
		echo     bool
		api      ServiceAccounts
		asks     []ask
	}{
		{name: "cached per service account", require: true, cache: kubeletv1.ServiceAccountServiceAccountTokenCacheType, required: []string{role},
			asks: []ask{{podOf("a", "puller"), 1, true}, {podOf("a", "puller"), 1, true}, {podOf("b", "puller"), 2, true}, {podOf("a", "puller2"), 3, true}}},
		{name: "cached per token: every new token runs the plugin", require: true, cache: kubeletv1.TokenServiceAccountTokenCacheType,
			asks: []ask{{podOf("a", "puller"), 1, true}, {podOf("a", "puller"), 2, true}}},
		{name: "required annotation missing: not run", require: true, cache: kubeletv1.ServiceAccountServiceAccountTokenCacheType, required: []string{role},
			asks: []ask{{podOf("a", "plain"), 0, false}, {podOf("a", "puller"), 1, true}}},
		{name: "no service account, one required: not run", require: true, cache: kubeletv1.ServiceAccountServiceAccountTokenCacheType,
			asks: []ask{{podOf("a", ""), 0, false}}},
		{name: "no service account, none required: run without a token", require: false, cache: kubeletv1.ServiceAccountServiceAccountTokenCacheType,
			asks: []ask{{podOf("a", ""), 1, true}}},
		{name: "the token echoed with cacheType ServiceAccount: refused", require: true, cache: kubeletv1.ServiceAccountServiceAccountTokenCacheType, echo: true,
			asks: []ask{{podOf("a", "puller"), 1, false}}},
		{name: "the token echoed with cacheType Token: taken", require: true, cache: kubeletv1.TokenServiceAccountTokenCacheType, echo: true,
			asks: []ask{{podOf("a", "puller"), 1, true}}},
		{name: "the service account cannot be read: not run", require: true, cache: kubeletv1.ServiceAccountServiceAccountTokenCacheType,
			api: &fakeAPI{err: errors.New("forbidden")}, asks: []ask{{podOf("a", "puller"), 0, false}}},
		{name: "no API server: not run", require: true, cache: kubeletv1.ServiceAccountServiceAccountTokenCacheType,
			api: ServiceAccounts(nil), asks: []ask{{podOf("a", "puller"), 0, false}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := tc.api
			if a == nil && tc.name != "no API server: not run" {
				a = &fakeAPI{accounts: api.accounts}
			}
			clk := clocktesting.NewFakeClock(time.Unix(1e9, 0))
			fake := &fakePlugin{keyType: credentialproviderv1.RegistryPluginCacheKeyType, duration: dur(time.Hour), echo: tc.echo}
			cfg := kubeletv1.CredentialProvider{Name: "fake", TokenAttributes: &kubeletv1.ServiceAccountTokenAttributes{
				ServiceAccountTokenAudience: "registry.example.com", RequireServiceAccount: ptr.To(tc.require), CacheType: tc.cache,
				RequiredServiceAccountAnnotationKeys: tc.required, OptionalServiceAccountAnnotationKeys: []string{"example.com/extra"},
			}}
			p := &pluginProvider{name: "fake", clock: clk, log: discard(), plugin: fake, sa: newServiceAccountProvider(cfg, a),
				matchImages: []string{"*.example.com"}, cache: map[string]cacheEntry{}, lastCachePurge: clk.Now()}
			ps := &Plugins{providers: []*pluginProvider{p}}
			for i, ask := range tc.asks {
				creds, found := ps.ForPod(ask.pod).Lookup(img)
				if got := fake.runs(); got != ask.runs {
					t.Fatalf("ask %d (%+v): %d runs, want %d", i, ask.pod, got, ask.runs)
				}
				if found != ask.found {
					t.Fatalf("ask %d (%+v): found %v (%+v), want %v", i, ask.pod, found, creds, ask.found)
				}
				for _, c := range creds {
					switch {
					case ask.pod.ServiceAccountName == "":
						if c.Source != nil {
							t.Fatalf("ask %d: credentials without a service account have a source: %+v", i, c.Source)
						}
					case c.Source == nil || c.Source.ServiceAccount == nil ||
						*c.Source.ServiceAccount != (ServiceAccountCoordinates{UID: string(api.accounts[ask.pod.Namespace+"/"+ask.pod.ServiceAccountName].UID), Namespace: ask.pod.Namespace, Name: ask.pod.ServiceAccountName}):
						t.Fatalf("ask %d: credentials tracked to %+v", i, c.Source)
					}
				}
			}
			// What the plugin was given: the token of the last request,
			// and the annotations asked for (required and optional) only.
			fa, _ := a.(*fakeAPI)
			if fake.runs() == 0 || fa == nil {
				return
			}
			last := len(fake.calls) - 1
			if pod := tc.asks[len(tc.asks)-1].pod; pod.ServiceAccountName != "" {
				tr := fa.requests[len(fa.requests)-1]
				if fake.tokens[last] == "" || tr.Spec.Audiences[0] != "registry.example.com" || tr.Spec.BoundObjectRef.Kind != "Pod" ||
					tr.Spec.BoundObjectRef.UID != pod.UID || tr.Spec.BoundObjectRef.Name != pod.Name {
					t.Fatalf("token %q for request %+v", fake.tokens[last], tr.Spec)
				}
				want := map[string]string{}
				for _, k := range append([]string{"example.com/extra"}, tc.required...) {
					if v, ok := api.accounts[pod.Namespace+"/"+pod.ServiceAccountName].Annotations[k]; ok {
						want[k] = v
					}
				}
				if !maps.Equal(fake.annotations[last], want) {
					t.Fatalf("annotations %v, want %v", fake.annotations[last], want)
				}
			} else if fake.tokens[last] != "" {
				t.Fatalf("a pod without a service account gave a token %q", fake.tokens[last])
			}
		})
	}
}
