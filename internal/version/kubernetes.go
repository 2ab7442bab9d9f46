package version

import (
	"runtime/debug"
	"strings"
	"sync"
)

// kubernetesFallback is the Kubernetes release of the k8s.io/api in go.mod,
// for binaries built without module information.
const kubernetesFallback = "v1.37.2"

// Kubernetes is the Kubernetes release whose node API nodelet implements:
// that of the k8s.io/api it is built with (v0.37.2 is Kubernetes v1.37.2).
var Kubernetes = sync.OnceValue(func() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "k8s.io/api" && strings.HasPrefix(d.Version, "v0.") {
				return "v1." + strings.TrimPrefix(d.Version, "v0.")
			}
		}
	}
	return kubernetesFallback
})

// Kubelet is the version nodelet gives where the kubelet gives its own —
// the Node's status.nodeInfo.kubeletVersion and `nodelet kubelet
// --version` — as distributions do (v1.30.2+k3s1): the Kubernetes release
// it implements, so that version-skew checks (kubeadm's KubeletVersion
// preflight, the API server's and the e2e suite's) see a kubelet of that
// release, with nodelet's own version as semver build metadata, which
// comparisons ignore: v1.37.2+nodelet.0.1.0-dev.
func Kubelet() string {
	return Kubernetes() + "+nodelet." + strings.TrimPrefix(Version, "v")
}
