package credentialprovider

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	credentialproviderv1 "k8s.io/kubelet/pkg/apis/credentialprovider/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

// fakePlugin answers with a fixed response and counts its runs (and the
// tokens and annotations it was given).
type fakePlugin struct {
	mu          sync.Mutex
	calls       []string
	tokens      []string
	annotations []map[string]string
	keyType     credentialproviderv1.PluginCacheKeyType
	duration    *metav1.Duration
	err         error
	// echo answers the token as the password.
	echo bool
}

func (f *fakePlugin) ExecPlugin(_ context.Context, image, token string, annotations map[string]string) (*credentialproviderv1.CredentialProviderResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, image)
	f.tokens = append(f.tokens, token)
	f.annotations = append(f.annotations, annotations)
	if f.err != nil {
		return nil, f.err
	}
	pw := "pw"
	if f.echo {
		pw = token
	}
	return &credentialproviderv1.CredentialProviderResponse{
		CacheKeyType: f.keyType, CacheDuration: f.duration,
		Auth: map[string]credentialproviderv1.AuthConfig{
			"*.example.com": {Username: fmt.Sprintf("user%d", len(f.calls)), Password: pw},
		},
	}, nil
}

func (f *fakePlugin) runs() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls)
}

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func dur(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }

// Caching as the kubelet's pluginProvider: by the response's cacheKeyType
// (an image, its registry, every image) for its cacheDuration, the
// provider's defaultCacheDuration when it gives none, never when it gives
// 0; and no run for an image matchImages do not match.
func TestPluginCache(t *testing.T) {
	const (
		img1  = "reg.example.com/team/app1"
		img2  = "reg.example.com/team/app2"
		other = "other.example.com/app"
	)
	type ask struct {
		advance time.Duration
		image   string
		runs    int // the plugin's runs after this ask
	}
	for _, tc := range []struct {
		name       string
		keyType    credentialproviderv1.PluginCacheKeyType
		duration   *metav1.Duration
		defaultDur time.Duration
		asks       []ask
	}{
		{name: "Image key: per image", keyType: credentialproviderv1.ImagePluginCacheKeyType, duration: dur(time.Minute),
			asks: []ask{{0, img1, 1}, {0, img1, 1}, {0, img2, 2}, {30 * time.Second, img1, 2}, {31 * time.Second, img1, 3}}},
		{name: "Registry key: one run per registry", keyType: credentialproviderv1.RegistryPluginCacheKeyType, duration: dur(time.Minute),
			asks: []ask{{0, img1, 1}, {0, img2, 1}, {0, other, 2}, {61 * time.Second, img2, 3}}},
		{name: "Global key: one run for all", keyType: credentialproviderv1.GlobalPluginCacheKeyType, duration: dur(time.Minute),
			asks: []ask{{0, img1, 1}, {0, img2, 1}, {0, other, 1}}},
		{name: "no cacheDuration: the provider's default", keyType: credentialproviderv1.ImagePluginCacheKeyType, defaultDur: 10 * time.Minute,
			asks: []ask{{0, img1, 1}, {9 * time.Minute, img1, 1}, {2 * time.Minute, img1, 2}}},
		{name: "no cacheDuration and default 0: never cached", keyType: credentialproviderv1.ImagePluginCacheKeyType,
			asks: []ask{{0, img1, 1}, {0, img1, 2}}},
		{name: "cacheDuration 0: never cached", keyType: credentialproviderv1.GlobalPluginCacheKeyType, duration: dur(0), defaultDur: time.Hour,
			asks: []ask{{0, img1, 1}, {0, img1, 2}}},
		{name: "not in matchImages: never run", keyType: credentialproviderv1.GlobalPluginCacheKeyType, duration: dur(time.Minute),
			asks: []ask{{0, "elsewhere.io/app", 0}, {0, "reg.example.com:5000/app", 0}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(time.Unix(1e9, 0))
			fake := &fakePlugin{keyType: tc.keyType, duration: tc.duration}
			p := &pluginProvider{name: "fake", clock: clk, log: discard(), plugin: fake,
				matchImages: []string{"*.example.com"}, defaultCacheDuration: tc.defaultDur,
				cache: map[string]cacheEntry{}, lastCachePurge: clk.Now()}
			ps := &Plugins{providers: []*pluginProvider{p}}
			for i, a := range tc.asks {
				clk.Step(a.advance)
				creds, found := ps.Lookup(a.image)
				if got := fake.runs(); got != a.runs {
					t.Fatalf("ask %d (%s): %d runs, want %d", i, a.image, got, a.runs)
				}
				if matches := strings.Contains(a.image, ".example.com/"); matches != found {
					t.Fatalf("ask %d (%s): found %v, want %v", i, a.image, found, matches)
				}
				for _, c := range creds {
					if c.Source != nil {
						t.Fatalf("a plugin's credential has a source: %+v", c.Source)
					}
				}
			}
		})
	}
}

// A bad answer is logged and the pull goes on without the provider.
func TestPluginErrors(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1e9, 0))
	for _, fake := range []*fakePlugin{
		{err: fmt.Errorf("boom")},
		{keyType: "Bogus"},
	} {
		p := &pluginProvider{name: "fake", clock: clk, log: discard(), plugin: fake,
			matchImages: []string{"reg.example.com"}, cache: map[string]cacheEntry{}, lastCachePurge: clk.Now()}
		if _, _, err := p.provide("reg.example.com/app", Pod{}); err == nil {
			t.Errorf("%+v: no error", fake)
		}
		if creds, found := (&Plugins{providers: []*pluginProvider{p}}).Lookup("reg.example.com/app"); found || len(creds) > 0 {
			t.Errorf("%+v: credentials %v", fake, creds)
		}
	}
}

const goodConfig = `apiVersion: kubelet.config.k8s.io/v1
kind: CredentialProviderConfig
providers:
- name: %s
  apiVersion: credentialprovider.kubelet.k8s.io/v1
  matchImages: ["*.example.com", "127.0.0.1:5000"]
  defaultCacheDuration: 1m
  args: [--user, "from-args"]
  env:
  - {name: PLUGIN_PASSWORD, value: "from-env"}
`

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// Configurations the kubelet refuses, refused with its messages.
func TestReadConfig(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, config, errContains string
	}{
		{"good", fmt.Sprintf(goodConfig, "p"), ""},
		{"v1beta1", strings.Replace(strings.Replace(fmt.Sprintf(goodConfig, "p"), "/v1\n", "/v1beta1\n", 1), "credentialprovider.kubelet.k8s.io/v1", "credentialprovider.kubelet.k8s.io/v1beta1", 1), ""},
		{"unknown field", fmt.Sprintf(goodConfig, "p") + "  bogus: 1\n", `unknown field "providers[0].bogus"`},
		{"wrong kind", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n", "wrong Kind"},
		{"no providers", "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders: []\n", "providers: Required value: at least 1 item in plugins is required"},
		{"slash in name", fmt.Sprintf(goodConfig, "a/b"), "provider name cannot contain '/'"},
		{"dotdot", fmt.Sprintf(goodConfig, ".."), "provider name cannot be '..'"},
		{"bad apiVersion", strings.Replace(fmt.Sprintf(goodConfig, "p"), "credentialprovider.kubelet.k8s.io/v1", "credentialprovider.kubelet.k8s.io/v2", 1), `providers.apiVersion: Unsupported value: "credentialprovider.kubelet.k8s.io/v2"`},
		{"no matchImages", strings.Replace(fmt.Sprintf(goodConfig, "p"), `matchImages: ["*.example.com", "127.0.0.1:5000"]`, "matchImages: []", 1), "at least 1 item in matchImages is required"},
		{"no defaultCacheDuration", strings.Replace(fmt.Sprintf(goodConfig, "p"), "  defaultCacheDuration: 1m\n", "", 1), "providers.defaultCacheDuration: Required value"},
		{"negative defaultCacheDuration", strings.Replace(fmt.Sprintf(goodConfig, "p"), "1m", "-1m", 1), "must be greater than or equal to 0"},
		{"tokenAttributes", fmt.Sprintf(goodConfig, "p") + "  tokenAttributes: {serviceAccountTokenAudience: a, cacheType: Token, requireServiceAccount: true, requiredServiceAccountAnnotationKeys: [example.com/role]}\n", ""},
		{"tokenAttributes without an audience", fmt.Sprintf(goodConfig, "p") + "  tokenAttributes: {cacheType: Token, requireServiceAccount: true}\n", "providers.tokenAttributes.serviceAccountTokenAudience: Required value"},
		{"tokenAttributes without requireServiceAccount", fmt.Sprintf(goodConfig, "p") + "  tokenAttributes: {serviceAccountTokenAudience: a, cacheType: Token}\n", "providers.tokenAttributes.requireServiceAccount: Required value"},
		{"tokenAttributes without a cacheType", fmt.Sprintf(goodConfig, "p") + "  tokenAttributes: {serviceAccountTokenAudience: a, requireServiceAccount: true}\n", "cacheType is required to be set when tokenAttributes is specified. Supported values are: ServiceAccount, Token"},
		{"tokenAttributes with a bad cacheType", fmt.Sprintf(goodConfig, "p") + "  tokenAttributes: {serviceAccountTokenAudience: a, requireServiceAccount: true, cacheType: Pod}\n", `providers.tokenAttributes.cacheType: Unsupported value: "Pod"`},
		{"tokenAttributes, required keys without requireServiceAccount", fmt.Sprintf(goodConfig, "p") + "  tokenAttributes: {serviceAccountTokenAudience: a, requireServiceAccount: false, cacheType: Token, requiredServiceAccountAnnotationKeys: [a.io/b]}\n", "requireServiceAccount cannot be false when requiredServiceAccountAnnotationKeys is set"},
		{"tokenAttributes, a key both required and optional", fmt.Sprintf(goodConfig, "p") + "  tokenAttributes: {serviceAccountTokenAudience: a, requireServiceAccount: true, cacheType: Token, requiredServiceAccountAnnotationKeys: [a.io/b], optionalServiceAccountAnnotationKeys: [a.io/b]}\n", "annotation keys cannot be both required and optional"},
		{"tokenAttributes, a bad key", fmt.Sprintf(goodConfig, "p") + "  tokenAttributes: {serviceAccountTokenAudience: a, requireServiceAccount: true, cacheType: Token, optionalServiceAccountAnnotationKeys: [\"a b\"]}\n", "providers.tokenAttributes.optionalServiceAccountAnnotationKeys: Invalid value: \"a b\""},
		{"tokenAttributes on v1beta1", strings.Replace(fmt.Sprintf(goodConfig, "p"), "credentialprovider.kubelet.k8s.io/v1", "credentialprovider.kubelet.k8s.io/v1beta1", 1) + "  tokenAttributes: {serviceAccountTokenAudience: a, requireServiceAccount: true, cacheType: Token}\n", "tokenAttributes is only supported for credentialprovider.kubelet.k8s.io/v1 API version"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, hash, err := ReadConfig(writeFile(t, dir, tc.name+".yaml", tc.config))
			if tc.errContains == "" {
				if err != nil {
					t.Fatal(err)
				}
				if len(cfg.Providers) != 1 || cfg.Providers[0].DefaultCacheDuration.Duration != time.Minute || !strings.HasPrefix(hash, "sha256:") {
					t.Fatalf("%+v %s", cfg, hash)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.errContains) {
				t.Fatalf("err = %v, want %q", err, tc.errContains)
			}
		})
	}
	// A directory: its files merged in lexical order; a name twice refused.
	d := t.TempDir()
	writeFile(t, d, "b.yaml", fmt.Sprintf(goodConfig, "second"))
	writeFile(t, d, "a.json", `{"apiVersion":"kubelet.config.k8s.io/v1","kind":"CredentialProviderConfig","providers":[{"name":"first","apiVersion":"credentialprovider.kubelet.k8s.io/v1","matchImages":["x.io"],"defaultCacheDuration":"0s"}]}`)
	writeFile(t, d, "ignored.txt", "not a config")
	cfg, _, err := ReadConfig(d)
	if err != nil || len(cfg.Providers) != 2 || cfg.Providers[0].Name != "first" || cfg.Providers[1].Name != "second" {
		t.Fatalf("directory: %+v %v", cfg, err)
	}
	writeFile(t, d, "c.yaml", fmt.Sprintf(goodConfig, "second"))
	if _, _, err := ReadConfig(d); err == nil || !strings.Contains(err.Error(), `duplicate provider name "second"`) {
		t.Fatalf("duplicate: %v", err)
	}
}

// The exec protocol end to end with a shell script as the provider: the
// request on stdin, args and env given, the response's apiVersion checked.
func TestExecPlugin(t *testing.T) {
	bin := t.TempDir()
	writeFile(t, bin, "echo-provider", `#!/bin/sh
req=$(cat)
case "$req" in *'"kind":"CredentialProviderRequest"'*'"image":"reg.example.com/app"'*) ;; *) echo "bad request: $req" >&2; exit 1;; esac
echo '{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"CredentialProviderResponse","cacheKeyType":"Registry","auth":{"reg.example.com":{"username":"'"$2"'","password":"'"$PLUGIN_PASSWORD"'"}}}'
`)
	writeFile(t, bin, "wrong-version", "#!/bin/sh\ncat >/dev/null\necho '{\"apiVersion\":\"credentialprovider.kubelet.k8s.io/v1beta1\",\"kind\":\"CredentialProviderResponse\",\"cacheKeyType\":\"Image\"}'\n")
	cfgDir := t.TempDir()
	cfg := writeFile(t, cfgDir, "c.yaml", fmt.Sprintf(goodConfig, "echo-provider")+strings.TrimPrefix(fmt.Sprintf(goodConfig, "wrong-version"), "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n"))
	ps, err := NewPlugins(cfg, bin, nil, discard())
	if err != nil {
		t.Fatal(err)
	}
	creds, found := ps.Lookup("reg.example.com/app")
	if !found || len(creds) != 1 || creds[0].Username != "from-args" || creds[0].Password != "from-env" {
		t.Fatalf("credentials %+v", creds)
	}
	_, err = ps.providers[1].plugin.ExecPlugin(context.Background(), "reg.example.com/app", "", nil)
	if err == nil || !strings.Contains(err.Error(), "did not match expected apiVersion:credentialprovider.kubelet.k8s.io/v1, actual apiVersion:credentialprovider.kubelet.k8s.io/v1beta1") {
		t.Fatalf("wrong version: %v", err)
	}
	if _, err := NewPlugins(cfg, filepath.Join(bin, "absent"), nil, discard()); err == nil || !strings.Contains(err.Error(), "did not exist") {
		t.Fatalf("absent bin dir: %v", err)
	}
	if _, err := NewPlugins(writeFile(t, cfgDir, "d.yaml", fmt.Sprintf(goodConfig, "nosuch")), bin, nil, discard()); err == nil || !strings.Contains(err.Error(), "plugin binary executable "+filepath.Join(bin, "nosuch")+" did not exist") {
		t.Fatalf("absent plugin: %v", err)
	}
}
