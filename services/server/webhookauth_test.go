package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/internal/testenv"
	"github.com/nodelet/nodelet/internal/testenv/eventually"
)

// TestWebhookAuthAgainstAPIServer runs buildAuthn's TokenReview and
// buildAuthz's SubjectAccessReview against a real kube-apiserver, as the
// node's identity asks them (the kubelet's BuildAuthn/BuildAuthz): a
// service account's token is the service account, a bad one is 401, and
// each cached answer outlives the change that would alter it for its TTL
// (token: webhook.cacheTTL; SAR: cacheAuthorizedTTL when allowed,
// cacheUnauthorizedTTL when not), then follows the API.
func TestWebhookAuthAgainstAPIServer(t *testing.T) {
	cp, stop, err := testenv.StartControlPlane("node-a")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	admin, node := cp.AdminClient(t), cp.NodeClient(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx := t.Context()
	ns := cp.Namespace(t)

	t.Run("TokenReview", func(t *testing.T) {
		sa := mkServiceAccount(t, admin, ns, "reviewed")
		tok, err := admin.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		token := tok.Status.Token
		// cached keeps answers for the kubelet's default 2m; uncached for 0.
		cached, _, err := buildAuthn(config.ServerAuthenticationConfig{
			Webhook: config.ServerWebhookAuthnConfig{Enabled: true, CacheTTL: 2 * time.Minute}}, node, log)
		if err != nil {
			t.Fatal(err)
		}
		uncached, _, err := buildAuthn(config.ServerAuthenticationConfig{
			Webhook: config.ServerWebhookAuthnConfig{Enabled: true}}, node, log)
		if err != nil {
			t.Fatal(err)
		}
		want := "system:serviceaccount:" + ns + ":reviewed"
		authenticate := func(a authenticator.Request, token string) (user.Info, error) {
			r := httptest.NewRequest("GET", "/pods", nil)
			r.Header.Set("Authorization", "Bearer "+token)
			resp, ok, err := a.AuthenticateRequest(r)
			if err != nil || !ok {
				return nil, fmt.Errorf("not authenticated: ok=%v err=%v", ok, err)
			}
			return resp.User, nil
		}
		for _, a := range []authenticator.Request{cached, uncached} {
			u, err := authenticate(a, token)
			if err != nil {
				t.Fatal(err)
			}
			if u.GetName() != want || string(u.GetUID()) != string(sa.UID) ||
				!slices.Contains(u.GetGroups(), "system:serviceaccounts:"+ns) || !slices.Contains(u.GetGroups(), user.AllAuthenticated) {
				t.Errorf("user = %s uid %s groups %v, want %s uid %s in system:serviceaccounts:%s and %s",
					u.GetName(), u.GetUID(), u.GetGroups(), want, sa.UID, ns, user.AllAuthenticated)
			}
		}

		// A bad token through the kubelet's filter: 401, the handler not run.
		f := &authFilter{authn: cached, authz: alwaysAllow{}, nodeName: "node-a", log: log}
		h := f.withAuth(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok")) }))
		for _, tc := range []struct {
			token, body string
			code        int
		}{{token, "ok", 200}, {"not-a-token", "Unauthorized", 401}, {token + "x", "Unauthorized", 401}} {
			r := httptest.NewRequest("GET", "/pods", nil)
			r.Header.Set("Authorization", "Bearer "+tc.token)
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != tc.code || w.Body.String() != tc.body {
				t.Errorf("token %.10s…: %d %q, want %d %q", tc.token, w.Code, w.Body.String(), tc.code, tc.body)
			}
		}

		// The service account goes: the uncached authenticator follows the
		// API; the cached one answers from its cache within the TTL.
		if err := admin.CoreV1().ServiceAccounts(ns).Delete(ctx, sa.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually.True(t, 30*time.Second, "the deleted service account's token refused", func() bool {
			_, err := authenticate(uncached, token)
			return err != nil
		})
		if _, err := authenticate(cached, token); err != nil {
			t.Errorf("cached for 2m, yet: %v", err)
		}
	})

	t.Run("SubjectAccessReview", func(t *testing.T) {
		clk := clocktesting.NewFakeClock(time.Now())
		authz, err := buildAuthz(config.ServerAuthorizationConfig{Mode: "Webhook",
			Webhook: config.ServerWebhookAuthzConfig{CacheAuthorizedTTL: 5 * time.Minute, CacheUnauthorizedTTL: 30 * time.Second}},
			node, clk, log)
		if err != nil {
			t.Fatal(err)
		}
		alice := &user.DefaultInfo{Name: "alice-" + ns, Groups: []string{user.AllAuthenticated}}
		decide := func(path string) authorizer.Decision {
			t.Helper()
			attrs := requestAttributes("node-a", alice, httptest.NewRequest("GET", path, nil), false)
			d, _, err := authz.Authorize(ctx, attrs[0])
			if err != nil {
				t.Fatalf("GET %s: %v", path, err)
			}
			return d
		}
		grant(t, admin, alice.Name, "stats")
		eventually.True(t, 30*time.Second, "nodes/stats allowed", func() bool {
			clk.Step(31 * time.Second) // past a denial cached before RBAC saw the binding
			return decide("/stats/summary") == authorizer.DecisionAllow
		})
		// Not granted: no opinion from RBAC, so the filter's 403.
		f := &authFilter{authn: anonymousAuthenticator{}, authz: authz, nodeName: "node-a", log: log}
		h := f.withAuth(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok")) }))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/logs/syslog", nil))
		if want := "Forbidden (user=system:anonymous, verb=get, resource=nodes, subresource(s)=[log])\n"; w.Code != 403 || w.Body.String() != want {
			t.Errorf("anonymous GET /logs/syslog: %d %q, want 403 %q", w.Code, w.Body.String(), want)
		}

		// Allowed is cached for cacheAuthorizedTTL: the grant's removal shows
		// only once it has passed.
		revoke(t, admin, alice.Name, "stats")
		clk.Step(5*time.Minute - time.Second)
		if d := decide("/stats/summary"); d != authorizer.DecisionAllow {
			t.Errorf("within cacheAuthorizedTTL of the allowed answer: %v", d)
		}
		eventually.True(t, 30*time.Second, "nodes/stats no longer allowed", func() bool {
			clk.Step(5*time.Minute + time.Second)
			return decide("/stats/summary") == authorizer.DecisionNoOpinion
		})

		// Denied is cached for cacheUnauthorizedTTL.
		if d := decide("/logs/syslog"); d != authorizer.DecisionNoOpinion {
			t.Fatalf("nodes/log before its grant: %v", d)
		}
		grant(t, admin, alice.Name, "log")
		clk.Step(30*time.Second - time.Second)
		if d := decide("/logs/syslog"); d != authorizer.DecisionNoOpinion {
			t.Errorf("within cacheUnauthorizedTTL of the denied answer: %v", d)
		}
		eventually.True(t, 30*time.Second, "nodes/log allowed", func() bool {
			clk.Step(30*time.Second + time.Second)
			return decide("/logs/syslog") == authorizer.DecisionAllow
		})
	})
}

func mkServiceAccount(t *testing.T, c kubernetes.Interface, ns, name string) *corev1.ServiceAccount {
	t.Helper()
	sa, err := c.CoreV1().ServiceAccounts(ns).Create(t.Context(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return sa
}

// grant lets userName get nodes/<sub> through a ClusterRole and its binding
// named after both.
func grant(t *testing.T, c kubernetes.Interface, userName, sub string) {
	t.Helper()
	name := strings.ToLower(userName + "-" + sub)
	ctx := t.Context()
	if _, err := c.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules: []rbacv1.PolicyRule{{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"nodes/" + sub}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: name},
		Subjects: []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: userName}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.RbacV1().ClusterRoleBindings().Delete(ctx, name, metav1.DeleteOptions{})
		_ = c.RbacV1().ClusterRoles().Delete(ctx, name, metav1.DeleteOptions{})
	})
}

func revoke(t *testing.T, c kubernetes.Interface, userName, sub string) {
	t.Helper()
	if err := c.RbacV1().ClusterRoleBindings().Delete(t.Context(), strings.ToLower(userName+"-"+sub), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestReviewRetriesAndAnswers: the webhook plugins' handling of what the
// API server answers, on a stand-in server (the real one cannot be made
// to fail on cue): transient failures are retried within the backoff,
// others are not; the SAR's status maps to the decision as
// WebhookAuthorizer.Authorize maps it; a TokenReview's error is the
// authenticator's.
func TestReviewRetriesAndAnswers(t *testing.T) {
	type answer struct {
		code int
		body string
	}
	for _, tc := range []struct {
		name     string
		answers  []answer
		calls    int
		decision authorizer.Decision
		reason   string
		err      bool
	}{
		{"allowed", []answer{{200, `{"status":{"allowed":true,"reason":"rbac"}}`}}, 1, authorizer.DecisionAllow, "rbac", false},
		{"denied", []answer{{200, `{"status":{"denied":true,"reason":"no"}}`}}, 1, authorizer.DecisionDeny, "no", false},
		{"no opinion", []answer{{200, `{"status":{}}`}}, 1, authorizer.DecisionNoOpinion, "", false},
		{"both", []answer{{200, `{"status":{"allowed":true,"denied":true}}`}}, 1, authorizer.DecisionDeny, "", true},
		{"500 then allowed", []answer{{500, `{}`}, {200, `{"status":{"allowed":true}}`}}, 2, authorizer.DecisionAllow, "", false},
		{"429 then allowed", []answer{{429, `{}`}, {200, `{"status":{"allowed":true}}`}}, 2, authorizer.DecisionAllow, "", false},
		{"403 is not retried", []answer{{403, `{}`}, {200, `{"status":{"allowed":true}}`}}, 1, authorizer.DecisionNoOpinion, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/apis/authorization.k8s.io/v1/subjectaccessreviews" || r.Method != http.MethodPost {
					http.NotFound(w, r)
					return
				}
				a := tc.answers[min(calls, len(tc.answers)-1)]
				calls++
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(a.code)
				_, _ = io.WriteString(w, a.body)
			}))
			defer srv.Close()
			kube, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
			if err != nil {
				t.Fatal(err)
			}
			z := newSARAuthorizer(kube.AuthorizationV1().RESTClient(), time.Minute, time.Minute, clock.RealClock{},
				slog.New(slog.NewTextHandler(io.Discard, nil)))
			a := requestAttributes("node-a", &user.DefaultInfo{Name: "alice"}, httptest.NewRequest("GET", "/pods", nil), false)[0]
			d, reason, err := z.Authorize(t.Context(), a)
			if d != tc.decision || reason != tc.reason || (err != nil) != tc.err || calls != tc.calls {
				t.Errorf("decision %v reason %q err %v after %d calls, want %v %q err=%v after %d",
					d, reason, err, calls, tc.decision, tc.reason, tc.err, tc.calls)
			}
		})
	}
}
