package prober

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/testenv"
	"github.com/nodelet/nodelet/schemas"
)

// Probes against real containers: containerd through CRI, a real bus. The
// test plays nodelet-sources (desired pods) and nodelet-runtime (it creates
// the containers and publishes what it observes).

const wait = 60 * time.Second

func fast(h corev1.ProbeHandler, failureThreshold int32) *corev1.Probe {
	return &corev1.Probe{ProbeHandler: h, PeriodSeconds: 1, TimeoutSeconds: 2, SuccessThreshold: 1, FailureThreshold: failureThreshold}
}

func execH(cmd ...string) corev1.ProbeHandler {
	return corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: cmd}}
}

// A liveness exec probe that starts failing: failure published after
// exactly failureThreshold failed probes, with an Unhealthy event naming
// the failure; no more probes of that container; the restarted container
// (restartCount 1, new ID) starts over with success.
func TestContainerdExecLiveness(t *testing.T) {
	c := containerd(t)
	e := newBusEnv(t)
	pod := criPodSpec(t, corev1.Container{Name: "app", Image: "busybox",
		Command:       []string{"sh", "-c", "touch /tmp/healthy; exec sleep 3600"},
		LivenessProbe: fast(execH("cat", "/tmp/healthy"), 3)},
		// The test's clock: its probes prove periods passed.
		corev1.Container{Name: "clock", Image: "busybox", Command: []string{"sleep", "3600"}, ReadinessProbe: fast(execH("true"), 1)})
	uid := string(pod.UID)
	p := runPod(t, c.RuntimeClient(t), pod)
	p.start("app", 0)
	p.start("clock", 0)
	e.putDesired(pod)
	e.putObserved(p.observed(1))
	_, stop := e.startProber(proberOptions(t, c), nil)
	defer stop()

	key := bus.ProbeKey(uid, "app", schemas.ProbeLiveness)
	first := p.containerID("app")
	e.waitResult(key, first, schemas.ProbeSuccess, wait)
	waitCount(t, uid, "app", schemas.ProbeLiveness, metricResultSuccessful, 2, wait)

	p.exec("app", "rm /tmp/healthy")
	failed := e.waitResult(key, first, schemas.ProbeFailure, wait)
	if got := probeCount(t, uid, "app", schemas.ProbeLiveness, metricResultFailed); got != 3 {
		t.Errorf("failure published after %v failed probes, want failureThreshold 3", got)
	}
	const want = "Liveness probe failed: cat: can't open '/tmp/healthy': No such file or directory"
	if strings.TrimSpace(failed.Message) != want {
		t.Errorf("message = %q, want %q", failed.Message, want)
	}
	waitCount(t, uid, "clock", schemas.ProbeReadiness, metricResultSuccessful, probeCount(t, uid, "clock", schemas.ProbeReadiness, metricResultSuccessful)+3, wait)
	if got := probeCount(t, uid, "app", schemas.ProbeLiveness, metricResultFailed); got != 3 {
		t.Errorf("the failed container was probed on (%v failures): it must be left to the runtime", got)
	}
	var unhealthy []schemas.Event
	for _, ev := range e.eventsFor(uid) {
		if ev.Reason == "Unhealthy" {
			unhealthy = append(unhealthy, ev)
		}
	}
	if len(unhealthy) != 3 {
		t.Errorf("%d Unhealthy events, want 3 (one per failure): %+v", len(unhealthy), unhealthy)
	}
	for _, ev := range unhealthy {
		if strings.TrimSpace(ev.Message) != want || ev.Type != "Warning" || ev.Object.Kind != "Pod" ||
			ev.Object.Name != pod.Name || ev.Object.FieldPath != "spec.containers{app}" {
			t.Errorf("event = %+v", ev)
		}
	}

	// What nodelet-runtime does on that failure: kill, start attempt 1.
	p.kill("app")
	e.putObserved(p.observed(2))
	p.start("app", 1)
	e.putObserved(p.observed(3))
	second := p.containerID("app")
	e.waitResult(key, second, schemas.ProbeSuccess, wait)
	waitCount(t, uid, "app", schemas.ProbeLiveness, metricResultSuccessful, 4, wait)
	if r, _ := e.get(key); r.Result != schemas.ProbeSuccess || r.ContainerID != second {
		t.Errorf("result for the restarted container = %+v", r)
	}
}

// A readiness HTTP probe against busybox httpd: not ready until the file
// exists, ready after, not ready when it goes, ready again.
func TestContainerdHTTPReadiness(t *testing.T) {
	c := containerd(t)
	e := newBusEnv(t)
	pod := criPodSpec(t, corev1.Container{Name: "web", Image: "busybox",
		Command: []string{"httpd", "-f", "-p", "8080", "-h", "/www"},
		Ports:   []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
		ReadinessProbe: fast(corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready.html", Port: intstr.FromString("http"),
			HTTPHeaders: []corev1.HTTPHeader{{Name: "X-Probe", Value: "nodelet"}}}}, 2)})
	uid := string(pod.UID)
	p := runPod(t, c.RuntimeClient(t), pod)
	p.start("web", 0)
	e.putDesired(pod)
	e.putObserved(p.observed(1))
	_, stop := e.startProber(proberOptions(t, c), nil)
	defer stop()

	key := bus.ProbeKey(uid, "web", schemas.ProbeReadiness)
	id := p.containerID("web")
	e.waitResult(key, id, schemas.ProbeFailure, wait)
	waitCount(t, uid, "web", schemas.ProbeReadiness, metricResultFailed, 2, wait)
	if r, _ := e.get(key); r.Result != schemas.ProbeFailure {
		t.Fatalf("ready without /ready.html: %+v", r)
	}

	p.exec("web", "echo ok > /www/ready.html")
	e.waitResult(key, id, schemas.ProbeSuccess, wait)
	p.exec("web", "rm /www/ready.html")
	notReady := e.waitResult(key, id, schemas.ProbeFailure, wait)
	if notReady.Message != "Readiness probe failed: HTTP probe failed with statuscode: 404" {
		t.Errorf("message = %q", notReady.Message)
	}
	p.exec("web", "echo ok > /www/ready.html")
	e.waitResult(key, id, schemas.ProbeSuccess, wait)

	var seq []string
	for _, r := range e.published(key) {
		seq = append(seq, r.Result)
	}
	if got := strings.Join(seq, " "); got != "failure success failure success" {
		t.Errorf("published %q, want one write per change: failure success failure success", got)
	}
}

// The startup probe gates liveness and readiness; a startup probe that
// never succeeds fails after failureThreshold periods.
func TestContainerdStartupProbe(t *testing.T) {
	c := containerd(t)
	e := newBusEnv(t)
	pod := criPodSpec(t,
		corev1.Container{Name: "slow", Image: "busybox", Command: []string{"sleep", "3600"},
			StartupProbe:   fast(execH("cat", "/tmp/started"), 100),
			LivenessProbe:  fast(execH("cat", "/tmp/alive"), 2),
			ReadinessProbe: fast(execH("true"), 1)},
		corev1.Container{Name: "never", Image: "busybox", Command: []string{"sleep", "3600"},
			StartupProbe:  fast(execH("cat", "/tmp/never"), 3),
			LivenessProbe: fast(execH("true"), 1)})
	uid := string(pod.UID)
	p := runPod(t, c.RuntimeClient(t), pod)
	p.start("slow", 0)
	p.start("never", 0)
	e.putDesired(pod)
	e.putObserved(p.observed(1))
	_, stop := e.startProber(proberOptions(t, c), nil)
	defer stop()
	slow, never := p.containerID("slow"), p.containerID("never")
	startup := bus.ProbeKey(uid, "slow", schemas.ProbeStartup)
	live := bus.ProbeKey(uid, "slow", schemas.ProbeLiveness)
	ready := bus.ProbeKey(uid, "slow", schemas.ProbeReadiness)

	// Before startup succeeded: the initial results, only startup runs.
	waitCount(t, uid, "slow", schemas.ProbeStartup, metricResultFailed, 3, wait)
	e.waitResult(startup, slow, schemas.ProbeUnknown, wait)
	e.waitResult(live, slow, schemas.ProbeSuccess, wait)
	e.waitResult(ready, slow, schemas.ProbeFailure, wait)
	for _, kind := range []string{schemas.ProbeLiveness, schemas.ProbeReadiness} {
		for _, res := range []string{metricResultSuccessful, metricResultFailed} {
			if n := probeCount(t, uid, "slow", kind, res); n != 0 {
				t.Fatalf("%s probe ran %v times (%s) before the startup probe succeeded", kind, n, res)
			}
		}
	}

	// Started: readiness and liveness run (liveness fails: no /tmp/alive).
	p.exec("slow", "touch /tmp/started")
	e.waitResult(startup, slow, schemas.ProbeSuccess, wait)
	e.waitResult(ready, slow, schemas.ProbeSuccess, wait)
	e.waitResult(live, slow, schemas.ProbeFailure, wait)
	startups := probeCount(t, uid, "slow", schemas.ProbeStartup, metricResultSuccessful)
	// Two more periods, counted by the readiness probe of the same container.
	waitCount(t, uid, "slow", schemas.ProbeReadiness, metricResultSuccessful, probeCount(t, uid, "slow", schemas.ProbeReadiness, metricResultSuccessful)+2, wait)
	if n := probeCount(t, uid, "slow", schemas.ProbeStartup, metricResultSuccessful); n != startups || n != 1 {
		t.Errorf("the startup probe ran on after it succeeded: %v successes", n)
	}

	// The one that never starts: failure after failureThreshold probes,
	// liveness never ran.
	failed := e.waitResult(bus.ProbeKey(uid, "never", schemas.ProbeStartup), never, schemas.ProbeFailure, wait)
	if n := probeCount(t, uid, "never", schemas.ProbeStartup, metricResultFailed); n != 3 {
		t.Errorf("startup failure published after %v failed probes, want 3", n)
	}
	if !strings.HasPrefix(failed.Message, "Startup probe failed: cat: can't open '/tmp/never'") {
		t.Errorf("message = %q", failed.Message)
	}
	if n := probeCount(t, uid, "never", schemas.ProbeLiveness, metricResultSuccessful) +
		probeCount(t, uid, "never", schemas.ProbeLiveness, metricResultFailed); n != 0 {
		t.Errorf("liveness of a container that never started ran %v times", n)
	}
	if r, _ := e.get(bus.ProbeKey(uid, "never", schemas.ProbeLiveness)); r.Result != schemas.ProbeSuccess {
		t.Errorf("liveness of the unstarted container = %+v, want the initial success", r)
	}
}

// TCP and gRPC probes against a real container: a static gRPC health
// server mounted into busybox (the server always SERVING, service "shop"
// while /tmp/serving exists), and httpd for TCP.
func TestContainerdTCPAndGRPC(t *testing.T) {
	c := containerd(t)
	binDir := t.TempDir()
	if err := testenv.BuildStatic(binDir, "./services/prober/testdata/grpchealth"); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(binDir, "grpchealth")
	e := newBusEnv(t)
	svc := "shop"
	pod := criPodSpec(t,
		corev1.Container{Name: "grpc", Image: "busybox", Command: []string{"/grpchealth", "-port", "9090", "-service", svc},
			ReadinessProbe: fast(corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: 9090, Service: &svc}}, 1),
			LivenessProbe:  fast(corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: 9090}}, 2)},
		corev1.Container{Name: "tcp", Image: "busybox", Command: []string{"httpd", "-f", "-p", "8080", "-h", "/www"},
			ReadinessProbe: fast(corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8080)}}, 1),
			LivenessProbe:  fast(corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8081)}}, 2)})
	uid := string(pod.UID)
	p := runPod(t, c.RuntimeClient(t), pod)
	p.start("grpc", 0, &runtimeapi.Mount{ContainerPath: "/grpchealth", HostPath: bin, Readonly: true})
	p.start("tcp", 0)
	e.putDesired(pod)
	e.putObserved(p.observed(1))
	_, stop := e.startProber(proberOptions(t, c), nil)
	defer stop()
	grpcID, tcpID := p.containerID("grpc"), p.containerID("tcp")

	// TCP: the open port passes, the closed one fails.
	e.waitResult(bus.ProbeKey(uid, "tcp", schemas.ProbeReadiness), tcpID, schemas.ProbeSuccess, wait)
	tcpFail := e.waitResult(bus.ProbeKey(uid, "tcp", schemas.ProbeLiveness), tcpID, schemas.ProbeFailure, wait)
	if want := "Liveness probe failed: dial tcp " + p.ip + ":8081: connect: connection refused"; tcpFail.Message != want {
		t.Errorf("message = %q, want %q", tcpFail.Message, want)
	}

	// gRPC: NOT_SERVING until the file exists, SERVING, NOT_SERVING again.
	ready := bus.ProbeKey(uid, "grpc", schemas.ProbeReadiness)
	waitCount(t, uid, "grpc", schemas.ProbeReadiness, metricResultFailed, 2, wait)
	if r, _ := e.get(ready); r.Result != schemas.ProbeFailure {
		t.Fatalf("grpc readiness while NOT_SERVING = %+v", r)
	}
	p.exec("grpc", "touch /tmp/serving")
	e.waitResult(ready, grpcID, schemas.ProbeSuccess, wait)
	p.exec("grpc", "rm /tmp/serving")
	r := e.waitResult(ready, grpcID, schemas.ProbeFailure, wait)
	if r.Message != `Readiness probe failed: service unhealthy (responded with "NOT_SERVING")` {
		t.Errorf("message = %q", r.Message)
	}
	// The server itself (service "") passed all along.
	liveKey := bus.ProbeKey(uid, "grpc", schemas.ProbeLiveness)
	waitCount(t, uid, "grpc", schemas.ProbeLiveness, metricResultSuccessful, 2, wait)
	if r, _ := e.get(liveKey); r.Result != schemas.ProbeSuccess || e.puts(liveKey) != 1 {
		t.Errorf("grpc liveness = %+v after %d writes, want the initial success only", r, e.puts(liveKey))
	}
}
