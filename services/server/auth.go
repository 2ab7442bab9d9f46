package server

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/group"
	"k8s.io/apiserver/pkg/authentication/request/bearertoken"
	"k8s.io/apiserver/pkg/authentication/request/union"
	"k8s.io/apiserver/pkg/authentication/request/websocket"
	x509request "k8s.io/apiserver/pkg/authentication/request/x509"
	tokencache "k8s.io/apiserver/pkg/authentication/token/cache"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/config"
)

// webhookRetryBackoff is k8s.io/apiserver's DefaultAuthWebhookRetryBackoff
// (pkg/server/options), which the kubelet's BuildAuthn/BuildAuthz use.
func webhookRetryBackoff() *wait.Backoff {
	return &wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}
}

// buildAuthn mirrors the kubelet's BuildAuthn (cmd/kubelet/app/auth.go)
// and the DelegatingAuthenticatorConfig.New it calls
// (k8s.io/apiserver/pkg/authentication/authenticatorfactory), piece by
// piece (webhookauth.go says why): x509 client certificates against
// clientCAFile (reloaded when it changes), bearer tokens (the header and
// the WebSocket protocol) through a TokenReview cached for
// webhook.cacheTTL, successes and failures alike, the authenticated group
// added, anonymous as configured. The returned function runs the CA
// file's reloader until ctx ends. The node-local admin's certificate is
// not among them: localAdmin alone knows it.
func buildAuthn(c config.ServerAuthenticationConfig, kube kubernetes.Interface, log *slog.Logger) (authenticator.Request, func(context.Context), error) {
	var authenticators []authenticator.Request
	var ca *dynamiccertificates.DynamicFileCAContent
	if c.X509.ClientCAFile != "" {
		var err error
		ca, err = dynamiccertificates.NewDynamicCAContentFromFile("client-ca-bundle", c.X509.ClientCAFile)
		if err != nil {
			return nil, nil, fmt.Errorf("server.authentication.x509.clientCAFile: %w", err)
		}
		authenticators = append(authenticators, x509request.NewDynamic(ca.VerifyOptions, x509request.CommonNameUserConversion))
	}
	if c.Webhook.Enabled {
		if kube == nil {
			// The kubelet refuses to start here; a standalone node has no
			// API server to ask, so nodelet serves with certificates only.
			log.Warn("No kubeconfig: bearer tokens are not accepted (server.authentication.webhook needs server.kubeconfig or node.kubeconfig)")
		} else {
			registerDelegatedMetrics()
			tokens := tokencache.New(&tokenReviewAuthenticator{client: kube.AuthenticationV1().RESTClient(),
				backoff: *webhookRetryBackoff(), log: log}, false, c.Webhook.CacheTTL, c.Webhook.CacheTTL)
			authenticators = append(authenticators, bearertoken.New(tokens), websocket.NewProtocolAuthenticator(tokens))
		}
	}
	run := func(ctx context.Context) {
		if ca != nil {
			ca.Run(ctx, 1)
		}
	}
	anon := anonymousAuthenticator{}
	switch {
	case len(authenticators) == 0 && c.Anonymous.Enabled:
		return anon, run, nil
	case len(authenticators) == 0:
		// Nothing to authenticate with (a standalone node with no client CA):
		// the delegating authenticator refuses to be built; every request
		// but the node-local admin's is 401 instead.
		log.Warn("No authentication method: every request to the kubelet API but the node-local admin's is refused (set server.authentication.x509.clientCAFile)")
		return authenticator.RequestFunc(func(*http.Request) (*authenticator.Response, bool, error) {
			return nil, false, nil
		}), run, nil
	}
	a := group.NewAuthenticatedGroupAdder(union.New(authenticators...))
	if c.Anonymous.Enabled {
		a = union.NewFailOnError(a, anon)
	}
	return a, run, nil
}

// anonymousAuthenticator is k8s.io/apiserver's anonymous.Authenticator
// with no conditions, as the kubelet makes it: every request is
// system:anonymous in system:unauthenticated. (That package links
// apiserver's config API for its conditions.)
type anonymousAuthenticator struct{}

func (anonymousAuthenticator) AuthenticateRequest(r *http.Request) (*authenticator.Response, bool, error) {
	auds, _ := authenticator.AudiencesFrom(r.Context())
	return &authenticator.Response{
		User:      &user.DefaultInfo{Name: user.Anonymous, Groups: []string{user.AllUnauthenticated}},
		Audiences: auds,
	}, true, nil
}

// buildAuthz mirrors the kubelet's BuildAuthz: AlwaysAllow, or Webhook
// through a SubjectAccessReview cached for cacheAuthorizedTTL when
// allowed and cacheUnauthorizedTTL otherwise (sarAuthorizer).
func buildAuthz(c config.ServerAuthorizationConfig, kube kubernetes.Interface, clk clock.Clock, log *slog.Logger) (authorizer.UnconditionalAuthorizer, error) {
	switch c.Mode {
	case "AlwaysAllow":
		return alwaysAllow{}, nil
	case "Webhook":
		if kube == nil {
			return noWebhook{}, nil
		}
		return newSARAuthorizer(kube.AuthorizationV1().RESTClient(), c.Webhook.CacheAuthorizedTTL, c.Webhook.CacheUnauthorizedTTL, clk, log), nil
	}
	return nil, fmt.Errorf("server.authorization.mode: unknown mode %q", c.Mode)
}

// alwaysAllow is authorizerfactory's alwaysAllowAuthorizer.
type alwaysAllow struct{}

func (alwaysAllow) Authorize(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
	return authorizer.DecisionAllow, "", nil
}

// noWebhook denies everything: mode Webhook with no API server to ask.
type noWebhook struct{}

func (noWebhook) Authorize(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
	return authorizer.DecisionNoOpinion, "no kubeconfig for SubjectAccessReview", nil
}

// The kubelet's handler paths (pkg/kubelet/server/server.go) that have
// their own authorization subresource.
const (
	podsPath        = "/pods"
	runningPodsPath = "/runningpods/"
	healthzPath     = "/healthz"
	configzPath     = "/configz"
	statsPath       = "/stats/"
	metricsPath     = "/metrics"
	logsPath        = "/logs/"
	checkpointPath  = "/checkpoint/"
	statuszPath     = "/statusz"
	flagzPath       = "/flagz"
)

// isSubpath is the kubelet's isSubpath (pkg/kubelet/server/auth.go).
func isSubpath(subpath, path string) bool {
	path = strings.TrimSuffix(path, "/")
	return subpath == path || (strings.HasPrefix(subpath, path) && subpath[len(path)] == '/')
}

// streamingPaths run something in a container or reach into it: the
// kubelet's exec, attach, portForward and run.
var streamingPaths = []string{"/exec", "/attach", "/portForward", "/run"}

// requestAttributes is the kubelet's nodeAuthorizerAttributesGetter
// GetRequestAttributes (pkg/kubelet/server/auth.go) with
// KubeletFineGrainedAuthz on (GA): resource nodes, name the node, verb from
// the method, subresource from the path; the fine-grained pods, healthz and
// configz come first and fall back to proxy. With strictStreaming
// (server.authorization.strictStreamingVerbs) the streaming paths take the
// verb create whatever the method: a WebSocket upgrade is a GET, and the
// method's verb would let get on nodes/proxy, the permission monitoring
// agents are given, run commands in every container of the node.
func requestAttributes(nodeName string, u user.Info, r *http.Request, strictStreaming bool) []authorizer.Attributes {
	verb := ""
	switch r.Method {
	case http.MethodPost:
		verb = "create"
	case http.MethodGet:
		verb = "get"
	case http.MethodPut:
		verb = "update"
	case http.MethodPatch:
		verb = "patch"
	case http.MethodDelete:
		verb = "delete"
	}
	p := r.URL.Path
	if strictStreaming {
		for _, sp := range streamingPaths {
			if isSubpath(p, sp) {
				verb = "create"
			}
		}
	}
	var subresources []string
	switch {
	case isSubpath(p, podsPath):
		subresources = append(subresources, "pods")
	case isSubpath(p, healthzPath):
		subresources = append(subresources, "healthz")
	case isSubpath(p, configzPath):
		subresources = append(subresources, "configz")
	case isSubpath(p, runningPodsPath):
		subresources = append(subresources, "pods")
	}
	switch {
	case isSubpath(p, statsPath):
		subresources = append(subresources, "stats")
	case isSubpath(p, metricsPath):
		subresources = append(subresources, "metrics")
	case isSubpath(p, logsPath):
		// "log" to match other log subresources (pods/log, etc)
		subresources = append(subresources, "log")
	case isSubpath(p, checkpointPath):
		subresources = append(subresources, "checkpoint")
	case isSubpath(p, statuszPath):
		subresources = append(subresources, "statusz")
	case isSubpath(p, flagzPath):
		subresources = append(subresources, "configz")
	default:
		subresources = append(subresources, "proxy")
	}
	attrs := make([]authorizer.Attributes, 0, len(subresources))
	for _, sub := range subresources {
		attrs = append(attrs, authorizer.AttributesRecord{
			User: u, Verb: verb, APIVersion: "v1", Resource: "nodes", Subresource: sub,
			Name: nodeName, ResourceRequest: true, Path: p,
		})
	}
	return attrs
}

// authFilter is the kubelet's authentication and authorization filter
// (pkg/kubelet/server/auth.go and server.go InstallAuthFilter), with the
// node-local admin beside it.
type authFilter struct {
	log      *slog.Logger
	nodeName string
	authn    authenticator.Request
	authz    authorizer.UnconditionalAuthorizer
	local    *localAdmin
	// strictStreamingVerbs is server.authorization.strictStreamingVerbs.
	strictStreamingVerbs bool
}

// withAuth is the kubelet's InstallAuthFilter: authenticate (401
// "Unauthorized"), then authorize each attribute set until one is allowed
// (403 "Forbidden (user=…, verb=…, resource=…, subresource(s)=[…])").
// Before it, the node-local admin's certificate, and only that, passes
// without authorization (a standalone node has no API server to ask).
func (s *authFilter) withAuth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.local.is(r) {
			r.Header.Del("Authorization")
			next.ServeHTTP(w, r)
			return
		}
		resp, ok, err := s.authn.AuthenticateRequest(r)
		if err != nil {
			s.log.Error("Unable to authenticate the request due to an error", "err", err)
		}
		if err != nil || !ok {
			writeErrorString(w, http.StatusUnauthorized, "Unauthorized")
			return
		}
		attrs := requestAttributes(s.nodeName, resp.User, r, s.strictStreamingVerbs)
		var subresources []string
		allowed := false
		for _, a := range attrs {
			subresources = append(subresources, a.GetSubresource())
			decision, _, err := s.authz.Authorize(r.Context(), a)
			if err != nil {
				s.log.Error("Authorization error", "user", a.GetUser().GetName(), "verb", a.GetVerb(),
					"resource", a.GetResource(), "subresource", a.GetSubresource(), "err", err)
				writeErrorString(w, http.StatusInternalServerError, fmt.Sprintf("Authorization error (user=%s, verb=%s, resource=%s, subresource=%s)",
					a.GetUser().GetName(), a.GetVerb(), a.GetResource(), a.GetSubresource()))
				return
			}
			if decision == authorizer.DecisionAllow {
				allowed = true
				break
			}
		}
		if !allowed {
			a := attrs[0]
			s.log.Debug("Forbidden", "user", a.GetUser().GetName(), "verb", a.GetVerb(), "resource", a.GetResource(), "subresources", subresources)
			writeErrorString(w, http.StatusForbidden, fmt.Sprintf("Forbidden (user=%s, verb=%s, resource=%s, subresource(s)=%v)\n",
				a.GetUser().GetName(), a.GetVerb(), a.GetResource(), subresources))
			return
		}
		// The request goes on without its credentials, as the kubelet's
		// handlers never see them either.
		r.Header.Del("Authorization")
		next.ServeHTTP(w, r)
	})
}

// writeErrorString is go-restful's Response.WriteErrorString, which the
// kubelet's errors go through: the status and the text, as text/plain.
func writeErrorString(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(msg))
}
