package sources

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
)

func TestValidatePod(t *testing.T) {
	tests := []struct {
		name  string
		mut   func(*corev1.Pod)
		field string // "" = valid; else the field of the first error
	}{
		{"valid", func(*corev1.Pod) {}, ""},
		{"no containers", func(p *corev1.Pod) { p.Spec.Containers = nil }, "spec.containers"},
		{"bad pod name", func(p *corev1.Pod) { p.Name = "Web_1" }, "metadata.name"},
		{"bad namespace", func(p *corev1.Pod) { p.Namespace = "Kube System" }, "metadata.namespace"},
		{"bad label", func(p *corev1.Pod) { p.Labels = map[string]string{"a b": "c"} }, "metadata.labels"},
		{"bad uid", func(p *corev1.Pod) { p.UID = "a/b" }, "metadata.uid"},
		{"no container name", func(p *corev1.Pod) { p.Spec.Containers[0].Name = "" }, "spec.containers[0].name"},
		{"invalid container name", func(p *corev1.Pod) { p.Spec.Containers[0].Name = "Main_Container" }, "spec.containers[0].name"},
		{"duplicate container name", func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{p.Spec.Containers[0]}
		}, "spec.containers[0].name"},
		{"no image", func(p *corev1.Pod) { p.Spec.Containers[0].Image = "" }, "spec.containers[0].image"},
		{"bad pull policy", func(p *corev1.Pod) { p.Spec.Containers[0].ImagePullPolicy = "Sometimes" }, "spec.containers[0].imagePullPolicy"},
		{"bad restart policy", func(p *corev1.Pod) { p.Spec.RestartPolicy = "Sometimes" }, "spec.restartPolicy"},
		{"bad dns policy", func(p *corev1.Pod) { p.Spec.DNSPolicy = "Google" }, "spec.dnsPolicy"},
		{"dns none without servers", func(p *corev1.Pod) { p.Spec.DNSPolicy = corev1.DNSNone }, "spec.dnsConfig.nameservers"},
		{"hostnameOverride", func(p *corev1.Pod) { p.Spec.HostnameOverride = ptr.To("override.example.host") }, ""},
		{"hostnameOverride not a DNS subdomain", func(p *corev1.Pod) { p.Spec.HostnameOverride = ptr.To("Not-RFC1123") }, "spec.hostnameOverride"},
		{"hostnameOverride with setHostnameAsFQDN", func(p *corev1.Pod) {
			p.Spec.HostnameOverride, p.Spec.SetHostnameAsFQDN = ptr.To("override-host"), ptr.To(true)
		}, "spec.hostnameOverride"},
		{"hostnameOverride with hostNetwork", func(p *corev1.Pod) {
			p.Spec.HostnameOverride, p.Spec.HostNetwork = ptr.To("override-host"), true
		}, "spec.hostnameOverride"},
		{"negative quantity", func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("-1")}
		}, "spec.containers[0].resources.limits[cpu]"},
		{"request above limit", func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources = corev1.ResourceRequirements{
				Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
				Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")},
			}
		}, "spec.containers[0].resources.requests[memory]"},
		{"bad resource name", func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"not a name!": resource.MustParse("1")}
		}, "spec.containers[0].resources.limits[not a name!]"},
		{"port out of range", func(p *corev1.Pod) {
			p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 70000, Protocol: corev1.ProtocolTCP}}
		}, "spec.containers[0].ports[0].containerPort"},
		{"bad protocol", func(p *corev1.Pod) {
			p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 80, Protocol: "ICMP"}}
		}, "spec.containers[0].ports[0].protocol"},
		{"duplicate port name", func(p *corev1.Pod) {
			p.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: 80, Protocol: "TCP"}, {Name: "http", ContainerPort: 81, Protocol: "TCP"}}
		}, "spec.containers[0].ports[1].name"},
		{"env without name", func(p *corev1.Pod) { p.Spec.Containers[0].Env = []corev1.EnvVar{{Value: "x"}} }, "spec.containers[0].env[0].name"},
		{"env name with =", func(p *corev1.Pod) { p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "A=B"}} }, "spec.containers[0].env[0].name"},
		{"mount of unknown volume", func(p *corev1.Pod) {
			p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
		}, "spec.containers[0].volumeMounts[0].name"},
		{"duplicate volume", func(p *corev1.Pod) {
			v := corev1.Volume{Name: "v", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}
			p.Spec.Volumes = []corev1.Volume{v, v}
		}, "spec.volumes[1].name"},
		{"two volume types", func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{
				EmptyDir: &corev1.EmptyDirVolumeSource{}, HostPath: &corev1.HostPathVolumeSource{Path: "/x"}}}}
		}, "spec.volumes[0]"},
		{"hostPath without path", func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{}}}}
		}, "spec.volumes[0].hostPath.path"},
		{"subPath escapes", func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
			p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "v", MountPath: "/v", SubPath: "../etc"}}
		}, "spec.containers[0].volumeMounts[0].subPath"},
		{"probe without handler", func(p *corev1.Pod) {
			p.Spec.Containers[0].LivenessProbe = &corev1.Probe{PeriodSeconds: 10, SuccessThreshold: 1}
		}, "spec.containers[0].livenessProbe"},
		{"liveness success threshold", func(p *corev1.Pod) {
			p.Spec.Containers[0].LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{}}, SuccessThreshold: 2}
		}, "spec.containers[0].livenessProbe.successThreshold"},
		{"sidecar restart policy", func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{Name: "i", Image: "i", ImagePullPolicy: "Always", TerminationMessagePolicy: "File",
				RestartPolicy: ptr.To(corev1.ContainerRestartPolicy("Never"))}}
		}, "spec.initContainers[0].restartPolicy"},
		{"ephemeral containers", func(p *corev1.Pod) {
			p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{}}
		}, "spec.ephemeralContainers"},
		{"negative grace period", func(p *corev1.Pod) { p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](-5) }, "spec.terminationGracePeriodSeconds"},
		{"bad hostname", func(p *corev1.Pod) { p.Spec.Hostname = "my.host" }, "spec.hostname"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
			p.Name = "web"
			setPodDefaults(p)
			staticPod(p, "/etc/pods/web.yaml", true, "node1")
			tc.mut(p)
			errs := validatePod(p)
			if tc.field == "" {
				if len(errs) > 0 {
					t.Fatalf("unexpected errors: %v", errs)
				}
				return
			}
			if len(errs) == 0 {
				t.Fatalf("no error, want one on %s", tc.field)
			}
			var fields []string
			for _, e := range errs {
				fields = append(fields, e.Field)
			}
			if !strings.Contains(strings.Join(fields, " "), tc.field) {
				t.Errorf("errors on %v, want one on %s (%v)", fields, tc.field, errs)
			}
		})
	}
}
