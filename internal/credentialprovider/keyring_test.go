package credentialprovider

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ktypes "k8s.io/apimachinery/pkg/types"
)

// The kubelet's URLsMatch cases (keyring_test.go TestURLsMatch) and those
// of matchImages in the CredentialProviderConfig documentation.
func TestURLsMatch(t *testing.T) {
	for _, tc := range []struct {
		glob, target string
		match        bool
	}{
		{"*.kubernetes.io", "prefix.kubernetes.io", true},
		{"prefix.*.io", "prefix.kubernetes.io", true},
		{"prefix.kubernetes.*", "prefix.kubernetes.io", true},
		{"*-good.kubernetes.io", "prefix-good.kubernetes.io", true},
		{"*.kubernetes.io", "kubernetes.io", false},
		{"*.io", "prefix.kubernetes.io", false}, // a glob matches one part only
		{"*.*.io", "prefix.kubernetes.io", true},
		{"*.*.io", "prefix.kubernetes.com", false},
		{"kubernetes.io", "kubernetes.io/foo", true},
		{"kubernetes.io/foo", "kubernetes.io/foo/bar", true},
		{"kubernetes.io/foo", "kubernetes.io/bar", false},
		{"kubernetes.io/foo", "kubernetes.io", false},
		{"kubernetes.io:8080", "kubernetes.io:8080/foo", true},
		{"kubernetes.io:8080", "kubernetes.io/foo", false},
		{"kubernetes.io", "kubernetes.io:8080/foo", false},
		{"127.0.0.1:5000", "127.0.0.1:5000/private/busybox", true},
		{"127.0.0.1:5000", "127.0.0.1:5001/private/busybox", false},
		{"123456789.dkr.ecr.us-east-1.amazonaws.com", "123456789.dkr.ecr.us-east-1.amazonaws.com/app", true},
		{"*.azurecr.io", "team.azurecr.io/app", true},
		{"registry.io:8080/path", "registry.io:8080/path/app", true},
		{"registry.io:8080/path", "registry.io:8080/other/app", false},
	} {
		got, err := URLsMatchStr(tc.glob, tc.target)
		if err != nil {
			t.Fatalf("%s ~ %s: %v", tc.glob, tc.target, err)
		}
		if got != tc.match {
			t.Errorf("URLsMatchStr(%q, %q) = %v, want %v", tc.glob, tc.target, got, tc.match)
		}
	}
}

func dockerSecret(ns, name, uid, cfg string) corev1.Secret {
	return corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: ktypes.UID("uid-" + uid)},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data:       map[string][]byte{corev1.DockerConfigJsonKey: []byte(cfg)},
	}
}

// staticKeyring is a node keyring of fixed node-wide credentials.
type staticKeyring DockerConfig

func (s staticKeyring) Lookup(image string) ([]TrackedAuthConfig, bool) {
	k := &BasicKeyring{}
	k.Add(nil, DockerConfig(s))
	return k.Lookup(image)
}

// Credentials as the kubelet's keyring gives them: the secrets' most
// specific registry first, then the node's; Docker Hub's for short names;
// each tracked with its secret (or nil: node-wide) and hashed.
func TestCredentials(t *testing.T) {
	secrets := []corev1.Secret{
		dockerSecret("ns", "hub", "1", `{"auths":{"https://index.docker.io/v1/":{"username":"hubuser","password":"p1"}}}`),
		dockerSecret("ns", "local", "2", `{"auths":{"127.0.0.1:5000":{"auth":"dXNlcjpwYXNz"},"127.0.0.1:5000/team":{"username":"team","password":"p2"}}}`),
		{ObjectMeta: metav1.ObjectMeta{Name: "opaque"}, Type: corev1.SecretTypeOpaque},
	}
	node := staticKeyring{"127.0.0.1:5000": {Username: "plugin", Password: "pp"}, "*.example.com": {Username: "wild", Password: "w"}}
	for _, tc := range []struct {
		image string
		node  Keyring
		users []string
	}{
		{"busybox", nil, []string{"hubuser"}},
		{"busybox:1.35", nil, []string{"hubuser"}},
		{"docker.io/library/busybox:1", nil, []string{"hubuser"}},
		{"127.0.0.1:5000/team/app:1", nil, []string{"team", "user"}},
		{"127.0.0.1:5000/other/app:1", nil, []string{"user"}},
		{"127.0.0.1:5000/other/app:1", node, []string{"user", "plugin"}},
		{"127.0.0.1:5000/other/app@sha256:" + strings.Repeat("a", 64), node, []string{"user", "plugin"}},
		{"reg.example.com/app", node, []string{"wild"}},
		{"quay.io/x/y", nil, nil},
	} {
		creds, err := Credentials(tc.image, secrets, tc.node)
		if err != nil {
			t.Fatal(err)
		}
		var users []string
		for _, c := range creds {
			users = append(users, c.Username)
			if c.AuthConfigHash == "" {
				t.Errorf("%s: %s has no hash", tc.image, c.Username)
			}
			switch c.Username {
			case "user":
				if c.Password != "pass" {
					t.Errorf("auth field not decoded: %+v", c)
				}
				if c.Source == nil || *c.Source.Secret != (SecretCoordinates{UID: "uid-2", Namespace: "ns", Name: "local"}) {
					t.Errorf("source of %s: %+v", c.Username, c.Source)
				}
			case "plugin", "wild":
				if c.Source != nil {
					t.Errorf("a node credential has a source: %+v", c.Source)
				}
			}
		}
		if !slices.Equal(users, tc.users) {
			t.Errorf("%s: users %v, want %v", tc.image, users, tc.users)
		}
	}
	if _, err := Credentials("x", []corev1.Secret{dockerSecret("ns", "broken", "3", "{")}, nil); err == nil || !strings.Contains(err.Error(), `secret "broken"`) {
		t.Errorf("broken secret: %v", err)
	}
	if _, err := Credentials("bad image!", nil, nil); err == nil {
		t.Error("an invalid image name gave no error")
	}
	// The same credential in two secrets has one hash; another password
	// another.
	a, _ := Credentials("127.0.0.1:5000/x", []corev1.Secret{dockerSecret("a", "s", "a", `{"auths":{"127.0.0.1:5000":{"username":"u","password":"p"}}}`)}, nil)
	b, _ := Credentials("127.0.0.1:5000/x", []corev1.Secret{dockerSecret("b", "t", "b", `{"auths":{"127.0.0.1:5000":{"username":"u","password":"p"}}}`)}, nil)
	c, _ := Credentials("127.0.0.1:5000/x", []corev1.Secret{dockerSecret("b", "t", "b", `{"auths":{"127.0.0.1:5000":{"username":"u","password":"q"}}}`)}, nil)
	if a[0].AuthConfigHash != b[0].AuthConfigHash || a[0].AuthConfigHash == c[0].AuthConfigHash {
		t.Errorf("hashes: %s %s %s", a[0].AuthConfigHash, b[0].AuthConfigHash, c[0].AuthConfigHash)
	}
}
