package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critest "k8s.io/cri-api/pkg/apis/testing"
	kubelettypes "k8s.io/kubelet/pkg/types"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/bus/bustest"
	"github.com/nodelet/nodelet/internal/cri"
	"github.com/nodelet/nodelet/internal/daemon"
	"github.com/nodelet/nodelet/services/server/client"
)

// FuzzLogQuery: the query of /containerLogs, whatever it is, is refused or
// gives options the kubelet's validation accepts and that convert to CRI's.
// Longer: go test ./services/server -run '^$' -fuzz FuzzLogQuery -fuzztime 10m.
func FuzzLogQuery(f *testing.F) {
	for _, q := range []string{"", "follow=true&tailLines=10", "tail=all", "tail=5&tailLines=7", "sinceSeconds=30",
		"sinceTime=2026-01-02T03:04:05Z", "limitBytes=0", "stream=Stderr&tailLines=1", "previous=yes", "timestamps=1&stream=All",
		"tailLines=-1", "sinceSeconds=1&sinceTime=2026-01-02T03:04:05Z", "%zz", "tailLines=9223372036854775807"} {
		f.Add(q)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		o, err := parseLogOptions(q)
		if err != nil {
			if o != nil || !errors.Is(err, errBadQuery) && !errors.Is(err, errInvalidQuery) {
				t.Fatalf("%q: %v with %+v", raw, err, o)
			}
			return
		}
		if o.TailLines != nil && *o.TailLines < 0 || o.LimitBytes != nil && *o.LimitBytes < 1 ||
			o.SinceSeconds != nil && *o.SinceSeconds < 1 {
			t.Fatalf("%q: accepted %+v", raw, o)
		}
		_ = criLogOptions(o, time.Now())
	})
}

// fuzzPaths are the kubelet API's paths that take query parameters and
// upgrade headers: exec, attach, port-forward, run and container logs,
// with and without the pod's UID.
var fuzzPaths = []string{
	"/exec/%s/%s/%s", "/exec/%s/%s/uid-1/%s", "/attach/%s/%s/%s", "/attach/%s/%s/uid-1/%s",
	"/portForward/%s/%s", "/portForward/%s/%s/uid-1", "/run/%s/%s/%s", "/containerLogs/%s/%s/%s",
}

// streamingServer is a kubelet API on a fake runtime whose streaming
// server refuses every stream, holding one pod (ns/web, container app)
// with a log.
type streamingServer struct {
	url      string
	panicked atomic.Value
}

func newStreamingServer(f *testing.F) *streamingServer {
	cfg := testConfig(f)
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no streams here", http.StatusBadRequest)
	}))
	f.Cleanup(backend.Close)
	logPath := filepath.Join(f.TempDir(), "app.log")
	if err := os.WriteFile(logPath, []byte("2026-01-02T03:04:05.000000000Z stdout F hello\n2026-01-02T03:04:06.000000000Z stderr P wor\n2026-01-02T03:04:06.000000000Z stderr F ld\n"), 0o600); err != nil {
		f.Fatal(err)
	}
	rt := &refusingStreams{FakeRuntimeService: critest.NewFakeRuntimeService(), url: backend.URL + "/stream"}
	labels := map[string]string{kubelettypes.KubernetesPodUIDLabel: "uid-1", kubelettypes.KubernetesContainerNameLabel: "app"}
	rt.SetFakeContainers([]*critest.FakeContainer{{ContainerStatus: runtimeapi.ContainerStatus{Id: "c1",
		Metadata: &runtimeapi.ContainerMetadata{Name: "app"}, State: runtimeapi.ContainerState_CONTAINER_RUNNING,
		Labels: labels, LogPath: logPath, CreatedAt: 1}, SandboxID: "s1"}})
	rt.SetFakeSandboxes([]*critest.FakePodSandbox{{PodSandboxStatus: runtimeapi.PodSandboxStatus{Id: "s1",
		Metadata: &runtimeapi.PodSandboxMetadata{Name: "web", Namespace: "ns", Uid: "uid-1"},
		State:    runtimeapi.PodSandboxState_SANDBOX_READY, Labels: map[string]string{kubelettypes.KubernetesPodUIDLabel: "uid-1"}}}})
	s, err := New(Options{Deps: daemon.Deps{Config: cfg, Log: bustest.Logger(), Bus: &bus.Conn{}},
		CRI: &cri.Clients{Runtime: rt, Image: critest.NewFakeImageService()}})
	if err != nil {
		f.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: "uid-1"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}}}}
	s.pods.byKey["uid-1"], s.pods.byName["ns/web"] = pod, pod
	s.pods.once.Do(func() { close(s.pods.synced) })
	// Every request comes with the node-local admin's certificate, so the
	// handlers behind authorization are reached.
	files := client.LocalFiles(cfg.Node.StateDir)
	pair, err := tls.LoadX509KeyPair(files.Cert, files.Key)
	if err != nil {
		f.Fatal(err)
	}
	admin := pair.Leaf
	ss := &streamingServer{}
	h := s.Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if p := recover(); p != nil {
				if p != http.ErrAbortHandler {
					ss.panicked.Store(fmt.Sprintf("%s %s: %v", r.Method, r.URL, p))
				}
				panic(p)
			}
		}()
		r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{admin}}
		h.ServeHTTP(w, r)
	}))
	f.Cleanup(srv.Close)
	ss.url = srv.URL
	return ss
}

// refusingStreams hands out the streaming server's URL for every stream.
type refusingStreams struct {
	*critest.FakeRuntimeService
	url string
}

func (r *refusingStreams) Exec(ctx context.Context, req *runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error) {
	if _, err := r.FakeRuntimeService.Exec(ctx, req); err != nil {
		return nil, err
	}
	return &runtimeapi.ExecResponse{Url: r.url}, nil
}

func (r *refusingStreams) Attach(ctx context.Context, req *runtimeapi.AttachRequest) (*runtimeapi.AttachResponse, error) {
	if _, err := r.FakeRuntimeService.Attach(ctx, req); err != nil {
		return nil, err
	}
	return &runtimeapi.AttachResponse{Url: r.url}, nil
}

func (r *refusingStreams) PortForward(ctx context.Context, req *runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error) {
	if _, err := r.FakeRuntimeService.PortForward(ctx, req); err != nil {
		return nil, err
	}
	return &runtimeapi.PortForwardResponse{Url: r.url}, nil
}

// FuzzStreamingRequest sends the kubelet API's streaming and log paths
// arbitrary path segments, query parameters and upgrade headers (Connection,
// Upgrade, Sec-WebSocket-Protocol, X-Stream-Protocol-Version): no handler
// may panic or hang, and none answers 2xx to a stream it could not set up.
// Longer: go test ./services/server -run '^$' -fuzz FuzzStreamingRequest -fuzztime 10m.
func FuzzStreamingRequest(f *testing.F) {
	type seed struct {
		path                                      uint8
		post                                      bool
		ns, pod, container, query                 string
		connection, upgrade, wsProtocol, spdyProt string
	}
	for _, s := range []seed{
		{0, true, "ns", "web", "app", "command=id&output=1&error=1", "Upgrade", "SPDY/3.1", "", "v4.channel.k8s.io"},
		{0, false, "ns", "web", "app", "command=sh&input=1&output=1&tty=1", "Upgrade", "websocket", "v5.channel.k8s.io", ""},
		{2, false, "ns", "web", "app", "output=1", "Upgrade", "websocket", "v4.channel.k8s.io", ""},
		{4, true, "ns", "web", "", "port=8080&port=9090", "Upgrade", "SPDY/3.1", "", "portforward.k8s.io"},
		{5, false, "ns", "web", "", "", "Upgrade", "websocket", "SPDY/3.1+portforward.k8s.io", ""},
		{4, false, "ns", "web", "", "port=0&port=99999", "Upgrade", "websocket", "v4.channel.k8s.io", ""},
		{6, true, "ns", "web", "app", "cmd=echo+hi", "", "", "", ""},
		{7, false, "ns", "web", "app", "tailLines=1&timestamps=true", "", "", "", ""},
		{7, false, "ns", "web", "app", "stream=Stdout&limitBytes=3", "", "", "", ""},
		{0, true, "ns", "gone", "app", "command=id", "Upgrade", "SPDY/3.1", "", "v4.channel.k8s.io"},
		{0, true, "ns", "web", "app", "", "keep-alive", "", "", ""},
	} {
		f.Add(s.path, s.post, s.ns, s.pod, s.container, s.query, s.connection, s.upgrade, s.wsProtocol, s.spdyProt)
	}
	srv := newStreamingServer(f)
	f.Fuzz(func(t *testing.T, path uint8, post bool, ns, pod, container, query, connection, upgrade, wsProtocol, spdyProtocol string) {
		tmpl := fuzzPaths[int(path)%len(fuzzPaths)]
		args := []any{url.PathEscape(ns), url.PathEscape(pod), url.PathEscape(container)}
		p := fmt.Sprintf(tmpl, args[:strings.Count(tmpl, "%s")]...)
		method := http.MethodGet
		if post || strings.HasPrefix(p, "/run/") {
			method = http.MethodPost
		}
		// A followed log only ends with its client: give it a moment.
		wait := 5 * time.Second
		if q, err := url.ParseQuery(query); err == nil {
			if o, err := parseLogOptions(q); err == nil && o.Follow && strings.HasPrefix(p, "/containerLogs/") {
				wait = 300 * time.Millisecond
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, method, srv.url+p+"?"+query, nil)
		if err != nil {
			return
		}
		for k, v := range map[string]string{"Connection": connection, "Upgrade": upgrade,
			"Sec-WebSocket-Protocol": wsProtocol, "X-Stream-Protocol-Version": spdyProtocol} {
			if v != "" {
				req.Header.Set(k, v)
			}
		}
		if strings.EqualFold(upgrade, "websocket") {
			req.Header.Set("Sec-WebSocket-Version", "13")
			req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
		}
		resp, err := http.DefaultTransport.RoundTrip(req)
		if err == nil {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
			resp.Body.Close()
			t.Logf("%s %s?%s: %s %.80q", method, p, query, resp.Status, b)
		} else {
			t.Logf("%s %s?%s: %v", method, p, query, err)
		}
		if p, ok := srv.panicked.Load().(string); ok {
			t.Fatalf("handler panicked: %s", p)
		}
		if err != nil && ctx.Err() != nil && wait > time.Second {
			t.Fatalf("%s %s?%s hung: %v", method, p, query, err)
		}
		if err == nil && resp.StatusCode/100 == 2 && !strings.HasPrefix(p, "/containerLogs/") && !strings.HasPrefix(p, "/run/") {
			t.Fatalf("%s %s?%s answered %s with no stream behind it", method, p, query, resp.Status)
		}
	})
}
