package runtime

import (
	"context"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func svc(ns, name, ip string, ports ...corev1.ServicePort) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{ClusterIP: ip, Ports: ports}}
}

// The kubelet's envvars_test (TestFromServices) cases, on the mirror.
func TestFromServicesAsTheKubelet(t *testing.T) {
	got := fromServices([]*corev1.Service{
		svc("", "foo-bar", "1.2.3.4", corev1.ServicePort{Port: 8080, Protocol: "TCP"}),
		svc("", "abc-123", "5.6.7.8", corev1.ServicePort{Name: "u-d-p", Port: 8081, Protocol: "UDP"},
			corev1.ServicePort{Name: "t-c-p", Port: 8081, Protocol: "TCP"}),
		svc("", "q-u-u-x", "9.8.7.6", corev1.ServicePort{Port: 8082, Protocol: "TCP"},
			corev1.ServicePort{Name: "8083", Port: 8083, Protocol: "TCP"}),
		svc("", "svrc-clusterip-none", "None", corev1.ServicePort{Port: 8082, Protocol: "TCP"}),
		svc("", "svrc-clusterip-empty", "", corev1.ServicePort{Port: 8082, Protocol: "TCP"}),
		svc("", "super-ipv6", "2001:DB8::", corev1.ServicePort{Name: "u-d-p", Port: 8084, Protocol: "UDP"}),
		svc("", "sctp-1", "1.2.3.4", corev1.ServicePort{Port: 777, Protocol: "SCTP"}),
	})
	want := []corev1.EnvVar{
		{Name: "FOO_BAR_SERVICE_HOST", Value: "1.2.3.4"},
		{Name: "FOO_BAR_SERVICE_PORT", Value: "8080"},
		{Name: "FOO_BAR_PORT", Value: "tcp://1.2.3.4:8080"},
		{Name: "FOO_BAR_PORT_8080_TCP", Value: "tcp://1.2.3.4:8080"},
		{Name: "FOO_BAR_PORT_8080_TCP_PROTO", Value: "tcp"},
		{Name: "FOO_BAR_PORT_8080_TCP_PORT", Value: "8080"},
		{Name: "FOO_BAR_PORT_8080_TCP_ADDR", Value: "1.2.3.4"},
		{Name: "ABC_123_SERVICE_HOST", Value: "5.6.7.8"},
		{Name: "ABC_123_SERVICE_PORT", Value: "8081"},
		{Name: "ABC_123_SERVICE_PORT_U_D_P", Value: "8081"},
		{Name: "ABC_123_SERVICE_PORT_T_C_P", Value: "8081"},
		{Name: "ABC_123_PORT", Value: "udp://5.6.7.8:8081"},
		{Name: "ABC_123_PORT_8081_UDP", Value: "udp://5.6.7.8:8081"},
		{Name: "ABC_123_PORT_8081_UDP_PROTO", Value: "udp"},
		{Name: "ABC_123_PORT_8081_UDP_PORT", Value: "8081"},
		{Name: "ABC_123_PORT_8081_UDP_ADDR", Value: "5.6.7.8"},
		{Name: "ABC_123_PORT_8081_TCP", Value: "tcp://5.6.7.8:8081"},
		{Name: "ABC_123_PORT_8081_TCP_PROTO", Value: "tcp"},
		{Name: "ABC_123_PORT_8081_TCP_PORT", Value: "8081"},
		{Name: "ABC_123_PORT_8081_TCP_ADDR", Value: "5.6.7.8"},
		{Name: "Q_U_U_X_SERVICE_HOST", Value: "9.8.7.6"},
		{Name: "Q_U_U_X_SERVICE_PORT", Value: "8082"},
		{Name: "Q_U_U_X_SERVICE_PORT_8083", Value: "8083"},
		{Name: "Q_U_U_X_PORT", Value: "tcp://9.8.7.6:8082"},
		{Name: "Q_U_U_X_PORT_8082_TCP", Value: "tcp://9.8.7.6:8082"},
		{Name: "Q_U_U_X_PORT_8082_TCP_PROTO", Value: "tcp"},
		{Name: "Q_U_U_X_PORT_8082_TCP_PORT", Value: "8082"},
		{Name: "Q_U_U_X_PORT_8082_TCP_ADDR", Value: "9.8.7.6"},
		{Name: "Q_U_U_X_PORT_8083_TCP", Value: "tcp://9.8.7.6:8083"},
		{Name: "Q_U_U_X_PORT_8083_TCP_PROTO", Value: "tcp"},
		{Name: "Q_U_U_X_PORT_8083_TCP_PORT", Value: "8083"},
		{Name: "Q_U_U_X_PORT_8083_TCP_ADDR", Value: "9.8.7.6"},
		{Name: "SUPER_IPV6_SERVICE_HOST", Value: "2001:DB8::"},
		{Name: "SUPER_IPV6_SERVICE_PORT", Value: "8084"},
		{Name: "SUPER_IPV6_SERVICE_PORT_U_D_P", Value: "8084"},
		{Name: "SUPER_IPV6_PORT", Value: "udp://[2001:DB8::]:8084"},
		{Name: "SUPER_IPV6_PORT_8084_UDP", Value: "udp://[2001:DB8::]:8084"},
		{Name: "SUPER_IPV6_PORT_8084_UDP_PROTO", Value: "udp"},
		{Name: "SUPER_IPV6_PORT_8084_UDP_PORT", Value: "8084"},
		{Name: "SUPER_IPV6_PORT_8084_UDP_ADDR", Value: "2001:DB8::"},
		{Name: "SCTP_1_SERVICE_HOST", Value: "1.2.3.4"},
		{Name: "SCTP_1_SERVICE_PORT", Value: "777"},
		{Name: "SCTP_1_PORT", Value: "sctp://1.2.3.4:777"},
		{Name: "SCTP_1_PORT_777_SCTP", Value: "sctp://1.2.3.4:777"},
		{Name: "SCTP_1_PORT_777_SCTP_PROTO", Value: "sctp"},
		{Name: "SCTP_1_PORT_777_SCTP_PORT", Value: "777"},
		{Name: "SCTP_1_PORT_777_SCTP_ADDR", Value: "1.2.3.4"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got\n%v\nwant\n%v", got, want)
	}
}

// getServiceEnvVarMap's choice of services: default/kubernetes always; the
// pod's namespace only with service links; a "kubernetes" service of the
// pod's own namespace wins over the master one (the kubelet keeps the
// first master service but lets namespace services overwrite it).
func TestServiceEnvVarsPicksServices(t *testing.T) {
	p := corev1.ServicePort{Port: 443, Protocol: "TCP"}
	all := []*corev1.Service{
		svc("default", "kubernetes", "10.0.0.1", p),
		svc("default", "other", "10.0.0.2", p),
		svc("app", "web", "10.0.0.3", p),
		svc("app", "headless", "None", p),
		svc("elsewhere", "db", "10.0.0.4", p),
	}
	names := func(env []corev1.EnvVar) string {
		var out []string
		for _, e := range env {
			if strings.HasSuffix(e.Name, "_SERVICE_HOST") {
				out = append(out, e.Name+"="+e.Value)
			}
		}
		return strings.Join(out, ",")
	}
	if got := names(serviceEnvVars(all, "app", true)); got != "KUBERNETES_SERVICE_HOST=10.0.0.1,WEB_SERVICE_HOST=10.0.0.3" {
		t.Errorf("links on: %s", got)
	}
	if got := names(serviceEnvVars(all, "app", false)); got != "KUBERNETES_SERVICE_HOST=10.0.0.1" {
		t.Errorf("links off: %s", got)
	}
	if got := names(serviceEnvVars(all, "default", true)); got != "KUBERNETES_SERVICE_HOST=10.0.0.1,OTHER_SERVICE_HOST=10.0.0.2" {
		t.Errorf("default namespace: %s", got)
	}
	own := append(all, svc("app", "kubernetes", "10.0.0.9", p))
	if got := names(serviceEnvVars(own, "app", true)); got != "KUBERNETES_SERVICE_HOST=10.0.0.9,WEB_SERVICE_HOST=10.0.0.3" {
		t.Errorf("namespace's own kubernetes service: %s", got)
	}
}

// makeEnvironmentVariables: the container's own variables first, in
// order, and they win over service variables of the same name; values may
// refer to service variables; the remaining service variables follow.
func TestContainerEnvWithServices(t *testing.T) {
	c := busybox("app", "")
	c.Env = []corev1.EnvVar{
		{Name: "WEB_SERVICE_HOST", Value: "mine"},
		{Name: "API", Value: "https://$(KUBERNETES_SERVICE_HOST):$(KUBERNETES_SERVICE_PORT)"},
	}
	pod := newPod("p", c)
	services := map[string]string{"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443", "WEB_SERVICE_HOST": "10.0.0.3"}
	order, env, err := containerEnv(context.Background(), pod, &pod.Spec.Containers[0], envInputs{Services: services})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"WEB_SERVICE_HOST", "API", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"}
	if !reflect.DeepEqual(order, want) {
		t.Fatalf("order %v, want %v", order, want)
	}
	if env["WEB_SERVICE_HOST"] != "mine" || env["API"] != "https://10.0.0.1:443" || env["KUBERNETES_SERVICE_HOST"] != "10.0.0.1" {
		t.Fatalf("env %v", env)
	}
}
