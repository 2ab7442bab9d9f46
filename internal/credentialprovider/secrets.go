package credentialprovider

import (
	"encoding/json"
	"fmt"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/nodelet/nodelet/internal/podutil"
	corev1 "k8s.io/api/core/v1"
)

// SecretsKeyring is the kubelet's secrets.MakeDockerKeyring less the
// union: a keyring of the pull secrets' credentials, each tracked with its
// secret's coordinates; nil when no secret holds a docker config. A secret
// of another type, or without its key, is skipped as the kubelet skips it;
// one whose JSON does not parse is an error naming it.
func SecretsKeyring(secrets []corev1.Secret) (Keyring, error) {
	k := &BasicKeyring{}
	valid := 0
	for _, s := range secrets {
		coords := &CredentialSource{Secret: &SecretCoordinates{UID: string(s.UID), Namespace: s.Namespace, Name: s.Name}}
		if b, ok := s.Data[corev1.DockerConfigJsonKey]; s.Type == corev1.SecretTypeDockerConfigJson && ok && len(b) > 0 {
			var cfg DockerConfigJSON
			if err := json.Unmarshal(b, &cfg); err != nil {
				return nil, fmt.Errorf("secret %q: %s: %w", s.Name, corev1.DockerConfigJsonKey, err)
			}
			k.Add(coords, cfg.Auths)
			valid++
		} else if b, ok := s.Data[corev1.DockerConfigKey]; s.Type == corev1.SecretTypeDockercfg && ok && len(b) > 0 {
			var cfg DockerConfig
			if err := json.Unmarshal(b, &cfg); err != nil {
				return nil, fmt.Errorf("secret %q: %s: %w", s.Name, corev1.DockerConfigKey, err)
			}
			k.Add(coords, cfg)
			valid++
		}
	}
	if valid == 0 {
		return nil, nil
	}
	return k, nil
}

// RepoToPull is the name the keyring is asked about: image normalised
// (docker.io/library/ for short names) without tag or digest, the kubelet's
// parsers.ParseImageName. Parsed by podutil.ParseImage (go-containerregistry,
// not distribution/reference: see there), which calls Docker Hub
// index.docker.io where the kubelet's normalisation says docker.io.
func RepoToPull(image string) (string, error) {
	ref, err := podutil.ParseImage(image)
	if err != nil {
		return "", fmt.Errorf("couldn't parse image name %q: %v", image, err)
	}
	repo := ref.Context()
	host := repo.RegistryStr()
	if host == name.DefaultRegistry {
		host = dockerHub
	}
	return host + "/" + repo.RepositoryStr(), nil
}

// dockerHub is the registry of a short image name, as the kubelet's
// normalisation (distribution/reference's ParseNormalizedNamed) names it.
const dockerHub = "docker.io"

// Credentials are the credentials image may be pulled with for a pod: its
// pull secrets' first, then the node's (plugins), as the kubelet's
// makeLookupPullCredentialsFunc builds them (MakeDockerKeyring over the
// union of the node keyring and the external credential providers). node
// may be nil. A secret that does not parse fails the lookup, as in the
// kubelet.
func Credentials(image string, pullSecrets []corev1.Secret, node Keyring) ([]TrackedAuthConfig, error) {
	repo, err := RepoToPull(image)
	if err != nil {
		return nil, err
	}
	fromSecrets, err := SecretsKeyring(pullSecrets)
	if err != nil {
		return nil, err
	}
	var k Keyring = UnionKeyring{node}
	if fromSecrets != nil {
		k = UnionKeyring{fromSecrets, node}
	}
	creds, _ := k.Lookup(repo)
	return creds, nil
}
