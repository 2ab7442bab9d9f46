// Package credentialprovider finds the credentials an image is pulled with,
// as the kubelet's pkg/credentialprovider does: a keyring of registry
// credentials matched against the image (keyring.go), filled from the pod's
// imagePullSecrets (secrets.go) and from the node's exec credential-provider
// plugins (plugin.go, config.go; the credentialprovider.kubelet.k8s.io exec
// protocol of k8s.io/kubelet).
//
// nodelet-runtime asks one question of it, through Credentials: which
// credentials may pull this image for this pod, each with where it came
// from (a secret's coordinates, or nil: node-wide), which is what the image
// pull records of internal/pullmanager are keyed on.
package credentialprovider

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// DockerConfig maps a registry (host[:port][/path], a scheme allowed) to its
// credential: the "auths" of a .dockerconfigjson, a .dockercfg, a plugin's
// response (the kubelet's credentialprovider.DockerConfig).
type DockerConfig map[string]DockerConfigEntry

// DockerConfigJSON is a .dockerconfigjson.
type DockerConfigJSON struct {
	Auths DockerConfig `json:"auths"`
}

// DockerConfigEntry is one registry's credential. Its "auth" field
// (base64 of user:password) is decoded into Username and Password, as the
// kubelet's DockerConfigEntry.UnmarshalJSON does.
type DockerConfigEntry struct {
	Username string
	Password string
	Email    string
}

type dockerConfigEntryWithAuth struct {
	Username string `json:"username,omitempty"`
	Password string `json:"password,omitempty"`
	Email    string `json:"email,omitempty"`
	Auth     string `json:"auth,omitempty"`
}

// UnmarshalJSON mirrors the kubelet's DockerConfigEntry.UnmarshalJSON.
func (e *DockerConfigEntry) UnmarshalJSON(data []byte) error {
	var tmp dockerConfigEntryWithAuth
	if err := json.Unmarshal(data, &tmp); err != nil {
		return err
	}
	e.Username, e.Password, e.Email = tmp.Username, tmp.Password, tmp.Email
	if tmp.Auth == "" {
		return nil
	}
	var err error
	e.Username, e.Password, err = decodeDockerConfigFieldAuth(tmp.Auth)
	return err
}

// decodeDockerConfigFieldAuth is the kubelet's: base64(<username>:<password>),
// padded or not.
func decodeDockerConfigFieldAuth(field string) (string, string, error) {
	var decoded []byte
	var err error
	if strings.HasSuffix(strings.TrimSpace(field), "=") {
		decoded, err = base64.StdEncoding.DecodeString(field)
	} else {
		decoded, err = base64.RawStdEncoding.DecodeString(field)
	}
	if err != nil {
		return "", "", err
	}
	user, password, ok := strings.Cut(string(decoded), ":")
	if !ok {
		return "", "", fmt.Errorf("unable to parse auth field, must be formatted as base64(username:password)")
	}
	return user, password, nil
}

// AuthConfig is what a pull is made with (the kubelet's
// credentialprovider.AuthConfig; CRI's AuthConfig has the same fields).
type AuthConfig struct {
	Username string `json:"username,omitempty"`
	Password string `json:"password,omitempty"`
	Auth     string `json:"auth,omitempty"`
	Email    string `json:"email,omitempty"`

	ServerAddress string `json:"serveraddress,omitempty"`
	IdentityToken string `json:"identitytoken,omitempty"`
	RegistryToken string `json:"registrytoken,omitempty"`
}

// TrackedAuthConfig is a credential with where it came from: Source nil is
// node-wide (a plugin's, with no service account), a secret's or a service
// account's (a plugin's in token mode) otherwise.
// AuthConfigHash is the SHA-256 of the credential (the kubelet's
// hashAuthConfig), what a pull record of a secret compares.
type TrackedAuthConfig struct {
	AuthConfig
	AuthConfigHash string
	Source         *CredentialSource
}

// CredentialSource says where a credential came from.
type CredentialSource struct {
	Secret         *SecretCoordinates
	ServiceAccount *ServiceAccountCoordinates
}

// SecretCoordinates name an image pull secret.
type SecretCoordinates struct {
	UID       string
	Namespace string
	Name      string
}

// newTrackedAuthConfig is the kubelet's NewTrackedAuthConfig (with
// KubeletEnsureSecretPulledImages on: the source kept and the hash made).
func newTrackedAuthConfig(c AuthConfig, src *CredentialSource) TrackedAuthConfig {
	return TrackedAuthConfig{AuthConfig: c, Source: src, AuthConfigHash: hashAuthConfig(&c)}
}

// hashAuthConfig is the kubelet's: SHA-256 of the credential's JSON.
func hashAuthConfig(c *AuthConfig) string {
	b, err := json.Marshal(c)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Keyring answers which credentials may pull an image (a repository name,
// host/path, without tag or digest), most specific registry first (the
// kubelet's DockerKeyring).
type Keyring interface {
	Lookup(image string) ([]TrackedAuthConfig, bool)
}

// BasicKeyring is the kubelet's BasicDockerKeyring: credentials indexed by
// registry key, matched most specific first.
type BasicKeyring struct {
	index []string
	creds map[string][]TrackedAuthConfig
}

// Add indexes cfg's credentials, each tracked with src (nil: node-wide).
// It mirrors the kubelet's BasicDockerKeyring.Add: a key's scheme is
// dropped, /v1/ and /v2/ mean the host, and the index is reverse-sorted so
// that longer paths match first.
func (k *BasicKeyring) Add(src *CredentialSource, cfg DockerConfig) {
	if k.creds == nil {
		k.creds = map[string][]TrackedAuthConfig{}
	}
	// Range in a fixed order so that one key's credentials keep the order
	// of their sources, whatever the map's.
	keys := make([]string, 0, len(cfg))
	for key := range cfg {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	for _, repository := range keys {
		e := cfg[repository]
		creds := AuthConfig{Username: e.Username, Password: e.Password, Email: e.Email}
		if !strings.HasPrefix(repository, "https://") && !strings.HasPrefix(repository, "http://") {
			repository = "https://" + repository
		}
		parsed, err := url.Parse(repository)
		if err != nil {
			continue
		}
		path := parsed.Path
		if strings.HasPrefix(path, "/v2/") || strings.HasPrefix(path, "/v1/") {
			path = path[3:]
		}
		key := parsed.Host
		if path != "" && path != "/" {
			key = parsed.Host + path
		}
		k.creds[key] = append(k.creds[key], newTrackedAuthConfig(creds, src))
		k.index = append(k.index, key)
	}
	slices.Sort(k.index)
	k.index = slices.Compact(k.index)
	slices.Reverse(k.index)
}

const defaultRegistryHost = "index.docker.io"

// Lookup is the kubelet's BasicDockerKeyring.Lookup: every key that
// matches image, most specific first; else Docker Hub's credentials for an
// image of Docker Hub.
func (k *BasicKeyring) Lookup(image string) ([]TrackedAuthConfig, bool) {
	var ret []TrackedAuthConfig
	for _, key := range k.index {
		if matched, _ := URLsMatchStr(key, image); matched {
			ret = append(ret, k.creds[key]...)
		}
	}
	if len(ret) > 0 {
		return ret, true
	}
	if isDefaultRegistryMatch(image) {
		if auth, ok := k.creds[defaultRegistryHost]; ok {
			return auth, true
		}
	}
	return nil, false
}

// isDefaultRegistryMatch is the kubelet's: does image come from Docker Hub
// by the form of its name.
func isDefaultRegistryMatch(image string) bool {
	parts := strings.SplitN(image, "/", 2)
	if parts[0] == "" {
		return false
	}
	if len(parts) == 1 {
		return true
	}
	if parts[0] == "docker.io" || parts[0] == "index.docker.io" {
		return true
	}
	return !strings.ContainsAny(parts[0], ".:")
}

// UnionKeyring is the kubelet's UnionDockerKeyring: every keyring's
// credentials, in order.
type UnionKeyring []Keyring

func (u UnionKeyring) Lookup(image string) ([]TrackedAuthConfig, bool) {
	var all []TrackedAuthConfig
	for _, k := range u {
		if k == nil {
			continue
		}
		found, _ := k.Lookup(image)
		all = append(all, found...)
	}
	return all, len(all) > 0
}

// ParseSchemelessURL is the kubelet's: a URL without a scheme.
func ParseSchemelessURL(schemelessURL string) (*url.URL, error) {
	parsed, err := url.Parse("https://" + schemelessURL)
	if err != nil {
		return nil, err
	}
	parsed.Scheme = ""
	return parsed, nil
}

// splitURL is the kubelet's SplitURL: the host's dot-separated parts and
// the port.
func splitURL(u *url.URL) ([]string, string) {
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		host, port = u.Host, ""
	}
	return strings.Split(host, "."), port
}

// URLsMatchStr is the kubelet's URLsMatchStr over URLsMatch.
func URLsMatchStr(glob, target string) (bool, error) {
	g, err := ParseSchemelessURL(glob)
	if err != nil {
		return false, err
	}
	t, err := ParseSchemelessURL(target)
	if err != nil {
		return false, err
	}
	return URLsMatch(g, t)
}

// URLsMatch is the kubelet's: the same number of host parts, each matching
// the glob's (a glob per part: *.k8s.io, k8s.*.io, app*.k8s.io), the same
// port, and the glob's path a prefix of the target's. No globs in port or
// path.
func URLsMatch(globURL, targetURL *url.URL) (bool, error) {
	globParts, globPort := splitURL(globURL)
	targetParts, targetPort := splitURL(targetURL)
	if globPort != targetPort {
		return false, nil
	}
	if len(globParts) != len(targetParts) {
		return false, nil
	}
	if !strings.HasPrefix(targetURL.Path, globURL.Path) {
		return false, nil
	}
	for i, part := range globParts {
		matched, err := filepath.Match(part, targetParts[i])
		if err != nil {
			return false, err
		}
		if !matched {
			return false, nil
		}
	}
	return true, nil
}
