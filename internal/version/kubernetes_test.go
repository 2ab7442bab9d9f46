package version

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/version"
)

// The kubelet version is a valid semantic version of the Kubernetes
// release of the k8s.io/api nodelet is built with, and equal to it for
// version comparisons.
func TestKubelet(t *testing.T) {
	if k := Kubernetes(); k != kubernetesFallback {
		t.Errorf("Kubernetes() = %s from the build's k8s.io/api, want %s (update kubernetesFallback with go.mod)", k, kubernetesFallback)
	}
	v, err := version.ParseSemantic(Kubelet())
	if err != nil {
		t.Fatalf("Kubelet() = %q: %v", Kubelet(), err)
	}
	release := version.MustParseSemantic(Kubernetes())
	if !v.AtLeast(release) || !release.AtLeast(v) {
		t.Errorf("Kubelet() = %s compares unlike %s", v, release)
	}
	if !strings.HasSuffix(Kubelet(), "+nodelet."+strings.TrimPrefix(Version, "v")) {
		t.Errorf("Kubelet() = %s does not carry nodelet's version %s", Kubelet(), Version)
	}
}
