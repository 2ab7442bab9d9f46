package prober

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/daemon"
	"github.com/nodelet/nodelet/schemas"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// scriptRunner is a probe handler whose outcome the test sets before each
// probe; every call is counted.
type scriptRunner struct {
	mu     sync.Mutex
	out    map[string]outcome // by probe kind; "" = must not run
	output map[string]string
	err    map[string]error
	calls  map[string]int
	onCall func(target)
}

func newScriptRunner() *scriptRunner {
	return &scriptRunner{out: map[string]outcome{}, output: map[string]string{}, err: map[string]error{}, calls: map[string]int{}}
}

func (r *scriptRunner) set(kind string, out outcome, output string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.out[kind], r.output[kind], r.err[kind] = out, output, err
}

func (r *scriptRunner) count(kind string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls[kind]
}

func (r *scriptRunner) run(_ context.Context, t target) (outcome, string, error) {
	r.mu.Lock()
	r.calls[t.kind]++
	out, output, err, cb := r.out[t.kind], r.output[t.kind], r.err[t.kind], r.onCall
	r.mu.Unlock()
	if cb != nil {
		cb(t)
	}
	return out, output, err
}

// eventRecorder collects emitted events.
type eventRecorder struct {
	mu     sync.Mutex
	events []schemas.Event
}

func (e *eventRecorder) Emit(ev schemas.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.events = append(e.events, ev)
}

func (e *eventRecorder) list() []schemas.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]schemas.Event(nil), e.events...)
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

type harness struct {
	t      *testing.T
	clock  *clocktesting.FakeClock
	m      *Daemon
	runner *scriptRunner
	events *eventRecorder
}

func newHarness(t *testing.T) *harness {
	fc := clocktesting.NewFakeClock(t0)
	r := newScriptRunner()
	ev := &eventRecorder{}
	m := newManager(Options{Deps: daemon.Deps{Log: quietLog()}, Clock: fc}, r, ev)
	m.desiredSynced, m.observedSynced = true, true
	return &harness{t: t, clock: fc, m: m, runner: r, events: ev}
}

// setPod puts a pod and its observed state straight into the manager,
// without starting workers.
func (h *harness) setPod(pod *corev1.Pod, obs *schemas.PodObserved) {
	h.m.mu.Lock()
	defer h.m.mu.Unlock()
	ps := h.m.pod(string(pod.UID))
	ps.desired, ps.observed = pod, obs
}

func (h *harness) worker(pod *corev1.Pod, container, kind string) *worker {
	for _, c := range probeContainers(pod) {
		if c.Name == container {
			return newWorker(h.m, probeKey{uid: string(pod.UID), container: container, kind: kind}, pod, c)
		}
	}
	h.t.Fatalf("no container %s", container)
	return nil
}

func (h *harness) result(uid, container, kind string) (schemas.ProbeResult, bool) {
	return h.m.results.get(probeKey{uid: uid, container: container, kind: kind})
}

func execProbe(mod func(*corev1.Probe)) *corev1.Probe {
	p := &corev1.Probe{
		ProbeHandler:     corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}},
		PeriodSeconds:    10,
		TimeoutSeconds:   1,
		SuccessThreshold: 1,
		FailureThreshold: 3,
	}
	if mod != nil {
		mod(p)
	}
	return p
}

func testPod(uid string, c corev1.Container) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-" + uid, Namespace: "default", UID: types.UID(uid)},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{c}, RestartPolicy: corev1.RestartPolicyAlways},
	}
}

func running(name, id string, startedAt time.Time) schemas.ContainerObserved {
	return schemas.ContainerObserved{
		Name: name, Kind: schemas.ContainerKindApp, ContainerID: "containerd://" + id,
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(startedAt)}},
	}
}

func observed(uid string, cs ...schemas.ContainerObserved) *schemas.PodObserved {
	return &schemas.PodObserved{
		UID: uid, Namespace: "default", Name: "web-" + uid,
		Sandbox:    &schemas.SandboxObserved{ID: "sb", Ready: true, IPs: []string{"10.0.0.7"}},
		Containers: cs,
	}
}
