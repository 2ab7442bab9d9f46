package runtime

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// A host-network pod's POD_IP is the node's IP, as on a kubelet node (the
// Downward API conformance spec compares HOST_IP and POD_IP).
func TestPodIPsOf(t *testing.T) {
	host := []string{"10.0.0.1"}
	for _, tc := range []struct {
		name        string
		hostNetwork bool
		sandbox     []string
		want        string
	}{
		{"pod network", false, []string{"10.88.0.5"}, "10.88.0.5"},
		{"host network", true, nil, "10.0.0.1"},
		{"host network, runtime reports an IP", true, []string{"10.0.0.9"}, "10.0.0.9"},
		{"pod network without an IP yet", false, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{Spec: corev1.PodSpec{HostNetwork: tc.hostNetwork}}
			c := &corev1.Container{Name: "c", Env: []corev1.EnvVar{
				{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
				{Name: "HOST_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.hostIP"}}},
			}}
			_, env, err := containerEnv(context.Background(), pod, c, envInputs{PodIPs: podIPsOf(pod, tc.sandbox, host), HostIPs: host})
			if err != nil {
				t.Fatal(err)
			}
			if env["POD_IP"] != tc.want || env["HOST_IP"] != strings.Join(host, ",") {
				t.Errorf("POD_IP=%q HOST_IP=%q, want POD_IP=%q", env["POD_IP"], env["HOST_IP"], tc.want)
			}
		})
	}
}
