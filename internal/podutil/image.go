package podutil

import (
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	corev1 "k8s.io/api/core/v1"
)

// DefaultPullPolicy is the imagePullPolicy kube-apiserver gives a container
// (or an image volume) that names none (SetDefaults_Container over the
// kubelet's parsers.ParseImageName): Always when the image's tag is
// "latest", or when it names neither a tag nor a digest; IfNotPresent
// otherwise, and for a reference that does not parse, whose error the API
// server ignores there.
//
// The reference is parsed with go-containerregistry's name package, which
// the runtime links for pulls anyway, rather than distribution/reference,
// whose grammar is 0.4 MB of regular expressions compiled in every nodelet
// process's initialisers.
func DefaultPullPolicy(image string) corev1.PullPolicy {
	if _, err := name.ParseReference(image, name.WeakValidation); err != nil {
		return corev1.PullIfNotPresent
	}
	base, _, digested := strings.Cut(image, "@")
	tag := ""
	// A colon after the last slash starts the tag; one before it is a
	// registry's port.
	if i := strings.LastIndexByte(base, ':'); i > strings.LastIndexByte(base, '/') {
		tag = base[i+1:]
	}
	if tag == "latest" || (tag == "" && !digested) {
		return corev1.PullAlways
	}
	return corev1.PullIfNotPresent
}
