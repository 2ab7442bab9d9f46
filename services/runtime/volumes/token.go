package volumes

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
)

// Token lifetimes of the kubelet's token manager.
const (
	// maxTokenTTL: a token older than this is refreshed whatever its expiry.
	maxTokenTTL = 24 * time.Hour
	// defaultExpirationSeconds when a projection sets none (the API's default).
	defaultExpirationSeconds = int64(3600)
)

// requestTokenFunc asks the TokenRequest API for a token of service account
// namespace/name.
type requestTokenFunc func(ctx context.Context, namespace, name string, tr *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error)

// tokenManager is the kubelet's token manager: it caches the service
// account tokens of pods and requests a new one once 80 % of a token's
// lifetime has passed (or 24 h). When a refresh fails, the old token is
// used for as long as it is valid.
type tokenManager struct {
	request requestTokenFunc
	clock   clock.PassiveClock
	// issued, when set, is told of every new token (its refresh time may
	// be the next thing to wait for).
	issued func()

	mu    sync.Mutex
	cache map[string]*authenticationv1.TokenRequest
}

func newTokenManager(request requestTokenFunc, c clock.PassiveClock) *tokenManager {
	return &tokenManager{request: request, clock: c, cache: map[string]*authenticationv1.TokenRequest{}}
}

// tokenKey identifies a request: everything the token depends on, never
// the token itself.
func tokenKey(namespace, name string, tr *authenticationv1.TokenRequest) string {
	var exp int64
	if tr.Spec.ExpirationSeconds != nil {
		exp = *tr.Spec.ExpirationSeconds
	}
	var ref authenticationv1.BoundObjectReference
	if tr.Spec.BoundObjectRef != nil {
		ref = *tr.Spec.BoundObjectRef
	}
	auds := append([]string(nil), tr.Spec.Audiences...)
	sort.Strings(auds)
	return fmt.Sprintf("%q/%q/%s/%d/%s/%s/%s", namespace, name, strings.Join(auds, ","), exp, ref.Kind, ref.Name, ref.UID)
}

// get returns a valid token for the request, from the cache when it needs
// no refresh.
func (m *tokenManager) get(ctx context.Context, namespace, name string, tr *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
	key := tokenKey(namespace, name, tr)
	m.mu.Lock()
	cached := m.cache[key]
	m.mu.Unlock()
	now := m.clock.Now()
	if cached != nil && now.Before(refreshAt(cached)) {
		return cached, nil
	}
	fresh, err := m.request(ctx, namespace, name, tr)
	if err != nil {
		switch {
		case cached == nil:
			return nil, fmt.Errorf("failed to fetch token: %w", err)
		case !now.Before(cached.Status.ExpirationTimestamp.Time):
			return nil, fmt.Errorf("token of service account %s/%s expired and refresh failed: %w", namespace, name, err)
		}
		return cached, nil
	}
	if fresh.Spec.ExpirationSeconds == nil {
		fresh.Spec.ExpirationSeconds = tr.Spec.ExpirationSeconds
	}
	m.mu.Lock()
	m.cache[key] = fresh
	m.mu.Unlock()
	if m.issued != nil {
		m.issued()
	}
	return fresh, nil
}

// refreshAt is when a token needs renewing: at 80 % of its lifetime, or
// 24 h after it was issued.
func refreshAt(tr *authenticationv1.TokenRequest) time.Time {
	exp := tr.Status.ExpirationTimestamp.Time
	secs := defaultExpirationSeconds
	if tr.Spec.ExpirationSeconds != nil {
		secs = *tr.Spec.ExpirationSeconds
	}
	ttl := time.Duration(secs) * time.Second
	issued := exp.Add(-ttl)
	at := exp.Add(-ttl / 5)
	if max := issued.Add(maxTokenTTL); max.Before(at) {
		at = max
	}
	return at
}

// nextRefresh is the earliest time a cached token needs renewing.
func (m *tokenManager) nextRefresh() (time.Time, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var first time.Time
	for _, tr := range m.cache {
		if at := refreshAt(tr); first.IsZero() || at.Before(first) {
			first = at
		}
	}
	return first, !first.IsZero()
}

// forgetPod drops the tokens bound to a pod.
func (m *tokenManager) forgetPod(uid types.UID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, tr := range m.cache {
		if tr.Spec.BoundObjectRef != nil && tr.Spec.BoundObjectRef.UID == uid {
			delete(m.cache, k)
		}
	}
}

// podTokenRequest is the request the kubelet makes for a projection: the
// audience when one is named (none means the API server's own), the
// expiration, and bound to the pod so the token dies with it.
func podTokenRequest(podName string, podUID types.UID, audience string, expirationSeconds *int64) *authenticationv1.TokenRequest {
	var auds []string
	if audience != "" {
		auds = []string{audience}
	}
	exp := expirationSeconds
	if exp == nil {
		d := defaultExpirationSeconds
		exp = &d
	}
	return &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			Audiences:         auds,
			ExpirationSeconds: exp,
			BoundObjectRef: &authenticationv1.BoundObjectReference{
				APIVersion: "v1", Kind: "Pod", Name: podName, UID: podUID,
			},
		},
	}
}
