package podutil

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// IsExtendedResourceName is k8s.io/kubernetes/pkg/apis/core/v1/helper's
// (not a library): a resource outside the kubernetes.io domain, not a
// quota "requests." name, whose quota name is a qualified name. Device
// plugins register such names only (the kubelet's Register checks it).
func IsExtendedResourceName(name corev1.ResourceName) bool {
	s := string(name)
	native := !strings.Contains(s, "/") || strings.Contains(s, corev1.ResourceDefaultNamespacePrefix)
	if native || strings.HasPrefix(s, corev1.DefaultResourceRequestsPrefix) {
		return false
	}
	return len(validation.IsQualifiedName(fmt.Sprintf("%s%s", corev1.DefaultResourceRequestsPrefix, s))) == 0
}
