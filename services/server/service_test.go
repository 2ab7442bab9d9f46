package server

import (
	"sync/atomic"

	internalapi "k8s.io/cri-api/pkg/apis"

	"github.com/nodelet/nodelet/internal/testenv/eventually"

	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cadvisorapi "github.com/google/cadvisor/lib/model"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/bus/bustest"
	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/internal/cri"
	"github.com/nodelet/nodelet/internal/daemon"
	"github.com/nodelet/nodelet/internal/podutil"
	"github.com/nodelet/nodelet/internal/testenv"
	"github.com/nodelet/nodelet/schemas"
	"github.com/nodelet/nodelet/services/server/client"
)

// testServer is a running Daemon on a real bus, with a client that holds
// the node-local admin certificate (allowed whatever the authorization mode).
type testServer struct {
	*Daemon
	t      *testing.T
	b      *bustest.Bus
	cfg    *config.Config
	client *http.Client
}

func testConfig(t testing.TB) *config.Config {
	cfg := config.Defaults()
	cfg.Node.Name = "node-1"
	cfg.Node.Address = "127.0.0.1"
	cfg.Node.StateDir = t.TempDir()
	cfg.Node.PodLogsDir = t.TempDir()
	cfg.Server.Address = "127.0.0.1"
	cfg.Server.Port = 0
	cfg.Server.HealthzPort = 0 // the default, 10248, is the host's: TestKubeletHealthzPort takes a free one
	cfg.Status.HeartbeatStaleAfter = 3 * time.Second
	return cfg
}

// startServer runs a Daemon until the test ends. clients may be an empty
// cri.Clients for tests that never reach the runtime.
func startServer(t *testing.T, cfg *config.Config, clients *cri.Clients, mut func(*Options)) *testServer {
	t.Helper()
	b := bustest.StartIn(t, cfg.Node.StateDir)
	o := Options{Deps: daemon.Deps{Config: cfg, Log: bustest.Logger(), Bus: b.Connect(bus.KubeletServer)}, CRI: clients}
	if mut != nil {
		mut(&o)
	}
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("Run did not return 30s after its context ended")
		}
	})
	waitFor(t, 10*time.Second, "the kubelet API to listen", func() bool { return s.Addr() != "" })
	f := client.LocalFiles(cfg.Node.StateDir)
	crt, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{crt}}}}
	return &testServer{Daemon: s, t: t, b: b, cfg: cfg, client: c}
}

// get fetches path from the kubelet API (base "") or from base (the
// read-only port, "http://host:port").
func (ts *testServer) get(method, base, path string) (int, string) {
	ts.t.Helper()
	if base == "" {
		base = "https://" + ts.Addr()
	}
	req, err := http.NewRequest(method, base+path, nil)
	if err != nil {
		ts.t.Fatal(err)
	}
	resp, err := ts.client.Do(req)
	if err != nil {
		ts.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		ts.t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func (ts *testServer) getJSON(path string, into any) {
	ts.t.Helper()
	code, body := ts.get(http.MethodGet, "", path)
	if code != http.StatusOK {
		ts.t.Fatalf("GET %s: %d %s", path, code, body)
	}
	if err := json.Unmarshal([]byte(body), into); err != nil {
		ts.t.Fatalf("GET %s does not decode into %T: %v\n%s", path, into, err, body)
	}
}

// metrics fetches path and parses it with the Prometheus text parser.
func (ts *testServer) metrics(path string) map[string]*dto.MetricFamily {
	ts.t.Helper()
	code, body := ts.get(http.MethodGet, "", path)
	if code != http.StatusOK {
		ts.t.Fatalf("GET %s: %d %s", path, code, body)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		ts.t.Fatalf("GET %s: %v\n%s", path, err, body)
	}
	return fams
}

// series returns the value of the series of family name whose labels
// include want, and whether there is one.
func series(fams map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	for _, m := range fams[name].GetMetric() {
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		match := true
		for k, v := range want {
			match = match && got[k] == v
		}
		if !match {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Untyped != nil:
			return m.Untyped.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		}
	}
	return 0, false
}

func waitFor(t *testing.T, timeout time.Duration, what string, ok func() bool) {
	t.Helper()
	eventually.True(t, timeout, what, ok)
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestHealthz: /healthz is "ok" once every watched daemon has beaten
// within status.heartbeatStaleAfter and the runtime is up; a daemon that
// stops beating, says it is not ready, or a runtime that is down fails it,
// named. The heartbeats and the runtime state come over the bus as the
// daemons publish them.
func TestHealthz(t *testing.T) {
	ts := startServer(t, testConfig(t), &cri.Clients{}, func(o *Options) { o.Daemons = []string{bus.Sources, bus.GC} })
	sources, gc, runtime := ts.b.Connect(bus.Sources), ts.b.Connect(bus.GC), ts.b.Connect(bus.Runtime)
	beat := func(c *bus.Conn, ready bool, msg string) {
		if err := c.PublishHeartbeat(schemas.Heartbeat{Component: c.Component, PID: os.Getpid(), Ready: ready, Message: msg}); err != nil {
			t.Fatal(err)
		}
	}
	putRuntime := func(rs *schemas.RuntimeState) {
		if _, err := runtime.Put(t.Context(), bus.BucketRuntime, bus.KeyRuntimeState, rs); err != nil {
			t.Fatal(err)
		}
	}
	putRuntime(&schemas.RuntimeState{RuntimeReady: true, NetworkReady: true})
	started := time.Now()
	gcBeats := make(chan bool, 1)
	gcBeats <- true
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		tk := time.NewTicker(300 * time.Millisecond)
		defer tk.Stop()
		on := true
		for {
			select {
			case on = <-gcBeats:
			default:
			}
			beat(sources, true, "")
			if on {
				beat(gc, true, "")
			}
			select {
			case <-stop:
				return
			case <-tk.C:
			}
		}
	}()
	// Past the stale window since the server started, "ok" means every
	// daemon was heard from.
	waitFor(t, 20*time.Second, "healthz ok with every daemon heard from", func() bool {
		code, body := ts.get(http.MethodGet, "", "/healthz")
		return code == http.StatusOK && body == "ok" && time.Since(started) > ts.cfg.Status.HeartbeatStaleAfter+time.Second
	})
	if code, body := ts.get(http.MethodGet, "", "/healthz?verbose"); code != http.StatusOK ||
		body != "[+]ping ok\n[+]nodelet-sources ok\n[+]nodelet-gc ok\n[+]runtime ok\nhealthz check passed\n" {
		t.Errorf("healthz?verbose = %d %q", code, body)
	}
	gcBeats <- false
	var body string
	waitFor(t, 15*time.Second, "healthz to fail on nodelet-gc", func() bool {
		var code int
		code, body = ts.get(http.MethodGet, "", "/healthz")
		return code == http.StatusInternalServerError
	})
	if !strings.Contains(body, "[-]nodelet-gc failed: last heartbeat") || strings.Contains(body, "[-]nodelet-sources") {
		t.Errorf("healthz body:\n%s", body)
	}
	beat(gc, false, "cannot reach the image filesystem")
	waitFor(t, 10*time.Second, "healthz to say nodelet-gc is not ready", func() bool {
		_, body = ts.get(http.MethodGet, "", "/healthz")
		return strings.Contains(body, "[-]nodelet-gc failed: not ready: cannot reach the image filesystem")
	})
	putRuntime(&schemas.RuntimeState{RuntimeReady: false, Reason: "RuntimeDown", Message: "containerd socket gone"})
	waitFor(t, 10*time.Second, "healthz to name the runtime", func() bool {
		_, body = ts.get(http.MethodGet, "", "/healthz")
		return strings.Contains(body, "[-]runtime failed: container runtime is down: RuntimeDown: containerd socket gone")
	})
}

// TestPodsAndFederatedMetrics: /pods is the desired pods (mirror pods left
// out) with the status nodelet-status wrote; /metrics gathers every
// daemon's nodelet_* metrics from its socket; /metrics/probes renames the
// prober's to the kubelet's prober_probe_total; bad requests get 4xx.
func TestPodsAndFederatedMetrics(t *testing.T) {
	ts := startServer(t, testConfig(t), &cri.Clients{}, nil)
	sources, status := ts.b.Connect(bus.Sources), ts.b.Connect(bus.Status)
	web := testPod("default", "web", "uid-web")
	mirror := testPod("default", "static-node-1", "uid-mirror")
	mirror.Annotations = map[string]string{podutil.AnnotationConfigMirror: "x"}
	waiting := testPod("team", "later", "uid-later")
	for _, p := range []*corev1.Pod{web, mirror, waiting} {
		if _, err := sources.Put(t.Context(), bus.BucketDesired, string(p.UID), &schemas.PodDesired{Pod: p, Source: schemas.SourceAPI}); err != nil {
			t.Fatal(err)
		}
	}
	st := web.Status.DeepCopy()
	st.Phase, st.PodIP = "Running", "10.88.0.7"
	if _, err := status.Put(t.Context(), bus.BucketStatus, "uid-web", &schemas.PodStatusRecord{UID: "uid-web", Namespace: "default", Name: "web", Status: *st}); err != nil {
		t.Fatal(err)
	}
	var list corev1.PodList
	waitFor(t, 10*time.Second, "/pods with web Running", func() bool {
		ts.getJSON("/pods", &list)
		return len(list.Items) == 2 && list.Items[0].Status.Phase == "Running"
	})
	if list.Kind != "PodList" || list.Items[0].Name != "web" || list.Items[0].Status.PodIP != "10.88.0.7" ||
		list.Items[1].Name != "later" || list.Items[1].Status.Phase != "Pending" {
		t.Errorf("/pods = %+v", list)
	}

	// nodelet-status's and nodelet-prober's metrics sockets, as their
	// daemon frames serve them.
	statusReg, proberReg := prometheus.NewRegistry(), prometheus.NewRegistry()
	running := prometheus.NewGauge(prometheus.GaugeOpts{Name: "nodelet_running_pods", Help: "h"})
	running.Set(3)
	probes := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nodelet_prober_probe_total", Help: "h"},
		[]string{"probe_type", "result", "container", "pod", "namespace", "pod_uid"})
	probes.WithLabelValues("Readiness", "successful", "app", "web", "default", "uid-web").Add(4)
	statusReg.MustRegister(running)
	proberReg.MustRegister(probes)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for c, g := range map[string]prometheus.Gatherer{bus.Status: statusReg, bus.Prober: proberReg} {
		if err := daemon.ServeMetrics(ctx, ts.cfg.Node.StateDir, c, g); err != nil {
			t.Fatal(err)
		}
	}
	fams := ts.metrics("/metrics")
	if v, ok := series(fams, "nodelet_running_pods", nil); !ok || v != 3 {
		t.Errorf("/metrics nodelet_running_pods = %v %v", v, ok)
	}
	if _, ok := fams["go_goroutines"]; !ok {
		t.Error("/metrics has no go_goroutines")
	}
	// The /pods requests above, as the kubelet's server counts them.
	if v, ok := series(fams, "kubelet_http_requests_total", map[string]string{"method": "GET", "path": "pods"}); !ok || v < 1 {
		t.Errorf("/metrics kubelet_http_requests_total{GET,pods} = %v %v", v, ok)
	}
	fams = ts.metrics("/metrics/probes")
	if v, ok := series(fams, "prober_probe_total", map[string]string{"probe_type": "Readiness", "result": "successful",
		"container": "app", "pod": "web", "namespace": "default", "pod_uid": "uid-web"}); !ok || v != 4 {
		t.Errorf("/metrics/probes prober_probe_total = %v %v: %v", v, ok, fams)
	}
	if _, ok := fams["nodelet_running_pods"]; ok || len(fams) != 1 {
		t.Errorf("/metrics/probes has more than the prober's families: %v", fams)
	}

	for _, tc := range []struct {
		method, path string
		code         int
		msg          string
	}{
		{http.MethodPost, "/pods", http.StatusMethodNotAllowed, ""},
		{http.MethodGet, "/nope", http.StatusNotFound, "404 page not found"},
		{http.MethodGet, "/pods/extra", http.StatusNotFound, "404 page not found"},
		{http.MethodGet, "/stats/summary?only_cpu_and_memory=maybe", http.StatusBadRequest, "is not a boolean"},
		{http.MethodGet, "/stats/summary?x=1", http.StatusBadRequest, "unknown query parameter"},
	} {
		code, body := ts.get(tc.method, "", tc.path)
		if code != tc.code || !strings.Contains(body, tc.msg) {
			t.Errorf("%s %s = %d %q, want %d with %q", tc.method, tc.path, code, body, tc.code, tc.msg)
		}
	}
}

// TestReadOnlyPort: off unless configured (the kubelet's config default
// readOnlyPort 0); server.readOnlyPort serves the read-only paths over HTTP
// without credentials and nothing else; the deprecated
// status.readOnlyAddress still works.
func TestReadOnlyPort(t *testing.T) {
	cfg := testConfig(t)
	ts := startServer(t, cfg, &cri.Clients{}, nil)
	if a := ts.ReadOnlyAddr(); a != "" {
		t.Fatalf("read-only port open without configuration: %s", a)
	}
	if addr, key := cfg.ReadOnlyAddress(); addr != "" || key != "" {
		t.Errorf("config.ReadOnlyAddress() = %q %q by default", addr, key)
	}

	for _, tc := range []struct {
		set        func(*config.Config)
		deprecated bool
	}{
		{func(c *config.Config) { c.Server.ReadOnlyPort = freePort(t) }, false},
		{func(c *config.Config) { c.Status.ReadOnlyAddress = "127.0.0.1:0" }, true},
	} {
		cfg := testConfig(t)
		tc.set(cfg)
		logs := &testenv.Buffer{}
		ts := startServer(t, cfg, &cri.Clients{}, func(o *Options) { o.Log = slog.New(slog.NewTextHandler(logs, nil)) })
		waitFor(t, 10*time.Second, "the read-only port", func() bool { return ts.ReadOnlyAddr() != "" })
		if warned := strings.Contains(logs.String(), `msg="Deprecated configuration key: set server.readOnlyPort (served on server.address) instead" key=status.readOnlyAddress`); warned != tc.deprecated {
			t.Errorf("deprecation warning logged = %v, want %v:\n%s", warned, tc.deprecated, logs.String())
		}
		base := "http://" + ts.ReadOnlyAddr()
		plain := &http.Client{Timeout: 10 * time.Second}
		for path, want := range map[string]int{"/pods": 200, "/healthz": 200, "/spec/": 200, "/metrics": 200,
			"/containerLogs/default/p/c": 404, "/runningpods/": 404, "/configz": 404, "/logs/": 404} {
			resp, err := plain.Get(base + path)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != want {
				t.Errorf("read-only port %s: %d, want %d", path, resp.StatusCode, want)
			}
		}
	}
}

// TestSystemLogs: /logs/ serves the system log directory
// (server.enableSystemLogHandler, on by default as the kubelet's), and
// answers the kubelet's 405 when turned off.
func TestSystemLogs(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "syslog"), []byte("a system line\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, testConfig(t), &cri.Clients{}, func(o *Options) { o.SystemLogDir = dir })
	if code, body := ts.get(http.MethodGet, "", "/logs/syslog"); code != 200 || body != "a system line\n" {
		t.Errorf("/logs/syslog = %d %q", code, body)
	}
	if code, body := ts.get(http.MethodGet, "", "/logs/"); code != 200 || !strings.Contains(body, `href="syslog"`) {
		t.Errorf("/logs/ = %d %q", code, body)
	}
	cfg := testConfig(t)
	cfg.Server.EnableSystemLogHandler = false
	off := startServer(t, cfg, &cri.Clients{}, func(o *Options) { o.SystemLogDir = dir })
	if code, body := off.get(http.MethodGet, "", "/logs/syslog"); code != http.StatusMethodNotAllowed || body != "logs endpoint is disabled.\n" {
		t.Errorf("disabled /logs/syslog = %d %q", code, body)
	}
}

func testPod(ns, name, uid string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid)},
		Spec: corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "app", Image: "busybox"}}}}
}

// TestContainerdReadOnlyAPI runs a real pod in a real containerd and reads
// it back as the kubelet's read-only paths show it: /stats/summary from CRI
// stats, /runningpods/ from the runtime, /metrics/cadvisor through
// cAdvisor's collector with the kubelet's labels, /metrics/resource and
// /spec/.
func TestContainerdReadOnlyAPI(t *testing.T) {
	testenv.RequiresRoot(t)
	ctrd := testenv.NewContainerd(t, testenv.ContainerdOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	clients := ctrd.Clients(ctx, t)
	cfg := testConfig(t)
	const ns, name, uid = "default", "stats", "uid-stats"
	cid := testenv.RunBusyboxPod(ctx, t, clients.Runtime, cfg.Node.PodLogsDir, ns, name, uid)
	counted := &countingRuntime{RuntimeService: clients.Runtime}
	ts := startServer(t, cfg, &cri.Clients{Runtime: counted, Image: clients.Image}, nil)

	var sum statsapi.Summary
	var pod *statsapi.PodStats
	waitFor(t, 60*time.Second, "the pod in /stats/summary with cpu and memory", func() bool {
		ts.getJSON("/stats/summary", &sum)
		pod = nil
		for i := range sum.Pods {
			if sum.Pods[i].PodRef.UID == uid {
				pod = &sum.Pods[i]
			}
		}
		return pod != nil && len(pod.Containers) == 1 && pod.Containers[0].CPU != nil && pod.Containers[0].Memory != nil &&
			pod.Containers[0].Memory.WorkingSetBytes != nil && *pod.Containers[0].Memory.WorkingSetBytes > 0
	})
	if sum.Node.NodeName != "node-1" || sum.Node.CPU == nil || sum.Node.CPU.UsageCoreNanoSeconds == nil ||
		sum.Node.Memory == nil || sum.Node.Memory.WorkingSetBytes == nil || sum.Node.Fs == nil || sum.Node.Fs.CapacityBytes == nil {
		t.Errorf("/stats/summary node = %+v", sum.Node)
	}
	if pod.Network == nil || pod.Network.Name != "eth0" || pod.Network.RxBytes == nil {
		t.Errorf("pod network = %+v", pod.Network)
	}
	c := pod.Containers[0]
	if pod.PodRef.Name != name || pod.PodRef.Namespace != ns || c.Name != "app" || c.CPU.UsageCoreNanoSeconds == nil {
		t.Errorf("pod stats = %+v", pod)
	}
	if c.Rootfs == nil || c.Rootfs.UsedBytes == nil {
		t.Errorf("container rootfs = %+v", c.Rootfs)
	}
	if c.Logs == nil || c.Logs.UsedBytes == nil || *c.Logs.UsedBytes == 0 {
		t.Errorf("container logs = %+v (the container wrote a line)", c.Logs)
	}
	if pod.CPU == nil || pod.Memory == nil || pod.EphemeralStorage == nil {
		t.Errorf("pod cpu %+v memory %+v ephemeral %+v", pod.CPU, pod.Memory, pod.EphemeralStorage)
	}
	// (containerd computes the image filesystem's usage in the background,
	// so the bytes used may still read 0 this early.)
	if rt := sum.Node.Runtime; rt == nil || rt.ImageFs == nil || rt.ImageFs.UsedBytes == nil || rt.ImageFs.CapacityBytes == nil || *rt.ImageFs.CapacityBytes == 0 {
		t.Errorf("node runtime fs = %+v", sum.Node.Runtime)
	}
	var only statsapi.Summary
	before := counted.sandboxStats.Load()
	ts.getJSON("/stats/summary?only_cpu_and_memory=true", &only)
	if only.Node.Fs != nil || only.Node.CPU == nil {
		t.Errorf("only_cpu_and_memory still has fs or lacks cpu: %+v", only.Node)
	}
	// CPU and memory alone need no ListPodSandboxStats (dear on
	// containerd 1.6): the pod's figures are its containers' sums.
	if n := counted.sandboxStats.Load() - before; n != 0 {
		t.Errorf("only_cpu_and_memory called ListPodSandboxStats %d times", n)
	}
	if len(only.Pods) != 1 || only.Pods[0].CPU == nil || only.Pods[0].Memory == nil || only.Pods[0].Memory.WorkingSetBytes == nil {
		t.Errorf("only_cpu_and_memory pods = %+v", only.Pods)
	}
	var info cadvisorapi.MachineInfo
	ts.getJSON("/spec/", &info)
	if info.NumCores == 0 || info.MemoryCapacity == 0 {
		t.Errorf("/spec/ = %+v", info)
	}

	// /runningpods/: the runtime's view, as kubecontainer.Pod.ToAPIPod.
	var running corev1.PodList
	ts.getJSON("/runningpods/", &running)
	found := false
	for _, p := range running.Items {
		if p.UID == uid {
			found = true
			if p.Name != name || p.Namespace != ns || len(p.Spec.Containers) != 1 || p.Spec.Containers[0].Name != "app" ||
				!strings.Contains(p.Spec.Containers[0].Image, "busybox") {
				t.Errorf("/runningpods/ pod = %+v", p)
			}
		}
	}
	if !found {
		t.Errorf("/runningpods/ lacks the pod: %+v", running.Items)
	}

	// /metrics/cadvisor with the kubelet's names and labels.
	fams := ts.metrics("/metrics/cadvisor")
	want := map[string]string{"container": "app", "pod": name, "namespace": ns, "id": "/pod" + uid + "/" + cid, "name": cid}
	for _, m := range []string{"container_cpu_usage_seconds_total", "container_memory_working_set_bytes",
		"container_memory_usage_bytes", "container_fs_usage_bytes", "container_start_time_seconds", "container_last_seen"} {
		if _, ok := series(fams, m, want); !ok {
			t.Errorf("/metrics/cadvisor has no %s%v", m, want)
		}
	}
	if v, ok := series(fams, "container_memory_working_set_bytes", want); !ok || v <= 0 {
		t.Errorf("container_memory_working_set_bytes = %v", v)
	}
	podWant := map[string]string{"container": "", "pod": name, "namespace": ns}
	if _, ok := series(fams, "container_network_receive_bytes_total", podWant); !ok {
		t.Errorf("/metrics/cadvisor has no pod-level container_network_receive_bytes_total%v", podWant)
	}
	if v, ok := series(fams, "container_cpu_usage_seconds_total", map[string]string{"id": "/", "pod": ""}); !ok || v <= 0 {
		t.Errorf("/metrics/cadvisor node (id=/) cpu = %v %v", v, ok)
	}
	if v, ok := series(fams, "machine_cpu_cores", nil); !ok || v < 1 {
		t.Errorf("/metrics/cadvisor machine_cpu_cores = %v %v", v, ok)
	}
	fams = ts.metrics("/metrics/resource")
	if _, ok := series(fams, "container_memory_working_set_bytes", map[string]string{"container": "app", "pod": name, "namespace": ns}); !ok {
		t.Errorf("/metrics/resource lacks the container: %v", fams)
	}
}

// countingRuntime counts ListPodSandboxStats and PodSandboxStatus calls.
type countingRuntime struct {
	internalapi.RuntimeService
	sandboxStats  atomic.Int32
	sandboxStatus atomic.Int32
}

func (r *countingRuntime) PodSandboxStatus(ctx context.Context, id string, verbose bool) (*runtimeapi.PodSandboxStatusResponse, error) {
	r.sandboxStatus.Add(1)
	return r.RuntimeService.PodSandboxStatus(ctx, id, verbose)
}

func (r *countingRuntime) ListPodSandboxStats(ctx context.Context, f *runtimeapi.PodSandboxStatsFilter) ([]*runtimeapi.PodSandboxStats, error) {
	r.sandboxStats.Add(1)
	return r.RuntimeService.ListPodSandboxStats(ctx, f)
}
