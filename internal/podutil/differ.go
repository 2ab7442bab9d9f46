package podutil

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
)

// localAnnotations are the kubelet's own; a change to them is no change of
// the pod.
var localAnnotations = []string{AnnotationConfigSource, AnnotationConfigMirror, AnnotationConfigSeen}

// IsLocalAnnotation says whether the kubelet sets annotation k itself.
func IsLocalAnnotation(k string) bool { return slices.Contains(localAnnotations, k) }

// PodsDifferSemantically is the kubelet's test (pkg/kubelet/config
// podsDifferSemantically) of whether a pod changed in a way its worker
// must act on: spec, labels, deletion, annotations other than the local
// ones. A change of status alone is the kubelet's RECONCILE, not an
// UPDATE. It compares with equality.Semantic rather than reflect.DeepEqual:
// pods that went through the bus's JSON have empty maps and slices as nil
// and quantities in their canonical form.
func PodsDifferSemantically(existing, ref *corev1.Pod) bool {
	eq := equality.Semantic.DeepEqual
	return !(eq(existing.Spec, ref.Spec) &&
		eq(existing.Labels, ref.Labels) &&
		eq(existing.DeletionTimestamp, ref.DeletionTimestamp) &&
		eq(existing.DeletionGracePeriodSeconds, ref.DeletionGracePeriodSeconds) &&
		annotationsEqual(existing.Annotations, ref.Annotations))
}

func annotationsEqual(existing, candidate map[string]string) bool {
	for k, v := range candidate {
		if IsLocalAnnotation(k) {
			continue
		}
		if ev, ok := existing[k]; !ok || ev != v {
			return false
		}
	}
	for k := range existing {
		if IsLocalAnnotation(k) {
			continue
		}
		if _, ok := candidate[k]; !ok {
			return false
		}
	}
	return true
}

// IsTerminalPhase says whether a pod in phase p has finished for good
// (Succeeded or Failed): it never runs again.
func IsTerminalPhase(p corev1.PodPhase) bool {
	return p == corev1.PodSucceeded || p == corev1.PodFailed
}
