package credentialprovider

import (
	"testing"

	"github.com/distribution/reference"
)

// RepoToPull answers what the kubelet's parsers.ParseImageName
// (distribution/reference's ParseNormalizedNamed, which nodelet no longer
// links into its processes) does, for the names the kubelet accepts and
// refuses.
func TestRepoToPullMatchesDistributionReference(t *testing.T) {
	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for _, image := range []string{
		"busybox",
		"busybox:1.36",
		"busybox@" + digest,
		"busybox:1.36@" + digest,
		"library/busybox",
		"docker.io/busybox",
		"docker.io/library/busybox:latest",
		"index.docker.io/foo/bar:tag",
		"registry.k8s.io/pause:3.10",
		"registry.k8s.io/e2e-test-images/agnhost:2.53",
		"localhost:5000/a/b:c",
		"localhost/a",
		"127.0.0.1:5000/x/y/z@" + digest,
		"nodelet.local/pause:3.10",
		"gcr.io/project/image_name-x.y:v1",
	} {
		want, err := reference.ParseNormalizedNamed(image)
		if err != nil {
			t.Fatalf("%s: distribution/reference: %v", image, err)
		}
		got, err := RepoToPull(image)
		if err != nil {
			t.Errorf("RepoToPull(%q): %v", image, err)
			continue
		}
		if got != want.Name() {
			t.Errorf("RepoToPull(%q) = %q, want %q", image, got, want.Name())
		}
	}
	for _, image := range []string{"", "bad image!", "Busybox", "busybox:", "busybox@sha256:short", ":tag", "a//b", "a/-b", "a__-b", "a_/b"} {
		if _, err := reference.ParseNormalizedNamed(image); err == nil {
			t.Fatalf("%q: distribution/reference accepts it; not a refusal case", image)
		}
		if got, err := RepoToPull(image); err == nil {
			t.Errorf("RepoToPull(%q) = %q, want an error (the kubelet refuses it)", image, got)
		}
	}
}
