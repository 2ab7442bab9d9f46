package runtime

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	internalapi "k8s.io/cri-api/pkg/apis"
)

// hookRunner runs the containers' lifecycle handlers, the kubelet's
// handlerRunner (pkg/kubelet/lifecycle/handlers.go).
type hookRunner struct {
	rs    hookExecer
	clock Clock
}

// hookExecer runs a command in a container (CRI's RuntimeService).
type hookExecer interface {
	ExecSync(ctx context.Context, containerID string, cmd []string, timeout time.Duration) (stdout []byte, stderr []byte, err error)
}

var _ hookExecer = internalapi.RuntimeService(nil)

// runHook runs a lifecycle handler (PostStart or PreStop) of container id:
// exec through CRI ExecSync, an HTTP GET to the pod, or a sleep. On failure
// it returns the kubelet's message for the event with the error.
func (r *hookRunner) runHook(ctx context.Context, pod *corev1.Pod, c *corev1.Container, id string, h *corev1.LifecycleHandler, podIPs []string) (string, error) {
	switch {
	case h.Exec != nil:
		stdout, stderr, err := r.rs.ExecSync(ctx, id, h.Exec.Command, 0)
		if err != nil {
			out := strings.TrimSpace(string(stdout) + string(stderr))
			return fmt.Sprintf("Exec lifecycle hook (%v) for Container %q in Pod %q failed - error: %v, message: %q",
				h.Exec.Command, c.Name, podString(pod), err, out), err
		}
		return "", nil
	case h.HTTPGet != nil:
		if err := r.runHTTPHook(ctx, c, h.HTTPGet, podIPs); err != nil {
			return fmt.Sprintf("HTTP lifecycle hook (%s) for Container %q in Pod %q failed - error: %v",
				h.HTTPGet.Path, c.Name, podString(pod), err), err
		}
		return "", nil
	case h.Sleep != nil:
		select {
		case <-r.clock.After(time.Duration(h.Sleep.Seconds) * time.Second):
			return "", nil
		case <-ctx.Done():
			return "", nil // the grace period ended the sleep: not a failure
		}
	case h.TCPSocket != nil:
		err := fmt.Errorf("tcpSocket is not a valid lifecycle handler")
		return fmt.Sprintf("Lifecycle hook for Container %q in Pod %q failed - error: %v", c.Name, podString(pod), err), err
	}
	err := fmt.Errorf("lifecycle handler names no action")
	return fmt.Sprintf("Lifecycle hook for Container %q in Pod %q failed - error: %v", c.Name, podString(pod), err), err
}

func (r *hookRunner) runHTTPHook(ctx context.Context, c *corev1.Container, g *corev1.HTTPGetAction, podIPs []string) error {
	host := g.Host
	if host == "" {
		if len(podIPs) == 0 {
			return fmt.Errorf("the pod has no IP to send the request to")
		}
		host = podIPs[0]
	}
	port, err := resolvePort(g.Port, c)
	if err != nil {
		return err
	}
	scheme := strings.ToLower(string(g.Scheme))
	if scheme == "" {
		scheme = "http"
	}
	path := g.Path
	if !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	u := &url.URL{Scheme: scheme, Host: net.JoinHostPort(host, strconv.Itoa(port))}
	if p, q, ok := strings.Cut(path, "?"); ok {
		u.Path, u.RawQuery = p, q
	} else {
		u.Path = path
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return err
	}
	req.Header.Set("User-Agent", "kube-lifecycle/nodelet")
	for _, h := range g.HTTPHeaders {
		if strings.EqualFold(h.Name, "Host") {
			req.Host = h.Value
			continue
		}
		req.Header.Add(h.Name, h.Value)
	}
	resp, err := hookClient.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 10<<10))
	return resp.Body.Close()
}

// hookClient is the kubelet's lifecycle HTTP client: an HTTPS hook is not
// verified (the pod's certificate names nothing the node could check,
// lifecycle.NewHTTPHandler's InsecureSkipVerify).
var hookClient = &http.Client{
	Timeout: 30 * time.Second,
	Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // as the kubelet
		DisableKeepAlives: true,
		Proxy:             nil,
	},
}

// resolvePort turns a numeric or named port of c into a number.
func resolvePort(p intstr.IntOrString, c *corev1.Container) (int, error) {
	if p.Type == intstr.Int {
		if p.IntVal <= 0 || p.IntVal > 65535 {
			return 0, fmt.Errorf("invalid port %d", p.IntVal)
		}
		return int(p.IntVal), nil
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return int(cp.ContainerPort), nil
		}
	}
	if n, err := strconv.Atoi(p.StrVal); err == nil && n > 0 && n <= 65535 {
		return n, nil
	}
	return 0, fmt.Errorf("couldn't find port: %v in container %s", p.StrVal, c.Name)
}
