// Package version is nodelet's version, stamped at build time with
// -ldflags "-X github.com/nodelet/nodelet/internal/version.Version=...",
// and the Kubernetes version of the kubelet it stands in for.
package version

import "strings"

// Version of nodelet; "v0.1.0-dev" for untagged builds.
var Version = "v0.1.0-dev"

// Kubernetes is the version of the kubelet nodelet does the job of: the
// Kubernetes release of the k8s.io modules it is built with (k8s.io/api
// v0.37.2 is Kubernetes v1.37.2; a test holds the two together), whose
// flags, KubeletConfiguration and API nodelet follows.
const Kubernetes = "v1.37.2"

// Kubelet is the version nodelet gives where a kubelet gives its own:
// `kubelet --version` ("Kubernetes <Kubelet()>", which kubeadm's
// KubeletVersionCheck parses and holds to its version skew) and the Node's
// status.nodeInfo.kubeletVersion. It is Kubernetes with nodelet's version
// as semver build metadata, e.g. v1.37.2+nodelet.v0.1.0-dev, as
// distributions mark their kubelets (v1.37.2+k3s1): build metadata changes
// no version comparison, and the Node still says what runs on it.
func Kubelet() string {
	meta := strings.Map(func(r rune) rune {
		switch {
		case r >= '0' && r <= '9', r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r == '-', r == '.':
			return r
		}
		return '-'
	}, Version)
	meta = strings.Trim(strings.ReplaceAll(meta, "..", "."), ".")
	if meta == "" {
		return Kubernetes
	}
	return Kubernetes + "+nodelet." + meta
}
