package pullmanager

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func TestPolicies(t *testing.T) {
	allow := []string{"reg.io/preloaded", "mirror.io/team/*"}
	for _, tc := range []struct {
		policy       string
		image        string
		pulledByNode bool
		verify       bool
	}{
		{NeverVerify, "reg.io/private:1", true, false},
		{NeverVerifyPreloadedImages, "reg.io/private:1", true, true},
		{NeverVerifyPreloadedImages, "reg.io/private:1", false, false},
		{AlwaysVerify, "reg.io/private:1", false, true},
		{NeverVerifyAllowlistedImages, "reg.io/preloaded:1", true, false},
		{NeverVerifyAllowlistedImages, "reg.io/preloaded@sha256:" + strings.Repeat("a", 64), false, false},
		{NeverVerifyAllowlistedImages, "reg.io/preloaded/sub:1", false, true},
		{NeverVerifyAllowlistedImages, "mirror.io/team/a/b:1", false, false},
		{NeverVerifyAllowlistedImages, "mirror.io/other:1", false, true},
	} {
		p, err := NewPolicy(tc.policy, allow)
		if err != nil {
			t.Fatal(err)
		}
		if got := p(tc.image, tc.pulledByNode); got != tc.verify {
			t.Errorf("%s %s pulledByNode=%v: verify %v, want %v", tc.policy, tc.image, tc.pulledByNode, got, tc.verify)
		}
	}
	if _, err := NewPolicy("Sometimes", nil); err == nil || !strings.Contains(err.Error(), "unknown image pull credential verification policy: Sometimes") {
		t.Errorf("unknown policy: %v", err)
	}
	for pattern, errContains := range map[string]string{
		" reg.io/x":     "leading/trailing spaces are not allowed",
		"reg.io/x:1":    "neither tag nor digest is accepted",
		"reg.io/*/x":    "only patterns ending with '/*' are allowed",
		"/*":            "at least registry hostname is required",
		"reg.io/UPPER!": "failed to parse as an image name",
	} {
		if err := ValidateAllowlist([]string{pattern}); err == nil || !strings.Contains(err.Error(), errContains) {
			t.Errorf("%q: %v, want %q", pattern, err, errContains)
		}
	}
}

func secret(ns, name, hash string) Secret {
	return Secret{UID: "uid-" + ns + "-" + name, Namespace: ns, Name: name, CredentialHash: hash}
}

func podCreds(s ...Secret) GetPodCredentials {
	return func() ([]Secret, *ServiceAccount, error) { return s, nil, nil }
}

func podSA(sa ServiceAccount) GetPodCredentials {
	return func() ([]Secret, *ServiceAccount, error) { return nil, &sa, nil }
}

// The kubelet's decision on an image on the node, for the pods' credentials
// against what the records say pulled it.
func TestMustAttemptImagePull(t *testing.T) {
	const img, ref = "reg.io/private:1", "sha256:img"
	a := secret("a", "regcred", "hash-a")
	sa := ServiceAccount{UID: "uid-1", Namespace: "a", Name: "puller"}
	for _, tc := range []struct {
		name   string
		policy string
		setup  func(m *Manager)
		pod    GetPodCredentials
		pull   bool
	}{
		{"preloaded: no record", NeverVerifyPreloadedImages, func(*Manager) {}, podCreds(), false},
		{"preloaded under AlwaysVerify", AlwaysVerify, func(*Manager) {}, podCreds(), true},
		{"pulled with a's secret, pod of b without one", NeverVerifyPreloadedImages, pulled(img, ref, &Credentials{KubernetesSecrets: []Secret{a}}), podCreds(), true},
		{"pulled with a's secret, same secret", NeverVerifyPreloadedImages, pulled(img, ref, &Credentials{KubernetesSecrets: []Secret{a}}), podCreds(a), false},
		{"pulled with a's secret, another tag", NeverVerifyPreloadedImages, pulled(img, ref, &Credentials{KubernetesSecrets: []Secret{a}}), podCreds(a), false},
		{"pulled with a's secret, b's secret with the same credential", NeverVerifyPreloadedImages, pulled(img, ref, &Credentials{KubernetesSecrets: []Secret{a}}), podCreds(secret("b", "other", "hash-a")), false},
		{"pulled with a's secret, b's secret with another credential", NeverVerifyPreloadedImages, pulled(img, ref, &Credentials{KubernetesSecrets: []Secret{a}}), podCreds(secret("b", "other", "hash-b")), true},
		{"pulled with a's secret, a's secret rotated", NeverVerifyPreloadedImages, pulled(img, ref, &Credentials{KubernetesSecrets: []Secret{a}}), podCreds(secret("a", "regcred", "hash-new")), false},
		{"pulled with a's secret, NeverVerify", NeverVerify, pulled(img, ref, &Credentials{KubernetesSecrets: []Secret{a}}), podCreds(), false},
		{"pulled node-wide", NeverVerifyPreloadedImages, pulled(img, ref, &Credentials{NodePodsAccessible: true}), podCreds(), false},
		{"pulled, unknown credentials", NeverVerifyPreloadedImages, pulled(img, ref, nil), podCreds(a), true},
		{"being pulled", NeverVerifyPreloadedImages, func(m *Manager) { _ = m.RecordPullIntent(img) }, podCreds(), true},
		{"pod credentials fail", NeverVerifyPreloadedImages, pulled(img, ref, &Credentials{KubernetesSecrets: []Secret{a}}), func() ([]Secret, *ServiceAccount, error) { return nil, nil, errors.New("no") }, true},
		{"pulled with sa's token, same service account", NeverVerifyPreloadedImages, pulled(img, ref, &Credentials{KubernetesServiceAccounts: []ServiceAccount{sa}}), podSA(sa), false},
		{"pulled with sa's token, same name, another UID", NeverVerifyPreloadedImages, pulled(img, ref, &Credentials{KubernetesServiceAccounts: []ServiceAccount{sa}}), podSA(ServiceAccount{UID: "uid-2", Namespace: "a", Name: "puller"}), true},
		{"pulled with sa's token, pod without a service account token", NeverVerifyPreloadedImages, pulled(img, ref, &Credentials{KubernetesServiceAccounts: []ServiceAccount{sa}}), podCreds(a), true},
		{"pulled with a's secret then sa's token, sa", NeverVerifyPreloadedImages, func(m *Manager) {
			pulled(img, ref, &Credentials{KubernetesSecrets: []Secret{a}})(m)
			pulled(img, ref, &Credentials{KubernetesServiceAccounts: []ServiceAccount{sa}})(m)
		}, podSA(sa), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, _ := NewPolicy(tc.policy, nil)
			m, err := New(context.Background(), t.TempDir(), p, nil, discard())
			if err != nil {
				t.Fatal(err)
			}
			tc.setup(m)
			image := img
			if strings.Contains(tc.name, "another tag") {
				image = "reg.io/private:2"
			}
			pull, _ := m.MustAttemptImagePull(image, ref, tc.pod)
			if pull != tc.pull {
				t.Fatalf("pull %v, want %v", pull, tc.pull)
			}
		})
	}
}

func pulled(image, ref string, creds *Credentials) func(*Manager) {
	return func(m *Manager) {
		if err := m.RecordPullIntent(image); err != nil {
			panic(err)
		}
		m.RecordImagePulled(image, ref, creds)
	}
}

type images []*runtimeapi.Image

func (i images) ListImages(context.Context, *runtimeapi.ImageFilter) ([]*runtimeapi.Image, error) {
	return i, nil
}

// The records are the kubelet's files; an intent left by a killed runtime
// for an image CRI has becomes a record that makes every pod verify.
func TestRecordsSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	p, _ := NewPolicy(NeverVerifyPreloadedImages, nil)
	m, _ := New(context.Background(), dir, p, nil, discard())
	a := secret("a", "regcred", "hash-a")
	pulled("reg.io/private:1", "sha256:one", &Credentials{KubernetesSecrets: []Secret{a}})(m)
	pulled("reg.io/private:1", "sha256:one", &Credentials{KubernetesSecrets: []Secret{secret("b", "x", "hash-b")}})(m)
	_ = m.RecordPullIntent("reg.io/killed:1") // killed mid-pull
	b, err := os.ReadFile(filepath.Join(dir, "pulled", cacheFilename("sha256:one")))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"apiVersion":"kubelet.config.k8s.io/v1beta1"`, `"kind":"ImagePulledRecord"`, `"reg.io/private":{"kubernetesSecrets":[{"uid":"uid-a-regcred","namespace":"a","name":"regcred","credentialHash":"hash-a"},{"uid":"uid-b-x"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("record %s lacks %s", b, want)
		}
	}

	m2, _ := New(context.Background(), dir, p, images{{Id: "sha256:killed", RepoTags: []string{"reg.io/killed:1"}}}, discard())
	if pull, _ := m2.MustAttemptImagePull("reg.io/private:1", "sha256:one", podCreds(secret("b", "x", "hash-b"))); pull {
		t.Error("b's recorded secret must not pull after a restart")
	}
	if pull, _ := m2.MustAttemptImagePull("reg.io/killed:1", "sha256:killed", podCreds(a)); !pull {
		t.Error("an image whose pull was interrupted must be verified")
	}
	if ok, _ := m2.records.intentExists("reg.io/killed:1"); ok {
		t.Error("the intent was not turned into a record")
	}
}

// After an image garbage collection, the records of images that are gone
// go too, unless written since it began (the kubelet's
// PruneUnknownRecords as its post-GC hook).
func TestPruneUnknownRecords(t *testing.T) {
	p, _ := NewPolicy(NeverVerifyPreloadedImages, nil)
	dir := t.TempDir()
	m, err := New(context.Background(), dir, p, nil, discard())
	if err != nil {
		t.Fatal(err)
	}
	creds := &Credentials{KubernetesSecrets: []Secret{secret("a", "regcred", "hash-a")}}
	pulled("reg.io/kept:1", "sha256:kept", creds)(m)
	pulled("reg.io/gone:1", "sha256:gone", creds)(m)
	gcStart := time.Now().Add(time.Second) // records are stamped in seconds
	m.PruneUnknownRecords([]string{"sha256:kept"}, gcStart)
	for ref, want := range map[string]bool{"sha256:kept": true, "sha256:gone": false} {
		if _, exists, err := m.records.getPulled(ref); err != nil || exists != want {
			t.Errorf("record of %s: exists %v (err %v), want %v", ref, exists, err, want)
		}
	}
	// A record written after the collection began stays, in the list of
	// images left or not.
	pulled("reg.io/new:1", "sha256:new", creds)(m)
	m.PruneUnknownRecords(nil, time.Now().Add(-time.Hour))
	if _, exists, _ := m.records.getPulled("sha256:new"); !exists {
		t.Error("a record newer than the collection was pruned")
	}
}
