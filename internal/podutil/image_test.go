package podutil

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// The cases of sources' TestDefaultsMatchAPIServer, which checks the same
// rule against a real kube-apiserver.
func TestDefaultPullPolicy(t *testing.T) {
	const dig = "@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for image, want := range map[string]corev1.PullPolicy{
		"busybox":                           corev1.PullAlways,
		"busybox:latest":                    corev1.PullAlways,
		"busybox:1.36":                      corev1.PullIfNotPresent,
		"busybox" + dig:                     corev1.PullIfNotPresent,
		"busybox:latest" + dig:              corev1.PullAlways,
		"busybox:1.36" + dig:                corev1.PullIfNotPresent,
		"registry.local:5000/busybox":       corev1.PullAlways,
		"registry.local:5000/busybox:1":     corev1.PullIfNotPresent,
		"registry.local:5000/busybox" + dig: corev1.PullIfNotPresent,
		"docker.io/library/busybox:latest":  corev1.PullAlways,
		"BusyBox":                           corev1.PullIfNotPresent, // does not parse
		"busybox:":                          corev1.PullIfNotPresent, // does not parse
		"":                                  corev1.PullIfNotPresent,
	} {
		if got := DefaultPullPolicy(image); got != want {
			t.Errorf("DefaultPullPolicy(%q) = %s, want %s", image, got, want)
		}
	}
}
