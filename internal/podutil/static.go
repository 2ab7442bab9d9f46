package podutil

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/schemas"
)

// The kubelet's own pod annotations (k8s.io/kubernetes pkg/kubelet/types,
// pod_update.go), declared once for every daemon.
const (
	// AnnotationConfigSource names the source a pod came from: file, http
	// or api (kubetypes.ConfigSourceAnnotationKey).
	AnnotationConfigSource = "kubernetes.io/config.source"
	// AnnotationConfigHash is a static pod's generated UID
	// (kubetypes.ConfigHashAnnotationKey).
	AnnotationConfigHash = "kubernetes.io/config.hash"
	// AnnotationConfigSeen is when the node first saw the pod, RFC 3339
	// (kubetypes.ConfigFirstSeenAnnotationKey).
	AnnotationConfigSeen = "kubernetes.io/config.seen"
	// AnnotationConfigMirror marks a mirror pod in the API
	// (kubetypes.ConfigMirrorAnnotationKey = corev1.MirrorPodAnnotationKey).
	AnnotationConfigMirror = corev1.MirrorPodAnnotationKey
)

// SystemCriticalPriority is the lowest priority of a critical pod
// (scheduling.SystemCriticalPriority: system-cluster-critical;
// system-node-critical is 2000001000).
const SystemCriticalPriority = int32(2000000000)

// IsStaticPod is the kubelet's kubetypes.IsStaticPod: a pod whose
// config.source annotation names a source other than the API server.
func IsStaticPod(pod *corev1.Pod) bool {
	if pod == nil {
		return false
	}
	src, ok := pod.Annotations[AnnotationConfigSource]
	return ok && src != schemas.SourceAPI
}

// IsStaticDesired tells whether a desired pod is static: by its
// config.source annotation as IsStaticPod (nodelet-sources always sets
// it), or, lacking the annotation, by the source that delivered it.
func IsStaticDesired(d *schemas.PodDesired) bool {
	if d == nil || d.Pod == nil {
		return false
	}
	if _, ok := d.Pod.Annotations[AnnotationConfigSource]; ok {
		return IsStaticPod(d.Pod)
	}
	return d.Source == schemas.SourceFile || d.Source == schemas.SourceHTTP
}

// IsMirrorPod is the kubelet's kubetypes.IsMirrorPod: the API's mirror of
// a static pod carries the config.mirror annotation.
func IsMirrorPod(pod *corev1.Pod) bool {
	if pod == nil {
		return false
	}
	_, ok := pod.Annotations[AnnotationConfigMirror]
	return ok
}

// IsCriticalPodBasedOnPriority is the kubelet's: a priority at or above
// system-cluster-critical.
func IsCriticalPodBasedOnPriority(priority int32) bool {
	return priority >= SystemCriticalPriority
}

// IsCriticalPod is the kubelet's kubetypes.IsCriticalPod: static and
// mirror pods, and pods of system-critical priority.
func IsCriticalPod(pod *corev1.Pod) bool {
	if IsStaticPod(pod) || IsMirrorPod(pod) {
		return true
	}
	return pod != nil && pod.Spec.Priority != nil && IsCriticalPodBasedOnPriority(*pod.Spec.Priority)
}

// Ref is how logs and events name a pod: namespace/name, as klog.KObj
// prints it in the kubelet's "pod" key.
func Ref(namespace, name string) string { return namespace + "/" + name }

// PodRef is Ref of pod.
func PodRef(pod *corev1.Pod) string { return Ref(pod.Namespace, pod.Name) }
