package runtime

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/internal/pullmanager"
	"github.com/nodelet/nodelet/internal/testenv"
	"github.com/nodelet/nodelet/schemas"
)

// providerName is the plugin built from testdata/test-credential-provider.
const providerName = "test-credential-provider"

// buildProvider builds the test's credential-provider plugin into a bin
// dir and writes a CredentialProviderConfig naming it for registry, with
// its username as an argument and its password in its environment, as a
// node's operator would. It returns the config file, the bin dir and the
// file where the plugin notes each run.
func buildProvider(t *testing.T, registry string, extra ...string) (cfgFile, binDir, calls string) {
	t.Helper()
	binDir = t.TempDir()
	src, err := filepath.Abs(filepath.Join("testdata", providerName))
	if err != nil {
		t.Fatal(err)
	}
	if err := testenv.BuildStatic(binDir, src); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	calls = filepath.Join(dir, "calls")
	cfgFile = filepath.Join(dir, "credential-providers.yaml")
	cfg := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1
kind: CredentialProviderConfig
providers:
- name: %s
  apiVersion: credentialprovider.kubelet.k8s.io/v1
  matchImages: [%q]
  defaultCacheDuration: 1m
  args: [--user, %s]
  env:
  - {name: REG_PASSWORD, value: %s}
  - {name: CALLS_FILE, value: %s}
`, providerName, registry, regUser, regPassword, calls) + strings.Join(extra, "")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return cfgFile, binDir, calls
}

func pluginRuns(t *testing.T, calls string) []string {
	t.Helper()
	b, err := os.ReadFile(calls)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.FieldsFunc(string(b), func(r rune) bool { return r == '\n' })
}

// A private image is pulled with the credentials of an exec
// credential-provider plugin (the image's registry in its matchImages),
// and the plugin's answer is cached by its cacheKeyType: a second image of
// the same registry does not run it again. A plugin's credentials are the
// node's (the kubelet records such a pull as NodePodsAccessible), so a pod
// of another namespace without any secret uses the image from the node.
func TestCredentialProviderPlugin(t *testing.T) {
	h := newHarness(t, harnessOptions{noStart: true})
	reg := startRegistry(t, h)
	cfgFile, binDir, calls := buildProvider(t, reg.host)
	h.cfg.Runtime.ImageCredentialProviderConfig, h.cfg.Runtime.ImageCredentialProviderBinDir = cfgFile, binDir
	h.start(nil)
	img := reg.push(t, "private/plugin:1")

	first := imagePod("plugin-first", img, corev1.PullIfNotPresent, "exec sleep 3600")
	h.run(first)
	h.waitObserved(first, 2*time.Minute, "running", func(o *schemas.PodObserved) bool { return running(o, "app") })
	if n := reg.pullsOf("private/plugin:1"); n != 1 {
		t.Fatalf("%d pulls, want 1", n)
	}
	if runs := pluginRuns(t, calls); len(runs) != 1 || runs[0] != reg.host+"/private/plugin" {
		t.Fatalf("plugin runs %v, want one for %s/private/plugin", runs, reg.host)
	}

	// cacheKeyType Registry: the answer serves every image of the registry.
	img2 := reg.push(t, "private/plugin2:1")
	second := imagePod("plugin-second", img2, corev1.PullIfNotPresent, "exec sleep 3600")
	h.run(second)
	h.waitObserved(second, 2*time.Minute, "running", func(o *schemas.PodObserved) bool { return running(o, "app") })
	if n := reg.pullsOf("private/plugin2:1"); n != 1 {
		t.Fatalf("%d pulls of the second image, want 1", n)
	}
	if runs := pluginRuns(t, calls); len(runs) != 1 {
		t.Fatalf("plugin runs %v: the Registry-keyed answer was not cached", runs)
	}

	other := imagePod("plugin-other-ns", img, corev1.PullNever, "exec sleep 3600")
	other.Namespace = "other"
	h.run(other)
	h.waitObserved(other, 2*time.Minute, "running", func(o *schemas.PodObserved) bool { return running(o, "app") })
	if ev := h.events.await(t, other.UID, "Pulled", 1); !strings.Contains(ev[0].Message, "already present on machine and can be accessed by the pod") {
		t.Fatalf("Pulled event %q", ev[0].Message)
	}
	if n := reg.pullsOf("private/plugin:1"); n != 1 {
		t.Fatalf("%d pulls, want still 1", n)
	}
}

// regcredSecret is a .dockerconfigjson secret for the test registry.
func regcredSecret(host, password string) *corev1.Secret {
	cfg, _ := json.Marshal(map[string]any{"auths": map[string]any{host: map[string]string{
		"auth": base64.StdEncoding.EncodeToString([]byte(regUser + ":" + password)),
	}}})
	return &corev1.Secret{Type: corev1.SecretTypeDockerConfigJson, Data: map[string][]byte{corev1.DockerConfigJsonKey: cfg}}
}

// Ensure-secret-pulled-images under the default policy
// (NeverVerifyPreloadedImages): an image pulled with team-a's pull secret
// is on the node, yet a pod of team-b without credentials cannot use it —
// with IfNotPresent it must pull (and the registry refuses it), with Never
// it is told the image is not present, as the kubelet says it — while a
// team-b secret holding the same credential lets a pod use it without a
// pull. Under NeverVerify any pod uses it.
func TestEnsureSecretPulledImages(t *testing.T) {
	h := newHarness(t, harnessOptions{noStart: true})
	reg := startRegistry(t, h)
	objects := StaticObjects{Secrets: map[string]*corev1.Secret{
		"team-a/regcred": regcredSecret(reg.host, regPassword),
		"team-b/copy":    regcredSecret(reg.host, regPassword),
		"team-b/wrong":   regcredSecret(reg.host, "guess"),
	}}
	withObjects := func(o *Options) { o.Objects = objects }
	h.start(withObjects)
	img := reg.push(t, "private/tenant:1")
	inNamespace := func(name, ns string, policy corev1.PullPolicy, secret string) *corev1.Pod {
		pod := imagePod(name, img, policy, "exec sleep 3600")
		pod.Namespace = ns
		if secret != "" {
			pod.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: secret}}
		}
		return pod
	}

	owner := inNamespace("owner", "team-a", corev1.PullIfNotPresent, "regcred")
	h.run(owner)
	h.waitObserved(owner, 2*time.Minute, "running", func(o *schemas.PodObserved) bool { return running(o, "app") })
	if n := reg.pullsOf("private/tenant:1"); n != 1 {
		t.Fatalf("%d pulls, want 1", n)
	}
	records, _ := filepath.Glob(filepath.Join(h.cfg.Node.StateDir, "image_manager", "pulled", "sha256-*"))
	if len(records) != 1 {
		t.Fatalf("pulled records %v, want 1", records)
	}

	ifNotPresent := inNamespace("no-creds", "team-b", corev1.PullIfNotPresent, "")
	h.run(ifNotPresent)
	o := h.waitSeen(ifNotPresent, time.Minute, "ErrImagePull", func(o *schemas.PodObserved) bool {
		return waitingReason(o, "app") == reasonErrImagePull
	})
	t.Logf("team-b without credentials, IfNotPresent: %s", container(o, "app").State.Waiting.Message)
	h.events.await(t, ifNotPresent.UID, "Pulling", 1)

	never := inNamespace("no-creds-never", "team-b", corev1.PullNever, "")
	h.run(never)
	o = h.waitObserved(never, time.Minute, "ErrImageNeverPull", func(o *schemas.PodObserved) bool {
		return waitingReason(o, "app") == reasonErrImageNeverPull
	})
	if msg := container(o, "app").State.Waiting.Message; msg != fmt.Sprintf("Container image %q is not present with pull policy of Never", img) {
		t.Fatalf("message %q", msg)
	}

	wrong := inNamespace("wrong-creds", "team-b", corev1.PullNever, "wrong")
	h.run(wrong)
	h.waitObserved(wrong, time.Minute, "ErrImageNeverPull", func(o *schemas.PodObserved) bool {
		return waitingReason(o, "app") == reasonErrImageNeverPull
	})

	copied := inNamespace("same-credential", "team-b", corev1.PullNever, "copy")
	h.run(copied)
	h.waitObserved(copied, 2*time.Minute, "running", func(o *schemas.PodObserved) bool { return running(o, "app") })
	if n := reg.pullsOf("private/tenant:1"); n != 1 {
		t.Fatalf("%d pulls, want still 1", n)
	}

	for _, p := range []*corev1.Pod{ifNotPresent, never, wrong} {
		h.remove(p)
	}
	h.stop()
	h.cfg.Runtime.ImagePullCredentialsVerificationPolicy = pullmanager.NeverVerify
	h.start(withObjects)
	anyone := inNamespace("never-verify", "team-b", corev1.PullNever, "")
	h.run(anyone)
	h.waitObserved(anyone, 2*time.Minute, "running under NeverVerify", func(o *schemas.PodObserved) bool { return running(o, "app") })
}

// A credential-provider configuration the kubelet would refuse stops
// nodelet-runtime with an error naming the key.
func TestImageCredentialsConfigErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		config, binDir, errContains string
	}{
		{bad, dir, "at least 1 item in plugins is required"},
		{filepath.Join(dir, "absent.yaml"), dir, "unable to access path"},
		{bad, filepath.Join(dir, "absent"), "plugin binary directory " + filepath.Join(dir, "absent") + " did not exist"},
	} {
		cfg := config.Defaults()
		cfg.Node.StateDir = t.TempDir()
		cfg.Runtime.ImageCredentialProviderConfig, cfg.Runtime.ImageCredentialProviderBinDir = tc.config, tc.binDir
		_, _, err := imageCredentials(cfg, nil, nil, nil)
		if err == nil || !strings.Contains(err.Error(), "runtime.imageCredentialProviderConfig: Failed to register CRI auth plugins") ||
			!strings.Contains(err.Error(), tc.errContains) {
			t.Errorf("%s: %v, want %q", tc.config, err, tc.errContains)
		}
	}
}
