package status

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodelet/nodelet/internal/podutil"
	"github.com/nodelet/nodelet/schemas"
)

// benchStatusInputs is a typical running pod as status sees it on every
// change: a static Burstable pod with a sidecar-less app container and a
// readiness probe that passed, its verdict, observed state and last status.
func benchStatusInputs() PodInputs {
	started := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p000-bench", Namespace: "nodelet-bench", UID: "bench-uid", Generation: 1,
			Annotations: map[string]string{podutil.AnnotationConfigSource: "file", podutil.AnnotationConfigHash: "bench-uid"}},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyAlways,
			Containers: []corev1.Container{{
				Name: "web", Image: "nodelet.local/busybox:1.35",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")}},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(8080)}}},
			}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
	obs := &schemas.PodObserved{
		UID: "bench-uid", Namespace: pod.Namespace, Name: pod.Name, Generation: 3,
		Sandbox: &schemas.SandboxObserved{ID: "sb", Ready: true, IPs: []string{"10.200.1.7"}, CreatedAt: started},
		Containers: []schemas.ContainerObserved{{
			Name: "web", Kind: schemas.ContainerKindApp, ContainerID: "containerd://c1",
			Image: "nodelet.local/busybox:1.35", ImageID: "sha256:abc",
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(started)}},
		}},
	}
	probes := map[ProbeID]schemas.ProbeResult{{Container: "web", Kind: schemas.ProbeReadiness}: {
		UID: "bench-uid", Container: "web", ContainerID: "containerd://c1", Probe: schemas.ProbeReadiness, Result: schemas.ProbeSuccess, Since: started.Add(time.Second)}}
	in := PodInputs{Pod: pod, Static: true, Verdict: &schemas.AdmissionVerdict{UID: "bench-uid", Admitted: true},
		Observed: obs, Probes: probes, HostIPs: []string{"192.0.2.10"}, Now: started.Add(2 * time.Second)}
	old := ComputePodStatus(in)
	in.Old = &old
	in.Now = in.Now.Add(time.Second)
	return in
}

// BenchmarkComputePodStatus is one status computation of a running,
// ready pod against its previous status (the common case: nothing changed).
func BenchmarkComputePodStatus(b *testing.B) {
	in := benchStatusInputs()
	s := ComputePodStatus(in)
	if s.Phase != corev1.PodRunning || len(s.ContainerStatuses) != 1 || !s.ContainerStatuses[0].Ready {
		b.Fatalf("not a running ready pod: %+v", s)
	}
	b.ReportAllocs()
	for b.Loop() {
		ComputePodStatus(in)
	}
}
