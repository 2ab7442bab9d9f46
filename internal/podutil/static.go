package podutil

import corev1 "k8s.io/api/core/v1"

// AnnotationConfigSource is the kubelet's kubernetes.io/config.source: the
// source a pod came from (file, http, api).
const AnnotationConfigSource = "kubernetes.io/config.source"

// IsStaticPod is the kubelet's kubetypes.IsStaticPod: a pod whose
// config.source annotation names a source other than the API server.
func IsStaticPod(pod *corev1.Pod) bool {
	src, ok := pod.Annotations[AnnotationConfigSource]
	return ok && src != "api"
}
