package schemas_test

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/schemas"
)

// benchMessages are the messages every pod start puts on the bus, each as
// big as for a typical one-container static pod.
func benchMessages() map[string]schemas.Message {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	grace := int64(30)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-node-1", Namespace: "default", UID: "0123456789abcdef0123456789abcdef",
			Labels:      map[string]string{"app": "web", "tier": "frontend"},
			Annotations: map[string]string{"kubernetes.io/config.source": "file", "kubernetes.io/config.hash": "0123456789abcdef0123456789abcdef"}},
		Spec: corev1.PodSpec{
			NodeName: "node-1", RestartPolicy: corev1.RestartPolicyAlways, DNSPolicy: corev1.DNSClusterFirst,
			TerminationGracePeriodSeconds: &grace, SchedulerName: "default-scheduler",
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}},
			Containers: []corev1.Container{{
				Name: "web", Image: "nodelet.local/busybox:1.35", Command: []string{"httpd", "-f", "-p", "8080"},
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}},
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")},
					Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")}},
				TerminationMessagePath: "/dev/termination-log", TerminationMessagePolicy: corev1.TerminationMessageReadFile,
				ImagePullPolicy: corev1.PullIfNotPresent,
			}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
	running := corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(at)}}
	return map[string]schemas.Message{
		"PodDesired":       &schemas.PodDesired{Pod: pod, Source: schemas.SourceFile, FirstSeen: at},
		"AdmissionVerdict": &schemas.AdmissionVerdict{UID: string(pod.UID), Namespace: pod.Namespace, Name: pod.Name, Admitted: true, DesiredRevision: 7, DecidedAt: at},
		"PodObserved": &schemas.PodObserved{UID: string(pod.UID), Namespace: pod.Namespace, Name: pod.Name, Generation: 3,
			Sandbox: &schemas.SandboxObserved{ID: "6f1c0e", Ready: true, IPs: []string{"10.88.0.7"}, CreatedAt: at},
			Containers: []schemas.ContainerObserved{{Name: "web", Kind: schemas.ContainerKindApp, ContainerID: "containerd://9a8b7c",
				Image: "nodelet.local/busybox:1.35", ImageID: "sha256:0123", Hash: "1a2b3c", State: running}}},
		"PodStatusRecord": &schemas.PodStatusRecord{UID: string(pod.UID), Namespace: pod.Namespace, Name: pod.Name, Static: true,
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.88.0.7", HostIP: "192.0.2.10", StartTime: &metav1.Time{Time: at},
				QOSClass: corev1.PodQOSBurstable,
				Conditions: []corev1.PodCondition{
					{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(at)},
					{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(at)},
					{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(at)},
					{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(at)}},
				ContainerStatuses: []corev1.ContainerStatus{{Name: "web", Ready: true, State: running, Image: "nodelet.local/busybox:1.35",
					ImageID: "sha256:0123", ContainerID: "containerd://9a8b7c"}}}},
		"Event": &schemas.Event{Component: "runtime", Type: corev1.EventTypeNormal, Reason: "Started", Message: "Started container web", Time: at,
			Object: corev1.ObjectReference{Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, FieldPath: "spec.containers{web}"}},
	}
}

// sortedNames orders the sub-benchmarks.
func sortedNames(ms map[string]schemas.Message) []string {
	var out []string
	for k := range ms {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// BenchmarkEncode is schemas.Encode (message and envelope) per message type.
func BenchmarkEncode(b *testing.B) {
	ms := benchMessages()
	for _, name := range sortedNames(ms) {
		m := ms[name]
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := schemas.Encode("bench", m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDecode is the decode a reader does per message type: envelope
// then data (schemas.DecodeInto, as bus.Watch's Decode does).
func BenchmarkDecode(b *testing.B) {
	fresh := map[string]func() schemas.Message{
		"PodDesired":       func() schemas.Message { return &schemas.PodDesired{} },
		"AdmissionVerdict": func() schemas.Message { return &schemas.AdmissionVerdict{} },
		"PodObserved":      func() schemas.Message { return &schemas.PodObserved{} },
		"PodStatusRecord":  func() schemas.Message { return &schemas.PodStatusRecord{} },
		"Event":            func() schemas.Message { return &schemas.Event{} },
	}
	ms := benchMessages()
	for _, name := range sortedNames(ms) {
		data, err := schemas.Encode("bench", ms[name])
		if err != nil {
			b.Fatal(err)
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				if err := schemas.DecodeInto(data, fresh[name]()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
