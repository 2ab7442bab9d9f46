package sources

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

const digest = "sha256:" + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// defaultsCases are pods that exercise every default setPodDefaults
// applies; TestDefaultsMatchAPIServer sends each through kube-apiserver.
func defaultsCases() map[string]*corev1.Pod {
	c := func(name, image string) corev1.Container { return corev1.Container{Name: name, Image: image} }
	pods := map[string]*corev1.Pod{
		"minimal": {Spec: corev1.PodSpec{Containers: []corev1.Container{c("c", "busybox")}}},
		"images": {Spec: corev1.PodSpec{Containers: []corev1.Container{
			c("no-tag", "busybox"), c("latest", "busybox:latest"), c("tagged", "busybox:1.36"),
			c("digest", "busybox@"+digest), c("latest-digest", "busybox:latest@"+digest),
			c("registry-port", "localhost:5000/app"), c("registry-port-tag", "localhost:5000/app:v1"),
			c("upper", "BusyBox"), c("explicit", "busybox"),
		}}},
		"network and ports": {Spec: corev1.PodSpec{HostNetwork: true,
			InitContainers: []corev1.Container{{Name: "i", Image: "busybox:1", Ports: []corev1.ContainerPort{{ContainerPort: 9000}}}},
			Containers: []corev1.Container{{Name: "c", Image: "busybox:1", Ports: []corev1.ContainerPort{
				{Name: "http", ContainerPort: 8080}, {ContainerPort: 53, Protocol: corev1.ProtocolUDP}}}}}},
		"probes and hooks": {Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox:1",
			LivenessProbe:  &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromInt32(80)}}},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(80)}}, PeriodSeconds: 3},
			StartupProbe:   &corev1.Probe{ProbeHandler: corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: 9090}}},
			Lifecycle: &corev1.Lifecycle{
				PostStart: &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromString("http"), Path: "/start"}},
				PreStop:   &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}},
			},
		}}}},
		"env and resources": {Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "sidecar", Image: "busybox:1", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")}}}},
			Containers: []corev1.Container{{Name: "c", Image: "busybox:1",
				Env: []corev1.EnvVar{{Name: "NODE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}}},
				Resources: corev1.ResourceRequirements{
					Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("0.0001"), corev1.ResourceMemory: resource.MustParse("128Mi")},
					Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("100Mi")},
				}}}}},
		"volumes": {Spec: corev1.PodSpec{
			Volumes: []corev1.Volume{
				{Name: "nothing"},
				{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var/log"}}},
				{Name: "down", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{
					Items: []corev1.DownwardAPIVolumeFile{{Path: "labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"}}}}}},
				{Name: "proj", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
					{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{Path: "n", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}}}}}},
				{Name: "cm", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"}}}},
				{Name: "img", VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: "busybox:1.36"}}},
			},
			Containers: []corev1.Container{{Name: "c", Image: "busybox:1", VolumeMounts: []corev1.VolumeMount{{Name: "nothing", MountPath: "/n"}}}},
		}},
		"explicit values stay": {Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever, DNSPolicy: corev1.DNSDefault, SchedulerName: "other",
			TerminationGracePeriodSeconds: ptr.To[int64](-5), EnableServiceLinks: ptr.To(false),
			SecurityContext: &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](1000)},
			Containers: []corev1.Container{{Name: "c", Image: "busybox", ImagePullPolicy: corev1.PullNever,
				TerminationMessagePath: "/tmp/t", TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError}},
		}},
	}
	pods["images"].Spec.Containers[8].ImagePullPolicy = corev1.PullIfNotPresent
	return pods
}

func TestSetPodDefaults(t *testing.T) {
	p := defaultsCases()["images"]
	setPodDefaults(p)
	want := map[string]corev1.PullPolicy{
		"no-tag": corev1.PullAlways, "latest": corev1.PullAlways, "tagged": corev1.PullIfNotPresent,
		"digest": corev1.PullIfNotPresent, "latest-digest": corev1.PullAlways,
		"registry-port": corev1.PullAlways, "registry-port-tag": corev1.PullIfNotPresent,
		"upper": corev1.PullIfNotPresent, "explicit": corev1.PullIfNotPresent,
	}
	for _, c := range p.Spec.Containers {
		if c.ImagePullPolicy != want[c.Name] {
			t.Errorf("%s (%s): pull policy %s, want %s", c.Name, c.Image, c.ImagePullPolicy, want[c.Name])
		}
	}
	m := defaultsCases()["minimal"]
	setPodDefaults(m)
	s := m.Spec
	if s.RestartPolicy != corev1.RestartPolicyAlways || s.DNSPolicy != corev1.DNSClusterFirst || *s.TerminationGracePeriodSeconds != 30 ||
		s.SchedulerName != corev1.DefaultSchedulerName || s.SecurityContext == nil || !*s.EnableServiceLinks ||
		s.Containers[0].TerminationMessagePath != "/dev/termination-log" || s.Containers[0].TerminationMessagePolicy != corev1.TerminationMessageReadFile {
		t.Errorf("minimal pod defaults: %+v", s)
	}
	r := defaultsCases()["env and resources"]
	setPodDefaults(r)
	cpu := r.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU]
	if cpu.String() != "1m" || r.Spec.Containers[0].Resources.Requests.Memory().String() != "100Mi" {
		t.Errorf("requests = %v, want cpu 1m (from the limit, rounded up) and memory 100Mi (kept)", r.Spec.Containers[0].Resources.Requests)
	}
}

// TestDefaultsMatchAPIServer creates each case through a real
// kube-apiserver (dry run) and compares the spec it returns with ours. What
// admission plugins add (not defaulting, and not done by the kubelet for
// static pods either) is taken out of the server's answer first: the
// service account, priority and preemption policy, and the not-ready /
// unreachable tolerations.
func TestDefaultsMatchAPIServer(t *testing.T) {
	cp := controlPlane(t)
	ns := cp.Namespace(t)
	admin := cp.AdminClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for name, pod := range defaultsCases() {
		t.Run(name, func(t *testing.T) {
			pod.Name = "defaults-" + strings.ReplaceAll(name, " ", "-")
			pod.Spec.AutomountServiceAccountToken = ptr.To(false)
			sent := pod.DeepCopy()
			server, err := admin.CoreV1().Pods(ns).Create(ctx, sent, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if err != nil {
				t.Fatalf("kube-apiserver refused the pod: %v", err)
			}
			got := server.Spec
			if got.ServiceAccountName == "default" && got.DeprecatedServiceAccount == "default" {
				got.ServiceAccountName, got.DeprecatedServiceAccount = "", ""
			}
			got.Priority, got.PreemptionPolicy = nil, nil
			var tolerations []corev1.Toleration
			for _, tol := range got.Tolerations {
				if tol.TolerationSeconds == nil || *tol.TolerationSeconds != 300 {
					tolerations = append(tolerations, tol)
				}
			}
			got.Tolerations = tolerations

			ours := pod.DeepCopy()
			setPodDefaults(ours)
			if !equality.Semantic.DeepEqual(ours.Spec, got) {
				t.Errorf("defaults differ from kube-apiserver's:\n%s", diffJSON(t, ours.Spec, got))
			}
		})
	}
}

// diffJSON shows the lines where two values' indented JSON differ.
func diffJSON(t *testing.T, ours, server any) string {
	a, err := json.MarshalIndent(ours, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.MarshalIndent(server, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	al, bl := strings.Split(string(a), "\n"), strings.Split(string(b), "\n")
	var out []string
	for i := 0; i < len(al) || i < len(bl); i++ {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y {
			out = append(out, fmt.Sprintf("line %d:\n  ours:   %s\n  server: %s", i+1, x, y))
			if len(out) == 10 {
				break
			}
		}
	}
	return strings.Join(out, "\n") + "\n\nours:\n" + string(a) + "\nserver:\n" + string(b)
}
