package credentialprovider

import (
	"bytes"
	"context"
	stdjson "encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	kubeletv1 "k8s.io/kubelet/config/v1"
	credentialproviderv1 "k8s.io/kubelet/pkg/apis/credentialprovider/v1"
	"k8s.io/utils/clock"
)

const (
	// globalCacheKey caches a Global response (the kubelet's; the angle
	// brackets cannot be in an image or registry name).
	globalCacheKey     = "<global>"
	cachePurgeInterval = 15 * time.Minute
	// execTimeout is the kubelet's catch-all bound on one plugin run.
	execTimeout = time.Minute
)

// Plugins are the node's exec credential-provider plugins: the kubelet's
// externalCredentialProviderKeyring. A provider's credentials are
// node-wide (Source nil), or, in service-account token mode
// (tokenAttributes), the pod's service account's (ForPod).
type Plugins struct {
	providers []*pluginProvider
	// Hash is the SHA-256 of the configuration files (sha256:<hex>), as the
	// kubelet's kubelet_credential_provider_config_info metric shows it.
	Hash string
}

// NewPlugins reads configPath (a file or a directory) and finds each
// provider's executable in binDir, as the kubelet's
// RegisterCredentialProviderPlugins does; every problem is an error. api
// gives providers in service-account token mode their tokens (nil on a
// node without an API server: they fail, logged, and pulls go on without
// them).
func NewPlugins(configPath, binDir string, api ServiceAccounts, log *slog.Logger) (*Plugins, error) {
	if _, err := os.Stat(binDir); err != nil {
		if os.IsNotExist(err) {
			return nil, fmt.Errorf("plugin binary directory %s did not exist", binDir)
		}
		return nil, fmt.Errorf("error inspecting binary directory %s: %w", binDir, err)
	}
	cfg, hash, err := ReadConfig(configPath)
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	ps := &Plugins{Hash: hash}
	for _, p := range cfg.Providers {
		bin, err := exec.LookPath(filepath.Join(binDir, p.Name))
		if err != nil {
			if errors.Is(err, os.ErrNotExist) || errors.Is(err, exec.ErrNotFound) {
				return nil, fmt.Errorf("plugin binary executable %s did not exist", filepath.Join(binDir, p.Name))
			}
			return nil, fmt.Errorf("error inspecting binary executable %s: %w", bin, err)
		}
		ps.providers = append(ps.providers, newPluginProvider(binDir, p, api, clock.RealClock{}, log))
		log.Info("Registered credential provider", "provider", p.Name)
	}
	return ps, nil
}

// Lookup asks the providers for a pod without a service account: those in
// service-account token mode that require one give nothing.
func (ps *Plugins) Lookup(image string) ([]TrackedAuthConfig, bool) {
	if ps == nil {
		return nil, false
	}
	return ps.ForPod(Pod{}).Lookup(image)
}

// pluginProvider is one provider: its matchImages, its cache and how to
// run it (the kubelet's pluginProvider).
type pluginProvider struct {
	name                 string
	clock                clock.Clock
	log                  *slog.Logger
	matchImages          []string
	defaultCacheDuration time.Duration
	plugin               plugin
	group                singleflight.Group
	// sa is the provider's service-account token mode (nil: off).
	sa *serviceAccountProvider

	mu             sync.Mutex
	cache          map[string]cacheEntry
	lastCachePurge time.Time
}

type cacheEntry struct {
	credentials DockerConfig
	expiresAt   time.Time
}

// plugin runs a provider for an image, with a service account's token
// and annotations in token mode (execPlugin; a fake in tests).
type plugin interface {
	ExecPlugin(ctx context.Context, image, token string, annotations map[string]string) (*credentialproviderv1.CredentialProviderResponse, error)
}

func newPluginProvider(binDir string, p kubeletv1.CredentialProvider, api ServiceAccounts, clk clock.Clock, log *slog.Logger) *pluginProvider {
	return &pluginProvider{
		name: p.Name, clock: clk, log: log, sa: newServiceAccountProvider(p, api),
		matchImages:          p.MatchImages,
		defaultCacheDuration: p.DefaultCacheDuration.Duration,
		cache:                map[string]cacheEntry{},
		lastCachePurge:       clk.Now(),
		plugin: &execPlugin{
			name: p.Name, apiVersion: p.APIVersion, binDir: binDir,
			args: p.Args, env: p.Env, environ: os.Environ,
		},
	}
}

// provide is the kubelet's pluginProvider.provide: nothing for an image
// its matchImages do not match; in service-account token mode, nothing for
// a pod the provider skips (forPod), else a token of the pod's service
// account; the cached answer under the image, its registry or the global
// key (with the service account's part of the key), else the plugin (once
// for concurrent asks of one image and token) whose answer is cached by
// its cacheKeyType for its cacheDuration (nil: defaultCacheDuration; 0:
// not cached). The coordinates say which service account the credentials
// are for (nil: node-wide).
func (p *pluginProvider) provide(image string, pod Pod) (DockerConfig, *ServiceAccountCoordinates, error) {
	if !p.isImageAllowed(image) {
		return DockerConfig{}, nil, nil
	}
	var sa *saRequest
	if p.sa != nil {
		var run bool
		var err error
		if sa, run, err = p.sa.forPod(context.Background(), pod); err != nil || !run {
			return DockerConfig{}, nil, err
		}
	}
	var saKey, token string
	var annotations map[string]string
	var coords *ServiceAccountCoordinates
	if sa != nil {
		saKey, token, annotations, coords = sa.cacheKey, sa.token, sa.annotations, sa.coords
	}
	if cfg, found := p.getCachedCredentials(image, saKey); found {
		return cfg, coords, nil
	}
	flightKey := image
	if sa != nil {
		// The kubelet's generateSingleFlightKey: one run per token.
		flightKey, _ = newCacheKeyBuilder().addString(image).addString(hashIfNotEmpty(token)).addAnnotations(annotations).build()
	}
	res, err, _ := p.group.Do(flightKey, func() (any, error) {
		return p.plugin.ExecPlugin(context.Background(), image, token, annotations)
	})
	if err != nil {
		return nil, nil, fmt.Errorf("failed to get credential from external registry credential provider: %w", err)
	}
	response := res.(*credentialproviderv1.CredentialProviderResponse)
	if token != "" && p.sa.cacheType != kubeletv1.TokenServiceAccountTokenCacheType {
		// The kubelet's: a token echoed back as the password may only be
		// cached as long as the token lives (cacheType Token).
		for _, a := range response.Auth {
			if a.Password == token {
				return nil, nil, errors.New("credential provider plugin returned the service account token as the password which is not allowed when service account cache type is not set to 'Token'")
			}
		}
	}
	var key string
	switch response.CacheKeyType {
	case credentialproviderv1.ImagePluginCacheKeyType:
		key = image
	case credentialproviderv1.RegistryPluginCacheKeyType:
		key = parseRegistry(image)
	case credentialproviderv1.GlobalPluginCacheKeyType:
		key = globalCacheKey
	default:
		return nil, nil, fmt.Errorf("credential provider plugin did not return a valid cacheKeyType: %s", response.CacheKeyType)
	}
	cfg := make(DockerConfig, len(response.Auth))
	for match, a := range response.Auth {
		cfg[match] = DockerConfigEntry{Username: a.Username, Password: a.Password}
	}
	if response.CacheDuration != nil && response.CacheDuration.Duration == 0 {
		return cfg, coords, nil
	}
	var expiresAt time.Time
	if response.CacheDuration == nil {
		if p.defaultCacheDuration == 0 {
			return cfg, coords, nil
		}
		expiresAt = p.clock.Now().Add(p.defaultCacheDuration)
	} else {
		expiresAt = p.clock.Now().Add(response.CacheDuration.Duration)
	}
	p.mu.Lock()
	p.cache[cacheKey(key, saKey)] = cacheEntry{credentials: cfg, expiresAt: expiresAt}
	p.mu.Unlock()
	return cfg, coords, nil
}

// isImageAllowed is the kubelet's: does any of matchImages match image.
func (p *pluginProvider) isImageAllowed(image string) bool {
	for _, m := range p.matchImages {
		if matched, _ := URLsMatchStr(m, image); matched {
			return true
		}
	}
	return false
}

// getCachedCredentials is the kubelet's: the image's entry, else its
// registry's, else the global one (each with saKey, the service account's
// part), none expired; expired entries are purged every 15 minutes.
func (p *pluginProvider) getCachedCredentials(image, saKey string) (DockerConfig, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.clock.Now()
	if now.After(p.lastCachePurge.Add(cachePurgeInterval)) {
		for k, e := range p.cache {
			if now.After(e.expiresAt) {
				delete(p.cache, k)
			}
		}
		p.lastCachePurge = now
	}
	for _, base := range []string{image, parseRegistry(image), globalCacheKey} {
		key := cacheKey(base, saKey)
		e, ok := p.cache[key]
		if !ok {
			continue
		}
		if now.After(e.expiresAt) {
			delete(p.cache, key)
			continue
		}
		return e.credentials, true
	}
	return nil, false
}

// parseRegistry is the kubelet's: the image's first path element.
func parseRegistry(image string) string {
	return strings.Split(image, "/")[0]
}

// execPlugin runs a provider's executable (the kubelet's execPlugin):
//
//	$ ENV_NAME=ENV_VALUE <binDir>/<name> args[0] args[1] <<<request
type execPlugin struct {
	name       string
	apiVersion string
	binDir     string
	args       []string
	env        []kubeletv1.ExecEnvVar
	environ    func() []string
}

// ExecPlugin is the kubelet's execPlugin.ExecPlugin: the
// CredentialProviderRequest (with the service account's token and
// annotations in token mode) on stdin in the provider's apiVersion, the
// response read from stdout in that same apiVersion, within a minute.
func (e *execPlugin) ExecPlugin(ctx context.Context, image, token string, annotations map[string]string) (*credentialproviderv1.CredentialProviderResponse, error) {
	req := credentialproviderv1.CredentialProviderRequest{Image: image, ServiceAccountToken: token, ServiceAccountAnnotations: annotations}
	req.APIVersion, req.Kind = e.apiVersion, "CredentialProviderRequest"
	data, err := stdjson.Marshal(&req)
	if err != nil {
		return nil, fmt.Errorf("failed to encode auth request: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, execTimeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, filepath.Join(e.binDir, e.name), e.args...)
	cmd.Stdout, cmd.Stderr, cmd.Stdin = &stdout, &stderr, bytes.NewReader(data)
	env := e.environ()
	for _, v := range e.env {
		env = append(env, v.Name+"="+v.Value)
	}
	cmd.Env = env
	if err := cmd.Run(); ctx.Err() != nil {
		return nil, fmt.Errorf("error execing credential provider plugin %s for image %s: %w: %s", e.name, image, ctx.Err(), stderr.String())
	} else if err != nil {
		return nil, fmt.Errorf("error execing credential provider plugin %s for image %s: %w: %s", e.name, image, err, stderr.String())
	}
	return decodeResponse(stdout.Bytes(), e.apiVersion)
}

// decodeResponse checks the response's apiVersion against the request's,
// then decodes it strictly with its version's type (the kubelet's
// decodeResponse); an error never quotes the response, which holds
// credentials.
func decodeResponse(data []byte, apiVersion string) (*credentialproviderv1.CredentialProviderResponse, error) {
	gvk, err := json.DefaultMetaFactory.Interpret(data)
	if err != nil {
		return nil, fmt.Errorf("error reading GVK from response: %w", err)
	}
	if gvk.GroupVersion().String() != apiVersion {
		return nil, fmt.Errorf("apiVersion from credential plugin response did not match expected apiVersion:%s, actual apiVersion:%s", apiVersion, gvk.GroupVersion().String())
	}
	obj, gvk, err := codecs().UniversalDeserializer().Decode(data, nil, nil)
	if err != nil || gvk.Kind != "CredentialProviderResponse" || gvk.Group != credentialproviderv1.GroupName {
		return nil, errors.New("error decoding credential provider plugin response from stdout")
	}
	if r, ok := obj.(*credentialproviderv1.CredentialProviderResponse); ok {
		return r, nil
	}
	// v1alpha1 and v1beta1 responses have v1's fields.
	b, err := stdjson.Marshal(obj)
	if err != nil {
		return nil, errors.New("error decoding credential provider plugin response from stdout")
	}
	out := &credentialproviderv1.CredentialProviderResponse{}
	if err := stdjson.Unmarshal(b, out); err != nil {
		return nil, errors.New("error decoding credential provider plugin response from stdout")
	}
	return out, nil
}
