// Package pullmanager is the kubelet's ensure-secret-pulled-images
// (pkg/kubelet/images/pullmanager): nodelet-runtime records which
// credentials pulled each image, and a pod may use an image already on the
// node without pulling it only when the imagePullCredentialsVerificationPolicy
// lets it, or when the record shows that the pod's credentials (or any
// pod's: node-wide credentials, or none needed) could pull it.
//
// The records are the kubelet's files, in its format (kubelet.config.k8s.io
// v1beta1 ImagePullIntent and ImagePulledRecord): <dir>/pulling/ holds an
// intent per image being pulled, <dir>/pulled/ a record per image ID. They
// are state nodelet cannot rebuild from CRI, so they are files under the
// state directory, never the bus: a wiped bus store must not make a
// private image look preloaded.
package pullmanager

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/nodelet/nodelet/internal/podutil"
)

// The policies, KubeletConfiguration imagePullCredentialsVerificationPolicy.
const (
	// NeverVerify: any pod may use any image on the node.
	NeverVerify = "NeverVerify"
	// NeverVerifyPreloadedImages: images the node agent did not pull may be
	// used by any pod; those it pulled need the credentials (the default).
	NeverVerifyPreloadedImages = "NeverVerifyPreloadedImages"
	// NeverVerifyAllowlistedImages: only images of the allowlist skip
	// verification.
	NeverVerifyAllowlistedImages = "NeverVerifyAllowlistedImages"
	// AlwaysVerify: every image needs the credentials.
	AlwaysVerify = "AlwaysVerify"
)

// Policy decides whether the credentials of a pod must be verified for an
// image on the node (the kubelet's ImagePullPolicyEnforcer). pulledByNode
// says a record or an intent exists for the image.
type Policy func(image string, pulledByNode bool) bool

// NewPolicy is the kubelet's NewImagePullCredentialVerificationPolicy.
func NewPolicy(policy string, allowlist []string) (Policy, error) {
	switch policy {
	case NeverVerify:
		return func(string, bool) bool { return false }, nil
	case NeverVerifyPreloadedImages:
		return func(_ string, pulledByNode bool) bool { return pulledByNode }, nil
	case NeverVerifyAllowlistedImages:
		return newAllowlistPolicy(allowlist)
	case AlwaysVerify:
		return func(string, bool) bool { return true }, nil
	default:
		return nil, fmt.Errorf("unknown image pull credential verification policy: %v", policy)
	}
}

// newAllowlistPolicy is the kubelet's NeverVerifyAllowlistedImages:
// images named exactly, or under a "<prefix>/*", skip verification.
func newAllowlistPolicy(allowlist []string) (Policy, error) {
	exact := sets.New[string]()
	var prefixes []string
	for _, pattern := range allowlist {
		p, wildcard, err := allowlistPattern(pattern)
		if err != nil {
			return nil, err
		}
		if wildcard {
			prefixes = append(prefixes, p)
		} else {
			exact.Insert(p)
		}
	}
	return func(image string, _ bool) bool {
		name, err := TrimImageTagDigest(image)
		if err != nil {
			name = image
		}
		if exact.Has(name) {
			return false
		}
		for _, p := range prefixes {
			if strings.HasPrefix(name, p) {
				return false
			}
		}
		return true
	}, nil
}

// ValidateAllowlist is the kubelet's ValidateAllowlistImagesPatterns.
func ValidateAllowlist(patterns []string) error {
	for _, p := range patterns {
		if _, _, err := allowlistPattern(p); err != nil {
			return err
		}
	}
	return nil
}

// allowlistPattern is the kubelet's getAllowlistImagePattern.
func allowlistPattern(pattern string) (string, bool, error) {
	if pattern != strings.TrimSpace(pattern) {
		return "", false, fmt.Errorf("leading/trailing spaces are not allowed: %s", pattern)
	}
	trimmed := pattern
	wildcard := false
	if strings.HasSuffix(pattern, "/*") {
		wildcard = true
		trimmed = strings.TrimSuffix(trimmed, "*")
	}
	if len(trimmed) == 0 {
		return "", false, fmt.Errorf("the supplied pattern is too short: %s", pattern)
	}
	if strings.ContainsRune(trimmed, '*') {
		return "", false, fmt.Errorf("not a valid wildcard pattern, only patterns ending with '/*' are allowed: %s", pattern)
	}
	if wildcard {
		if len(trimmed) == 1 {
			return "", false, fmt.Errorf("at least registry hostname is required")
		}
		return trimmed, true, nil
	}
	image, err := TrimImageTagDigest(trimmed)
	if err != nil {
		return "", false, fmt.Errorf("failed to parse as an image name: %w", err)
	}
	if trimmed != image {
		return "", false, fmt.Errorf("neither tag nor digest is accepted in an image reference: %s", pattern)
	}
	return trimmed, false, nil
}

// TrimImageTagDigest is the kubelet's trimImageTagDigest: image as written
// (not normalised) without its tag and digest. A digest follows the first
// "@"; a tag is after the last ":" past the last "/" (one before it is a
// registry's port). The reference is validated by podutil.ParseImage, not
// distribution/reference (see there for why).
func TrimImageTagDigest(image string) (string, error) {
	if _, err := podutil.ParseImage(image); err != nil {
		return "", err
	}
	base, _, _ := strings.Cut(image, "@")
	if i := strings.LastIndexByte(base, ':'); i > strings.LastIndexByte(base, '/') {
		base = base[:i]
	}
	return base, nil
}
