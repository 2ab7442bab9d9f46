package prober

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	internalapi "k8s.io/cri-api/pkg/apis"
	remote "k8s.io/cri-client/pkg"
	utilexec "k8s.io/utils/exec"
)

func splitHostPort(t *testing.T, rawURL string) (string, int) {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	port, _ := strconv.Atoi(u.Port())
	return u.Hostname(), port
}

// The HTTP prober against a real local server: status codes, redirects
// (same host followed, other host a warning), headers, User-Agent, named
// ports, scheme, timeouts.
func TestHTTPProbe(t *testing.T) {
	var lastHeaders http.Header
	var lastHost string
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(200) }))
	defer other.Close()
	_, otherPort := splitHostPort(t, other.URL)
	mux := http.NewServeMux()
	mux.HandleFunc("/ok", func(w http.ResponseWriter, r *http.Request) {
		lastHeaders, lastHost = r.Header.Clone(), r.Host
		fmt.Fprint(w, "fine")
	})
	mux.HandleFunc("/500", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "secret body", 500) })
	mux.HandleFunc("/404", http.NotFound)
	mux.HandleFunc("/local-redirect", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/ok", http.StatusFound) })
	mux.HandleFunc("/redirect-to-500", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/500", http.StatusFound) })
	mux.HandleFunc("/remote-redirect", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://localhost:"+strconv.Itoa(otherPort)+"/", http.StatusFound)
	})
	mux.HandleFunc("/loop", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/loop", http.StatusFound) })
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(3 * time.Second):
		case <-r.Context().Done():
		}
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	tlsSrv := httptest.NewTLSServer(mux)
	defer tlsSrv.Close()
	host, port := splitHostPort(t, srv.URL)
	_, tlsPort := splitHostPort(t, tlsSrv.URL)

	container := &corev1.Container{Name: "c", Ports: []corev1.ContainerPort{{Name: "web", ContainerPort: int32(port)}}}
	h := newHandlers(nil)
	cases := []struct {
		name    string
		get     corev1.HTTPGetAction
		timeout int32
		want    outcome
		output  string // prefix
		err     string
	}{
		{name: "200", get: corev1.HTTPGetAction{Path: "/ok", Port: intstr.FromInt32(int32(port))}, want: outcomeSuccess, output: "fine"},
		{name: "named port", get: corev1.HTTPGetAction{Path: "/ok", Port: intstr.FromString("web")}, want: outcomeSuccess},
		{name: "unknown port name", get: corev1.HTTPGetAction{Path: "/ok", Port: intstr.FromString("nope")}, want: outcomeUnknown, err: `port "nope" not found`},
		{name: "500", get: corev1.HTTPGetAction{Path: "/500", Port: intstr.FromInt32(int32(port))}, want: outcomeFailure,
			output: "HTTP probe failed with statuscode: 500"},
		{name: "404", get: corev1.HTTPGetAction{Path: "/404", Port: intstr.FromInt32(int32(port))}, want: outcomeFailure,
			output: "HTTP probe failed with statuscode: 404"},
		{name: "same-host redirect followed", get: corev1.HTTPGetAction{Path: "/local-redirect", Port: intstr.FromInt32(int32(port))}, want: outcomeSuccess},
		{name: "same-host redirect to 500", get: corev1.HTTPGetAction{Path: "/redirect-to-500", Port: intstr.FromInt32(int32(port))}, want: outcomeFailure},
		{name: "other-host redirect is a warning", get: corev1.HTTPGetAction{Path: "/remote-redirect", Port: intstr.FromInt32(int32(port))},
			want: outcomeWarning, output: "Probe terminated redirects"},
		{name: "redirect loop", get: corev1.HTTPGetAction{Path: "/loop", Port: intstr.FromInt32(int32(port))}, want: outcomeFailure,
			output: "Get \"/loop\": stopped after 10 redirects"},
		{name: "https without verification", get: corev1.HTTPGetAction{Path: "/ok", Port: intstr.FromInt32(int32(tlsPort)), Scheme: corev1.URISchemeHTTPS}, want: outcomeSuccess},
		{name: "timeout", get: corev1.HTTPGetAction{Path: "/slow", Port: intstr.FromInt32(int32(port))}, timeout: 1, want: outcomeFailure,
			output: "Get \"http://"},
		{name: "connection refused", get: corev1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(1)}, want: outcomeFailure, output: "Get \"http://"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.timeout == 0 {
				tc.timeout = 5
			}
			out, output, err := h.run(context.Background(), target{pod: testPod("u", *container), container: container, kind: "readiness",
				spec: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &tc.get}, TimeoutSeconds: tc.timeout}, podIP: host})
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
			} else if err != nil {
				t.Fatalf("err = %v", err)
			}
			if out != tc.want || !strings.HasPrefix(output, tc.output) {
				t.Errorf("= %s %q, want %s %q…", out, output, tc.want, tc.output)
			}
			if strings.Contains(output, "secret body") {
				t.Errorf("failure message carries the body: %q", output)
			}
		})
	}

	// Headers: defaults, overrides, Host.
	get := &corev1.HTTPGetAction{Path: "/ok", Port: intstr.FromInt32(int32(port))}
	spec := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: get}, TimeoutSeconds: 5}
	run := func() {
		t.Helper()
		if out, _, err := h.run(context.Background(), target{pod: testPod("u", *container), container: container, spec: spec, podIP: host}); out != outcomeSuccess || err != nil {
			t.Fatalf("probe = %s %v", out, err)
		}
	}
	run()
	if ua := lastHeaders.Get("User-Agent"); !strings.HasPrefix(ua, "kube-probe/1.") {
		t.Errorf("User-Agent = %q, want kube-probe/<major.minor>", ua)
	}
	if lastHeaders.Get("Accept") != "*/*" || lastHeaders.Get("Accept-Encoding") != "" || lastHeaders.Get("Connection") != "close" {
		t.Errorf("default headers = %v", lastHeaders)
	}
	get.HTTPHeaders = []corev1.HTTPHeader{{Name: "user-agent", Value: "mine"}, {Name: "X-Custom", Value: "a"}, {Name: "X-Custom", Value: "b"},
		{Name: "Host", Value: "example.test"}, {Name: "Accept", Value: ""}}
	run()
	if lastHeaders.Get("User-Agent") != "mine" || strings.Join(lastHeaders.Values("X-Custom"), ",") != "a,b" || lastHost != "example.test" {
		t.Errorf("headers = %v host %q", lastHeaders, lastHost)
	}
	if _, ok := lastHeaders["Accept"]; ok {
		t.Errorf("an empty Accept header should remove it: %v", lastHeaders)
	}
}

func TestTCPProbe(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	h := newHandlers(nil)
	c := &corev1.Container{Name: "c", Ports: []corev1.ContainerPort{{Name: "svc", ContainerPort: int32(port)}}}
	probe := func(p intstr.IntOrString, host string) (outcome, string, error) {
		return h.run(context.Background(), target{pod: testPod("u", *c), container: c,
			spec: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: p, Host: host}}, TimeoutSeconds: 2}, podIP: "127.0.0.1"})
	}
	if out, _, err := probe(intstr.FromString("svc"), ""); out != outcomeSuccess || err != nil {
		t.Errorf("listening port: %s %v", out, err)
	}
	if out, _, err := probe(intstr.FromInt32(int32(port)), "localhost"); out != outcomeSuccess || err != nil {
		t.Errorf("explicit host: %s %v", out, err)
	}
	l.Close()
	if out, msg, err := probe(intstr.FromInt32(int32(port)), ""); out != outcomeFailure || err != nil || !strings.Contains(msg, "connection refused") {
		t.Errorf("closed port: %s %q %v", out, msg, err)
	}
	if out, _, err := probe(intstr.FromInt32(70000), ""); out != outcomeUnknown || err == nil {
		t.Errorf("bad port: %s %v", out, err)
	}
}

// startHealthServer serves grpc.health.v1 on 127.0.0.1 with the given
// service statuses.
func startHealthServer(t *testing.T, statuses map[string]healthpb.HealthCheckResponse_ServingStatus) (int, *health.Server, func()) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	hs := health.NewServer()
	for svc, st := range statuses {
		hs.SetServingStatus(svc, st)
	}
	healthpb.RegisterHealthServer(s, hs)
	go func() { _ = s.Serve(l) }()
	return l.Addr().(*net.TCPAddr).Port, hs, s.Stop
}

func TestGRPCProbe(t *testing.T) {
	port, hs, stop := startHealthServer(t, map[string]healthpb.HealthCheckResponse_ServingStatus{
		"":    healthpb.HealthCheckResponse_SERVING,
		"db":  healthpb.HealthCheckResponse_NOT_SERVING,
		"api": healthpb.HealthCheckResponse_SERVING,
	})
	defer stop()
	// A gRPC server without the health service.
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	bare := grpc.NewServer()
	go func() { _ = bare.Serve(l) }()
	defer bare.Stop()
	barePort := l.Addr().(*net.TCPAddr).Port
	closed, _ := net.Listen("tcp", "127.0.0.1:0")
	closedPort := closed.Addr().(*net.TCPAddr).Port
	closed.Close()

	h := newHandlers(nil)
	c := &corev1.Container{Name: "c"}
	probe := func(port int, service *string) (outcome, string) {
		t.Helper()
		out, msg, err := h.run(context.Background(), target{pod: testPod("u", *c), container: c, podIP: "127.0.0.1",
			spec: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: int32(port), Service: service}}, TimeoutSeconds: 1}})
		if err != nil {
			t.Fatalf("grpc probe errors are failures, got err %v", err)
		}
		return out, msg
	}
	cases := []struct {
		name    string
		port    int
		service *string
		want    outcome
		msg     string
	}{
		{"server serving", port, nil, outcomeSuccess, "service healthy"},
		{"service serving", port, ptr("api"), outcomeSuccess, "service healthy"},
		{"service not serving", port, ptr("db"), outcomeFailure, `service unhealthy (responded with "NOT_SERVING")`},
		{"unknown service", port, ptr("nope"), outcomeFailure, "error: health rpc probe failed: "},
		{"no health service", barePort, nil, outcomeFailure, "error: this server does not implement the grpc health protocol (grpc.health.v1.Health)"},
		{"nothing listening", closedPort, nil, outcomeFailure, `timeout: failed to connect service "127.0.0.1:` + strconv.Itoa(closedPort) + `" within 1s`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, msg := probe(tc.port, tc.service)
			if out != tc.want || !strings.HasPrefix(msg, tc.msg) {
				t.Errorf("= %s %q, want %s %q…", out, msg, tc.want, tc.msg)
			}
		})
	}
	// Flips with the server's status.
	hs.SetServingStatus("api", healthpb.HealthCheckResponse_NOT_SERVING)
	if out, _ := probe(port, ptr("api")); out != outcomeFailure {
		t.Errorf("after NOT_SERVING: %s", out)
	}
}

// execRuntime answers ExecSync as the CRI client does.
type execRuntime struct {
	internalapi.RuntimeService
	stdout, stderr []byte
	err            error
	gotID          string
	gotCmd         []string
	gotTimeout     time.Duration
}

func (r *execRuntime) ExecSync(_ context.Context, id string, cmd []string, timeout time.Duration) ([]byte, []byte, error) {
	r.gotID, r.gotCmd, r.gotTimeout = id, cmd, timeout
	return r.stdout, r.stderr, r.err
}

func TestExecProbeOutcomes(t *testing.T) {
	cases := []struct {
		name   string
		rt     execRuntime
		want   outcome
		output string
		err    bool
	}{
		{"exit 0", execRuntime{stdout: []byte("ok")}, outcomeSuccess, "ok", false},
		{"exit 1", execRuntime{stdout: []byte("out "), stderr: []byte("cat: can't open"),
			err: utilexec.CodeExitError{Err: errors.New("exited 1"), Code: 1}}, outcomeFailure, "out cat: can't open", false},
		{"timeout", execRuntime{err: fmt.Errorf("%w: %q timed out after 1s", remote.ErrCommandTimedOut, "sleep 5")}, outcomeFailure,
			`command timed out: "sleep 5" timed out after 1s`, false},
		{"runtime error", execRuntime{err: errors.New("container not found")}, outcomeUnknown, "", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rt := tc.rt
			h := newHandlers(&rt)
			c := &corev1.Container{Name: "c", Env: []corev1.EnvVar{{Name: "F", Value: "/tmp/healthy"}}}
			out, output, err := h.run(context.Background(), target{pod: testPod("u", *c), container: c, containerID: "abc",
				spec: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"cat", "$(F)"}}}, TimeoutSeconds: 3}})
			if out != tc.want || output != tc.output || (err != nil) != tc.err {
				t.Errorf("= %s %q %v, want %s %q err %v", out, output, err, tc.want, tc.output, tc.err)
			}
			if rt.gotID != "abc" || strings.Join(rt.gotCmd, " ") != "cat /tmp/healthy" || rt.gotTimeout != 3*time.Second {
				t.Errorf("ExecSync(%q, %q, %v)", rt.gotID, rt.gotCmd, rt.gotTimeout)
			}
		})
	}
}

func TestExpand(t *testing.T) {
	vars := map[string]string{"A": "x", "EMPTY": ""}
	cases := []struct{ in, want string }{
		{"$(A)", "x"},
		{"a$(A)b$(A)", "axbx"},
		{"$(B)", "$(B)"},
		{"$$(A)", "$(A)"},
		{"$(EMPTY)-", "-"},
		{"$(A", "$(A"},
		{"$A", "$A"},
		{"cost $", "cost $"},
		{"plain", "plain"},
		{"ü$(A)ü", "üxü"},
	}
	for _, tc := range cases {
		if got := expand(tc.in, vars); got != tc.want {
			t.Errorf("expand(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
