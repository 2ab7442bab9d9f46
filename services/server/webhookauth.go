package server

// The kubelet's delegated authentication and authorisation (TokenReview
// and SubjectAccessReview, cached), built from k8s.io/apiserver's small
// pieces instead of its authenticatorfactory and authorizerfactory. The
// factories link the webhook plugins, and with them CEL (cel-go and
// apiserver's cel libraries, for authorisation webhooks' match
// conditions, which a delegating authorizer never has), kube-openapi's
// strfmt and govalidator, the egress selector and apiserver's config
// scheme: tables their initialisers build in every nodelet process,
// since nodeletd is one executable (docs/performance.md, "Memory at
// rest"). What is here is the part of those plugins the kubelet's
// configuration uses; TestNoInitHeavyPackages (cmd/nodeletd) keeps the
// heavy packages out.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/cache"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	compbasemetrics "k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/utils/clock"
)

// tokenReviewAuthenticator is k8s.io/apiserver's WebhookTokenAuthenticator
// (plugin/pkg/authenticator/token/webhook) as
// DelegatingAuthenticatorConfig.New makes it for the kubelet: a
// TokenReview through the API client, retried with the webhook backoff,
// no implicit audiences, no request timeout. The cache in front of it is
// apiserver's token/cache, as there.
type tokenReviewAuthenticator struct {
	client  rest.Interface // AuthenticationV1().RESTClient()
	backoff wait.Backoff
	log     *slog.Logger
}

// AuthenticateToken is WebhookTokenAuthenticator.AuthenticateToken.
func (a *tokenReviewAuthenticator) AuthenticateToken(ctx context.Context, token string) (*authenticator.Response, bool, error) {
	wantAuds, checkAuds := authenticator.AudiencesFrom(ctx)
	r := &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: wantAuds}}
	var result *authenticationv1.TokenReview
	if err := withExponentialBackoff(ctx, a.backoff, func() error {
		start := time.Now()
		res := &authenticationv1.TokenReview{}
		var code int
		rr := a.client.Post().Resource("tokenreviews").VersionedParams(&metav1.CreateOptions{}, scheme.ParameterCodec).
			Body(r).Do(ctx)
		rr.StatusCode(&code)
		err := rr.Into(res)
		result = res
		recordDelegated(ctx, authnRequestTotal, authnRequestLatency, code, err, time.Since(start))
		return err
	}); err != nil {
		a.log.Error("Failed to make webhook authenticator request", "err", err)
		return nil, false, err
	}
	var auds authenticator.Audiences
	if checkAuds {
		// No implicit audiences: the kubelet's config has none.
		auds = wantAuds.Intersect(result.Status.Audiences)
		if len(auds) == 0 {
			return nil, false, nil
		}
	}
	if !result.Status.Authenticated {
		var err error
		if result.Status.Error != "" {
			err = errors.New(result.Status.Error)
		}
		return nil, false, err
	}
	var extra map[string][]string
	if result.Status.User.Extra != nil {
		extra = map[string][]string{}
		for k, v := range result.Status.User.Extra {
			extra[k] = v
		}
	}
	return &authenticator.Response{
		User: &user.DefaultInfo{Name: result.Status.User.Username, UID: result.Status.User.UID,
			Groups: result.Status.User.Groups, Extra: extra},
		Audiences: auds,
	}, true, nil
}

// sarAuthorizer is k8s.io/apiserver's WebhookAuthorizer
// (plugin/pkg/authorizer/webhook) as DelegatingAuthorizerConfig.New makes
// it for the kubelet's BuildAuthz: a SubjectAccessReview through the API
// client, answers cached by their spec for allowTTL when allowed and
// denyTTL otherwise (cacheAuthorizedTTL, cacheUnauthorizedTTL), NoOpinion
// when the review fails, no match conditions.
type sarAuthorizer struct {
	client            rest.Interface // AuthorizationV1().RESTClient()
	backoff           wait.Backoff
	allowTTL, denyTTL time.Duration
	cache             *cache.LRUExpireCache
	log               *slog.Logger
}

func newSARAuthorizer(client rest.Interface, allowTTL, denyTTL time.Duration, clk clock.Clock, log *slog.Logger) *sarAuthorizer {
	registerDelegatedMetrics()
	return &sarAuthorizer{client: client, backoff: *webhookRetryBackoff(), allowTTL: allowTTL, denyTTL: denyTTL,
		// 8192 entries, as WebhookAuthorizer's.
		cache: cache.NewLRUExpireCacheWithClock(8192, clk), log: log}
}

// maxControlledAttrCacheSize is WebhookAuthorizer's: attributes longer than
// this are not cached (they could be a request to fill the cache).
const maxControlledAttrCacheSize = 10000

// Authorize is WebhookAuthorizer.Authorize without match conditions. The
// kubelet's attributes have no field or label selectors, so the review
// carries none.
func (z *sarAuthorizer) Authorize(ctx context.Context, attr authorizer.Attributes) (authorizer.Decision, string, error) {
	r := &authorizationv1.SubjectAccessReview{}
	if u := attr.GetUser(); u != nil {
		r.Spec = authorizationv1.SubjectAccessReviewSpec{User: u.GetName(), UID: u.GetUID(), Groups: u.GetGroups(),
			Extra: convertToSARExtra(u.GetExtra())}
	}
	if attr.IsResourceRequest() {
		r.Spec.ResourceAttributes = &authorizationv1.ResourceAttributes{Namespace: attr.GetNamespace(),
			Verb: attr.GetVerb(), Group: attr.GetAPIGroup(), Version: attr.GetAPIVersion(),
			Resource: attr.GetResource(), Subresource: attr.GetSubresource(), Name: attr.GetName()}
	} else {
		r.Spec.NonResourceAttributes = &authorizationv1.NonResourceAttributes{Path: attr.GetPath(), Verb: attr.GetVerb()}
	}
	key, err := json.Marshal(r.Spec)
	if err != nil {
		return authorizer.DecisionNoOpinion, "", err
	}
	if entry, ok := z.cache.Get(string(key)); ok {
		r.Status = entry.(authorizationv1.SubjectAccessReviewStatus)
	} else {
		var result *authorizationv1.SubjectAccessReview
		if err := withExponentialBackoff(ctx, z.backoff, func() error {
			start := time.Now()
			res := &authorizationv1.SubjectAccessReview{}
			var code int
			rr := z.client.Post().Resource("subjectaccessreviews").VersionedParams(&metav1.CreateOptions{}, scheme.ParameterCodec).
				Body(r).Do(ctx)
			rr.StatusCode(&code)
			err := rr.Into(res)
			result = res
			recordDelegated(ctx, authzRequestTotal, authzRequestLatency, code, err, time.Since(start))
			return err
		}); err != nil {
			z.log.Error("Failed to make webhook authorizer request", "err", err)
			return authorizer.DecisionNoOpinion, "", err
		}
		r.Status = result.Status
		if shouldCache(attr) {
			if r.Status.Allowed {
				z.cache.Add(string(key), r.Status, z.allowTTL)
			} else {
				z.cache.Add(string(key), r.Status, z.denyTTL)
			}
		}
	}
	switch {
	case r.Status.Denied && r.Status.Allowed:
		return authorizer.DecisionDeny, r.Status.Reason, fmt.Errorf("webhook subject access review returned both allow and deny response")
	case r.Status.Denied:
		return authorizer.DecisionDeny, r.Status.Reason, nil
	case r.Status.Allowed:
		return authorizer.DecisionAllow, r.Status.Reason, nil
	default:
		return authorizer.DecisionNoOpinion, r.Status.Reason, nil
	}
}

// shouldCache is WebhookAuthorizer's.
func shouldCache(attr authorizer.Attributes) bool {
	n := len(attr.GetNamespace()) + len(attr.GetVerb()) + len(attr.GetAPIGroup()) + len(attr.GetAPIVersion()) +
		len(attr.GetResource()) + len(attr.GetSubresource()) + len(attr.GetName()) + len(attr.GetPath())
	return n < maxControlledAttrCacheSize
}

// convertToSARExtra is WebhookAuthorizer's.
func convertToSARExtra(extra map[string][]string) map[string]authorizationv1.ExtraValue {
	if extra == nil {
		return nil
	}
	ret := map[string]authorizationv1.ExtraValue{}
	for k, v := range extra {
		ret[k] = authorizationv1.ExtraValue(v)
	}
	return ret
}

// withExponentialBackoff is k8s.io/apiserver's util/webhook
// WithExponentialBackoff with DefaultShouldRetry: transient failures
// (a reset connection, 500, 504, 429, a Retry-After) are tried again
// within the backoff; the last webhook error is what is returned.
func withExponentialBackoff(ctx context.Context, b wait.Backoff, fn func() error) error {
	var webhookErr error
	err := wait.ExponentialBackoffWithContext(ctx, b, func(context.Context) (bool, error) {
		webhookErr = fn()
		if shouldRetry(webhookErr) {
			return false, nil
		}
		if webhookErr != nil {
			return false, webhookErr
		}
		return true, nil
	})
	switch {
	case webhookErr != nil:
		return webhookErr
	case err != nil:
		return fmt.Errorf("webhook call failed: %s", err.Error())
	}
	return nil
}

// shouldRetry is util/webhook's DefaultShouldRetry.
func shouldRetry(err error) bool {
	if utilnet.IsConnectionReset(err) || utilnet.IsHTTP2ConnectionLost(err) || apierrors.IsInternalError(err) ||
		apierrors.IsTimeout(err) || apierrors.IsTooManyRequests(err) {
		return true
	}
	_, retry := apierrors.SuggestsClientDelay(err)
	return retry
}

// The delegated authentication and authorisation families the kubelet
// serves on /metrics (authenticatorfactory's and authorizerfactory's
// metrics.go), registered in the legacy registry when the first
// authenticator or authorizer using them is built.
var (
	authnRequestTotal = compbasemetrics.NewCounterVec(&compbasemetrics.CounterOpts{
		Name: "apiserver_delegated_authn_request_total", Help: "Number of HTTP requests partitioned by status code.",
		StabilityLevel: compbasemetrics.ALPHA}, []string{"code"})
	authnRequestLatency = compbasemetrics.NewHistogramVec(&compbasemetrics.HistogramOpts{
		Name: "apiserver_delegated_authn_request_duration_seconds", Help: "Request latency in seconds. Broken down by status code.",
		Buckets: []float64{0.25, 0.5, 0.7, 1, 1.5, 3, 5, 10}, StabilityLevel: compbasemetrics.ALPHA}, []string{"code"})
	authzRequestTotal = compbasemetrics.NewCounterVec(&compbasemetrics.CounterOpts{
		Name: "apiserver_delegated_authz_request_total", Help: "Number of HTTP requests partitioned by status code.",
		StabilityLevel: compbasemetrics.ALPHA}, []string{"code"})
	authzRequestLatency = compbasemetrics.NewHistogramVec(&compbasemetrics.HistogramOpts{
		Name: "apiserver_delegated_authz_request_duration_seconds", Help: "Request latency in seconds. Broken down by status code.",
		Buckets: []float64{0.25, 0.5, 0.7, 1, 1.5, 3, 5, 10}, StabilityLevel: compbasemetrics.ALPHA}, []string{"code"})
	registerDelegated sync.Once
)

func registerDelegatedMetrics() {
	registerDelegated.Do(func() {
		legacyregistry.MustRegister(authnRequestTotal, authnRequestLatency, authzRequestTotal, authzRequestLatency)
	})
}

// recordDelegated counts one review as the webhooks do: by its HTTP status,
// or "<error>" when none came back.
func recordDelegated(ctx context.Context, total *compbasemetrics.CounterVec, latency *compbasemetrics.HistogramVec, code int, err error, d time.Duration) {
	label := ""
	switch {
	case code != 0:
		label = strconv.Itoa(code)
	case err != nil:
		label = "<error>"
	default:
		return
	}
	total.WithContext(ctx).WithLabelValues(label).Inc()
	latency.WithContext(ctx).WithLabelValues(label).Observe(d.Seconds())
}
