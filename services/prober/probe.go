package prober

import (
	"context"
	"fmt"
	"net"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	internalapi "k8s.io/cri-api/pkg/apis"
)

// outcome is what one execution of a probe handler says (the kubelet's
// pkg/probe.Result).
type outcome string

const (
	outcomeSuccess outcome = "success"
	// outcomeWarning is a success with something to say (an HTTP redirect
	// the prober did not follow).
	outcomeWarning outcome = "warning"
	outcomeFailure outcome = "failure"
	outcomeUnknown outcome = "unknown"
)

// maxProbeRetries is how often a probe that errors (as opposed to fails) is
// tried before its result is thrown away, as in the kubelet.
const maxProbeRetries = 3

// target is one probe execution's input.
type target struct {
	pod       *corev1.Pod
	container *corev1.Container
	kind      string
	spec      *corev1.Probe
	// containerID is the runtime's ID without the "containerd://" scheme.
	containerID string
	// podIP is the pod's first IP (the host's for host-network pods).
	podIP string
}

// runner executes probe handlers. The real one is handlers; unit tests
// script the outcomes.
type runner interface {
	run(ctx context.Context, t target) (outcome, string, error)
}

// handlers runs the four kinds of probe handler like the kubelet's
// prober.runProbe.
type handlers struct {
	exec execProber
	http *httpProber
	tcp  tcpProber
	grpc grpcProber
}

func newHandlers(rs internalapi.RuntimeService) *handlers {
	return &handlers{exec: execProber{runtime: rs}, http: newHTTPProber(), tcp: tcpProber{}, grpc: grpcProber{}}
}

func (h *handlers) run(ctx context.Context, t target) (outcome, string, error) {
	timeout := time.Duration(t.spec.TimeoutSeconds) * time.Second
	switch p := t.spec.ProbeHandler; {
	case p.Exec != nil:
		cmd := expandCommand(p.Exec.Command, t.container.Env)
		return h.exec.probe(ctx, t.containerID, cmd, timeout)
	case p.HTTPGet != nil:
		req, err := newHTTPRequest(ctx, p.HTTPGet, t.container, t.podIP)
		if err != nil {
			return outcomeUnknown, "", err
		}
		return h.http.probe(req, timeout)
	case p.TCPSocket != nil:
		port, err := resolvePort(p.TCPSocket.Port, t.container)
		if err != nil {
			return outcomeUnknown, "", err
		}
		host := p.TCPSocket.Host
		if host == "" {
			host = t.podIP
		}
		return h.tcp.probe(ctx, host, port, timeout)
	case p.GRPC != nil:
		service := ""
		if p.GRPC.Service != nil {
			service = *p.GRPC.Service
		}
		return h.grpc.probe(ctx, t.podIP, service, int(p.GRPC.Port), timeout)
	default:
		return outcomeUnknown, "", fmt.Errorf("missing probe handler for %s/%s:%s", t.pod.Namespace, t.pod.Name, t.container.Name)
	}
}

// resolvePort turns a probe's port (number or name of one of the
// container's ports) into a number (the kubelet's probe.ResolveContainerPort).
func resolvePort(param intstr.IntOrString, c *corev1.Container) (int, error) {
	port := -1
	switch param.Type {
	case intstr.Int:
		port = param.IntValue()
	case intstr.String:
		found := false
		for _, p := range c.Ports {
			if p.Name == param.StrVal {
				port, found = int(p.ContainerPort), true
				break
			}
		}
		if !found {
			return 0, fmt.Errorf("port %q not found", param.StrVal)
		}
	default:
		return port, fmt.Errorf("intOrString had no kind: %+v", param)
	}
	if port > 0 && port < 65536 {
		return port, nil
	}
	return port, fmt.Errorf("invalid port number: %v", port)
}

// probeDialer avoids sockets lingering in TIME-WAIT for a minute after each
// probe: SO_LINGER of one second, as the kubelet's probe.ProbeDialer
// (https://issues.k8s.io/89898).
func probeDialer() *net.Dialer {
	return &net.Dialer{
		Control: func(network, address string, c syscall.RawConn) error {
			return c.Control(func(fd uintptr) {
				_ = syscall.SetsockoptLinger(int(fd), syscall.SOL_SOCKET, syscall.SO_LINGER, &syscall.Linger{Onoff: 1, Linger: 1})
			})
		},
	}
}
