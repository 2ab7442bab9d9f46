package podutil

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/kubectl/pkg/util/qos"
)

// QOSClass is the pod's QoS class, the one rule of the node: admission
// (pressure and preemption), the runtime (pod cgroup parent, OOM score
// adjustment, burstable shares) and status (status.qosClass) all ask
// here, so they cannot disagree.
//
// It is the kubelet's GetPodQOS (pkg/apis/core/v1/helper/qos) with the
// gates PodLevelResources and PodLevelResourcesFixKubeletQOSClass at their
// 1.37 defaults (both on): the API's status.qosClass when set (the API
// server computes it at creation, and it is immutable), else computed, and
// when the pod sets pod-level cpu or memory requests or limits
// (spec.resources) those alone decide. k8s.io/kubernetes is not
// importable, so this is k8s.io/kubectl's copy of the same function, over
// k8s.io/component-helpers' resource helpers (IsPodLevelResourcesSet).
// Like the kubelet's, it reads requests and limits as the API server
// defaulted them (a limit without a request is a request too): sources
// applies the same defaults to static pods.
func QOSClass(pod *corev1.Pod) corev1.PodQOSClass {
	return qos.GetPodQOS(pod)
}
