package pullmanager

import (
	"testing"

	"github.com/distribution/reference"
)

// TrimImageTagDigest answers what the kubelet's trimImageTagDigest does
// over distribution/reference (which nodelet no longer links into its
// processes): the name as written, without tag and digest; and refuses
// what it refuses.
func TestTrimImageTagDigestMatchesDistributionReference(t *testing.T) {
	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for _, image := range []string{
		"busybox",
		"busybox:1.36",
		"busybox@" + digest,
		"busybox:1.36@" + digest,
		"docker.io/library/busybox:latest",
		"registry.k8s.io/pause:3.10",
		"localhost:5000/a/b:c",
		"localhost:5000/a/b",
		"127.0.0.1:5000/x/y/z:v1@" + digest,
		"gcr.io/project/image_name-x.y:v1",
	} {
		parsed, err := reference.Parse(image)
		if err != nil {
			t.Fatalf("%s: distribution/reference: %v", image, err)
		}
		got, err := TrimImageTagDigest(image)
		if err != nil {
			t.Errorf("TrimImageTagDigest(%q): %v", image, err)
			continue
		}
		if want := parsed.(reference.Named).Name(); got != want {
			t.Errorf("TrimImageTagDigest(%q) = %q, want %q", image, got, want)
		}
	}
	for _, image := range []string{"", "bad image!", "Busybox", "busybox:", "busybox@sha256:short", "a//b", "a/-b", "a_/b"} {
		if _, err := reference.Parse(image); err == nil {
			t.Fatalf("%q: distribution/reference accepts it; not a refusal case", image)
		}
		if got, err := TrimImageTagDigest(image); err == nil {
			t.Errorf("TrimImageTagDigest(%q) = %q, want an error (the kubelet refuses it)", image, got)
		}
	}
}
