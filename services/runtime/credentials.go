package runtime

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ObjectGetter reads the API objects a pod refers to: image pull secrets,
// and the secrets and config maps of env references. With an API server it
// reads through client-go (see NewAPIObjects); a standalone node may hand
// the runtime a fixed set (StaticObjects), or none.
type ObjectGetter interface {
	GetSecret(ctx context.Context, namespace, name string) (*corev1.Secret, error)
	GetConfigMap(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error)
}

// StaticObjects is an ObjectGetter over fixed objects, keyed
// "<namespace>/<name>".
type StaticObjects struct {
	Secrets    map[string]*corev1.Secret
	ConfigMaps map[string]*corev1.ConfigMap
}

func (s StaticObjects) GetSecret(_ context.Context, ns, n string) (*corev1.Secret, error) {
	if o, ok := s.Secrets[ns+"/"+n]; ok {
		return o, nil
	}
	return nil, fmt.Errorf("secret %q not found", ns+"/"+n)
}

func (s StaticObjects) GetConfigMap(_ context.Context, ns, n string) (*corev1.ConfigMap, error) {
	if o, ok := s.ConfigMaps[ns+"/"+n]; ok {
		return o, nil
	}
	return nil, fmt.Errorf("configmap %q not found", ns+"/"+n)
}

// dockerConfigEntry is one registry's credential in a .dockerconfigjson.
type dockerConfigEntry struct {
	Username      string `json:"username,omitempty"`
	Password      string `json:"password,omitempty"`
	Auth          string `json:"auth,omitempty"`
	IdentityToken string `json:"identitytoken,omitempty"`
	RegistryToken string `json:"registrytoken,omitempty"`
}

// pullSecretAuths reads the pod's imagePullSecrets and returns the
// credentials whose registry matches image, most specific first. A secret
// that cannot be read or parsed is reported in the error and skipped (the
// kubelet pulls without it rather than not at all).
func pullSecretAuths(ctx context.Context, objs ObjectGetter, pod *corev1.Pod, image string) ([]*runtimeapi.AuthConfig, error) {
	if len(pod.Spec.ImagePullSecrets) == 0 {
		return nil, nil
	}
	var problems []string
	var secrets []*corev1.Secret
	for _, ref := range pod.Spec.ImagePullSecrets {
		if objs == nil {
			problems = append(problems, fmt.Sprintf("secret %q: no API server and no secrets given to the runtime", ref.Name))
			continue
		}
		s, err := objs.GetSecret(ctx, pod.Namespace, ref.Name)
		if err != nil {
			problems = append(problems, fmt.Sprintf("secret %q: %v", ref.Name, err))
			continue
		}
		secrets = append(secrets, s)
	}
	auths, err := authsForImage(image, secrets)
	if err != nil {
		problems = append(problems, err.Error())
	}
	if len(problems) > 0 {
		return auths, fmt.Errorf("image pull secrets: %s", strings.Join(problems, "; "))
	}
	return auths, nil
}

// authsForImage matches the registries of dockerconfigjson (and legacy
// dockercfg) secrets against image, by host and path prefix.
func authsForImage(image string, secrets []*corev1.Secret) ([]*runtimeapi.AuthConfig, error) {
	ref, err := name.ParseReference(image, name.WeakValidation)
	if err != nil {
		return nil, fmt.Errorf("image %q: %w", image, err)
	}
	host := ref.Context().RegistryStr()
	repo := host + "/" + ref.Context().RepositoryStr()
	type match struct {
		n    int
		auth *runtimeapi.AuthConfig
	}
	var matches []match
	var problems []string
	for _, s := range secrets {
		entries, err := dockerConfigOf(s)
		if err != nil {
			problems = append(problems, fmt.Sprintf("secret %q: %v", s.Name, err))
			continue
		}
		for key, e := range entries {
			k := normaliseRegistryKey(key)
			if k != host && !strings.HasPrefix(repo, strings.TrimSuffix(k, "/")+"/") {
				continue
			}
			a := &runtimeapi.AuthConfig{
				Username: e.Username, Password: e.Password, Auth: e.Auth,
				IdentityToken: e.IdentityToken, RegistryToken: e.RegistryToken,
				// ServerAddress stays empty: the host already matched, and
				// containerd 1.6 parses it as a URL (a bare host:port
				// would fail the pull).
			}
			if a.Username == "" && a.Auth != "" {
				if b, err := base64.StdEncoding.DecodeString(a.Auth); err == nil {
					if u, p, ok := strings.Cut(string(b), ":"); ok {
						a.Username, a.Password = u, p
					}
				}
			}
			matches = append(matches, match{len(k), a})
		}
	}
	// Most specific (longest) registry key first.
	for i := 1; i < len(matches); i++ {
		for j := i; j > 0 && matches[j].n > matches[j-1].n; j-- {
			matches[j], matches[j-1] = matches[j-1], matches[j]
		}
	}
	out := make([]*runtimeapi.AuthConfig, 0, len(matches))
	for _, m := range matches {
		out = append(out, m.auth)
	}
	if len(problems) > 0 {
		return out, fmt.Errorf("%s", strings.Join(problems, "; "))
	}
	return out, nil
}

func dockerConfigOf(s *corev1.Secret) (map[string]dockerConfigEntry, error) {
	switch s.Type {
	case corev1.SecretTypeDockerConfigJson:
		var cfg struct {
			Auths map[string]dockerConfigEntry `json:"auths"`
		}
		if err := json.Unmarshal(s.Data[corev1.DockerConfigJsonKey], &cfg); err != nil {
			return nil, fmt.Errorf("%s: %w", corev1.DockerConfigJsonKey, err)
		}
		return cfg.Auths, nil
	case corev1.SecretTypeDockercfg:
		var cfg map[string]dockerConfigEntry
		if err := json.Unmarshal(s.Data[corev1.DockerConfigKey], &cfg); err != nil {
			return nil, fmt.Errorf("%s: %w", corev1.DockerConfigKey, err)
		}
		return cfg, nil
	default:
		return nil, fmt.Errorf("type %q is not %s", s.Type, corev1.SecretTypeDockerConfigJson)
	}
}

// normaliseRegistryKey turns a docker config key ("https://index.docker.io/v1/",
// "docker.io", "registry:5000/team") into host[/path].
func normaliseRegistryKey(k string) string {
	k = strings.TrimPrefix(strings.TrimPrefix(k, "https://"), "http://")
	k = strings.TrimSuffix(k, "/")
	switch k {
	case "index.docker.io/v1", "docker.io", "registry-1.docker.io", "index.docker.io":
		return name.DefaultRegistry
	}
	return k
}
