package volumes

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

// fakeTokenAPI issues numbered tokens valid for the requested seconds, or
// fails while failing is set.
type fakeTokenAPI struct {
	clock   *clocktesting.FakeClock
	mu      sync.Mutex
	issued  int
	failing bool
	last    *authenticationv1.TokenRequest
}

func (f *fakeTokenAPI) request(_ context.Context, ns, name string, tr *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failing {
		return nil, errors.New("apiserver unavailable")
	}
	f.issued++
	f.last = tr.DeepCopy()
	out := tr.DeepCopy()
	out.Status.Token = fmt.Sprintf("%s/%s#%d", ns, name, f.issued)
	out.Status.ExpirationTimestamp = metav1.NewTime(f.clock.Now().Add(time.Duration(*tr.Spec.ExpirationSeconds) * time.Second))
	return out, nil
}

func TestTokenManagerRefreshesAt80Percent(t *testing.T) {
	start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(start)
	api := &fakeTokenAPI{clock: clk}
	m := newTokenManager(api.request, clk)
	exp := int64(1000)
	tr := podTokenRequest("web", "uid-1", "", &exp)
	ctx := context.Background()

	for _, step := range []struct {
		name    string
		at      time.Duration // since start
		failing bool
		want    string
		errPart string
	}{
		{name: "first request", at: 0, want: "ns/sa#1"},
		{name: "cached", at: 100 * time.Second, want: "ns/sa#1"},
		{name: "just before 80%", at: 799 * time.Second, want: "ns/sa#1"},
		{name: "at 80% a new token", at: 800 * time.Second, want: "ns/sa#2"},
		{name: "refresh fails, old still valid", at: 1700 * time.Second, failing: true, want: "ns/sa#2"},
		{name: "refresh fails, old expired", at: 1900 * time.Second, failing: true, errPart: "expired and refresh failed"},
		{name: "API back", at: 1901 * time.Second, want: "ns/sa#3"},
	} {
		clk.SetTime(start.Add(step.at))
		api.mu.Lock()
		api.failing = step.failing
		api.mu.Unlock()
		got, err := m.get(ctx, "ns", "sa", tr)
		if step.errPart != "" {
			if err == nil || !strings.Contains(err.Error(), step.errPart) {
				t.Fatalf("%s: err = %v, want %q", step.name, err, step.errPart)
			}
			continue
		}
		if err != nil || got.Status.Token != step.want {
			t.Fatalf("%s: token %v %v, want %s", step.name, got, err, step.want)
		}
	}
	next, ok := m.nextRefresh()
	if !ok || !next.Equal(start.Add(1901*time.Second+800*time.Second)) {
		t.Fatalf("next refresh %v", next)
	}
	// Bound to the pod, with no audience (the API server's own).
	if ref := api.last.Spec.BoundObjectRef; ref == nil || ref.Kind != "Pod" || ref.Name != "web" || ref.UID != "uid-1" || len(api.last.Spec.Audiences) != 0 {
		t.Fatalf("request %+v", api.last.Spec)
	}
	m.forgetPod("uid-1")
	if _, ok := m.nextRefresh(); ok {
		t.Fatal("token of a forgotten pod still cached")
	}
	// A different audience is a different token.
	other := podTokenRequest("web", "uid-1", "vault", &exp)
	if tokenKey("ns", "sa", other) == tokenKey("ns", "sa", tr) {
		t.Fatal("audience not in the cache key")
	}
}

// countingGetter serves fixed config maps and counts reads.
type countingGetter struct {
	mu    sync.Mutex
	reads int
	cms   map[string]*corev1.ConfigMap
}

func (g *countingGetter) GetConfigMap(_ context.Context, ns, name string) (*corev1.ConfigMap, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.reads++
	if cm, ok := g.cms[ns+"/"+name]; ok {
		return cm.DeepCopy(), nil
	}
	return nil, apierrors.NewNotFound(corev1.Resource("configmaps"), name)
}

func (g *countingGetter) GetSecret(_ context.Context, _, name string) (*corev1.Secret, error) {
	return nil, apierrors.NewNotFound(corev1.Resource("secrets"), name)
}

func TestCacheSourceTTL(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	g := &countingGetter{cms: map[string]*corev1.ConfigMap{"ns/cfg": {Data: map[string]string{"k": "v1"}}}}
	c := newCacheSource(g, time.Minute, clk)
	k := objectKey{Kind: kindConfigMap, Namespace: "ns", Name: "cfg"}
	value := func() string {
		o, err := c.get(context.Background(), k)
		if err != nil {
			t.Fatal(err)
		}
		return o.(*corev1.ConfigMap).Data["k"]
	}
	c.register(k)
	if v := value(); v != "v1" || g.reads != 1 {
		t.Fatalf("%s after %d reads", v, g.reads)
	}
	g.cms["ns/cfg"].Data["k"] = "v2"
	clk.Step(30 * time.Second)
	if v := value(); v != "v1" || g.reads != 1 {
		t.Fatalf("within the TTL: %s after %d reads", v, g.reads)
	}
	clk.Step(31 * time.Second)
	if v := value(); v != "v2" || g.reads != 2 {
		t.Fatalf("after the TTL: %s after %d reads", v, g.reads)
	}
	g.cms["ns/cfg"].Data["k"] = "v3"
	c.register(k) // a new pod: fresh data
	if v := value(); v != "v3" {
		t.Fatalf("a new reference did not refetch: %s", v)
	}
	_, err := c.get(context.Background(), objectKey{Kind: kindConfigMap, Namespace: "ns", Name: "nope"})
	if !apierrors.IsNotFound(err) {
		t.Fatalf("missing: %v", err)
	}
}
