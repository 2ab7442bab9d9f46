package podutil

import (
	"fmt"
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

// ParseImage parses an image reference as the kubelet's image parsing
// (distribution/reference) accepts it, without distribution/reference:
// that package's grammar is regular expressions compiled in the
// initialisers of every process that links it (0.2 MiB of live heap each,
// in every nodelet process, as they are one executable). go-containerregistry's
// name package, weakly validating, checks the registry, tag and digest;
// the path's components are checked here against distribution's grammar,
// which name accepts more of (empty components, separators at either end).
func ParseImage(image string) (name.Reference, error) {
	ref, err := name.ParseReference(image, name.WeakValidation)
	if err != nil {
		return nil, err
	}
	for _, c := range strings.Split(ref.Context().RepositoryStr(), "/") {
		if !pathComponent(c) {
			return nil, fmt.Errorf("invalid reference format: repository name component %q of %q", c, image)
		}
	}
	return ref, nil
}

// pathComponent is distribution/reference's path-component:
// [a-z0-9]+ runs joined by ".", "_", "__" or a run of "-".
func pathComponent(c string) bool {
	i := 0
	for {
		j := i
		for j < len(c) && (c[j] >= 'a' && c[j] <= 'z' || c[j] >= '0' && c[j] <= '9') {
			j++
		}
		if j == i {
			return false
		}
		if j == len(c) {
			return true
		}
		switch c[j] {
		case '.':
			j++
		case '_':
			j++
			if j < len(c) && c[j] == '_' {
				j++
			}
		case '-':
			for j < len(c) && c[j] == '-' {
				j++
			}
		default:
			return false
		}
		i = j
	}
}
