package version

import (
	"os"
	"regexp"
	"strings"
	"testing"

	utilversion "k8s.io/apimachinery/pkg/util/version"
)

// TestKubernetesIsTheModules: Kubernetes is the release of the k8s.io
// modules go.mod requires (k8s.io/api v0.X.Y is Kubernetes v1.X.Y).
func TestKubernetesIsTheModules(t *testing.T) {
	b, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*k8s\.io/api (v0\.\d+\.\d+)\s*$`).FindSubmatch(b)
	if m == nil {
		t.Fatal("go.mod requires no k8s.io/api")
	}
	if want := "v1." + strings.TrimPrefix(string(m[1]), "v0."); want != Kubernetes {
		t.Fatalf("Kubernetes = %s, but go.mod requires k8s.io/api %s (Kubernetes %s)", Kubernetes, m[1], want)
	}
}

// TestKubelet: the kubelet version parses as kubeadm's GetKubeletVersion
// parses `kubelet --version`, with Kubernetes' major and minor.
func TestKubelet(t *testing.T) {
	// kubeadm's preflight GetKubeletVersion (cmd/kubeadm/app/preflight/utils.go).
	kubeadm := regexp.MustCompile(`^\s*Kubernetes v((0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)([-\w.+]*)?)\s*$`)
	k8s := utilversion.MustParseSemantic(Kubernetes)
	defer func(v string) { Version = v }(Version)
	for _, tc := range []struct{ version, want string }{
		{"v0.1.0-dev", Kubernetes + "+nodelet.v0.1.0-dev"},
		{"v0.2.0+abc/def", Kubernetes + "+nodelet.v0.2.0-abc-def"},
		{"", Kubernetes},
	} {
		Version = tc.version
		got := Kubelet()
		if got != tc.want {
			t.Errorf("Version %q: Kubelet() = %q, want %q", tc.version, got, tc.want)
		}
		m := kubeadm.FindStringSubmatch("Kubernetes " + got)
		if m == nil {
			t.Fatalf("kubeadm cannot parse %q", "Kubernetes "+got)
		}
		v, err := utilversion.ParseSemantic(m[1])
		if err != nil {
			t.Fatalf("%s: %v", got, err)
		}
		if v.Major() != k8s.Major() || v.Minor() != k8s.Minor() || v.Patch() != k8s.Patch() || v.LessThan(k8s) {
			t.Errorf("%s is not Kubernetes %s", v, k8s)
		}
	}
}
