package runtime

import (
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// serviceEnvVars is the kubelet's getServiceEnvVarMap
// (pkg/kubelet/kubelet_pods.go) over services: the master service
// default/kubernetes always, the services of namespace ns when links, and
// never a service without a cluster IP; then envvars.FromServices
// (pkg/kubelet/envvars) for each. k8s.io/kubernetes is not imported, so the
// code is mirrored here. The kubelet ranges over a map (random order);
// here services go by name so the result is stable.
func serviceEnvVars(services []*corev1.Service, ns string, links bool) []corev1.EnvVar {
	byName := map[string]*corev1.Service{}
	for _, s := range services {
		if !isServiceIPSet(s) {
			continue
		}
		// The master services of the default namespace, even without
		// service links; the pod's own namespace's with them.
		if s.Namespace == metav1.NamespaceDefault && s.Name == "kubernetes" {
			if _, ok := byName[s.Name]; !ok {
				byName[s.Name] = s
			}
		} else if s.Namespace == ns && links {
			byName[s.Name] = s
		}
	}
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	sort.Strings(names)
	picked := make([]*corev1.Service, 0, len(names))
	for _, n := range names {
		picked = append(picked, byName[n])
	}
	return fromServices(picked)
}

// isServiceIPSet is v1helper.IsServiceIPSet.
func isServiceIPSet(s *corev1.Service) bool {
	return s.Spec.ClusterIP != corev1.ClusterIPNone && s.Spec.ClusterIP != ""
}

// fromServices is envvars.FromServices: <NAME>_SERVICE_HOST,
// <NAME>_SERVICE_PORT (the first port), <NAME>_SERVICE_PORT_<PORTNAME> for
// every named port, then the Docker link variables.
func fromServices(services []*corev1.Service) []corev1.EnvVar {
	var result []corev1.EnvVar
	for _, s := range services {
		if !isServiceIPSet(s) || len(s.Spec.Ports) == 0 {
			continue
		}
		name := makeEnvVariableName(s.Name) + "_SERVICE_HOST"
		result = append(result, corev1.EnvVar{Name: name, Value: s.Spec.ClusterIP})
		name = makeEnvVariableName(s.Name) + "_SERVICE_PORT"
		result = append(result, corev1.EnvVar{Name: name, Value: strconv.Itoa(int(s.Spec.Ports[0].Port))})
		for i := range s.Spec.Ports {
			sp := &s.Spec.Ports[i]
			if sp.Name != "" {
				result = append(result, corev1.EnvVar{Name: name + "_" + makeEnvVariableName(sp.Name), Value: strconv.Itoa(int(sp.Port))})
			}
		}
		result = append(result, makeLinkVariables(s)...)
	}
	return result
}

// makeEnvVariableName is envvars.makeEnvVariableName.
func makeEnvVariableName(s string) string {
	return strings.ToUpper(strings.ReplaceAll(s, "-", "_"))
}

// makeLinkVariables is envvars.makeLinkVariables: Docker's link variables,
// <NAME>_PORT for the first port and <NAME>_PORT_<port>_<PROTO>[_PROTO,
// _PORT, _ADDR] for each.
func makeLinkVariables(s *corev1.Service) []corev1.EnvVar {
	prefix := makeEnvVariableName(s.Name)
	var all []corev1.EnvVar
	for i := range s.Spec.Ports {
		sp := &s.Spec.Ports[i]
		protocol := string(corev1.ProtocolTCP)
		if sp.Protocol != "" {
			protocol = string(sp.Protocol)
		}
		hostPort := net.JoinHostPort(s.Spec.ClusterIP, strconv.Itoa(int(sp.Port)))
		if i == 0 {
			all = append(all, corev1.EnvVar{Name: prefix + "_PORT", Value: fmt.Sprintf("%s://%s", strings.ToLower(protocol), hostPort)})
		}
		portPrefix := fmt.Sprintf("%s_PORT_%d_%s", prefix, sp.Port, strings.ToUpper(protocol))
		all = append(all,
			corev1.EnvVar{Name: portPrefix, Value: fmt.Sprintf("%s://%s", strings.ToLower(protocol), hostPort)},
			corev1.EnvVar{Name: portPrefix + "_PROTO", Value: strings.ToLower(protocol)},
			corev1.EnvVar{Name: portPrefix + "_PORT", Value: strconv.Itoa(int(sp.Port))},
			corev1.EnvVar{Name: portPrefix + "_ADDR", Value: s.Spec.ClusterIP},
		)
	}
	return all
}
