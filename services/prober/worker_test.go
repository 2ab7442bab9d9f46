package prober

import (
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodelet/nodelet/schemas"
)

// step is one tick of a worker in the table below.
type step struct {
	advance time.Duration                         // clock advance before the probe
	mutate  func(*schemas.PodObserved)            // runtime change before the probe
	pod     func(*corev1.Pod)                     // desired change before the probe
	out     outcome                               // handler outcome; "" = it must not run
	output  string                                // handler output
	err     error                                 // handler error
	want    string                                // result published after the step; "" = none
	wantMsg string                                // message of that result, if not ""
	check   func(*testing.T, schemas.ProbeResult) // more checks
}

func TestWorkerSemantics(t *testing.T) {
	replace := func(id string) func(*schemas.PodObserved) {
		return func(o *schemas.PodObserved) { o.Containers[0] = running("c", id, t0) }
	}
	stopped := func(o *schemas.PodObserved) {
		o.Containers[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1}}
	}
	const p = 10 * time.Second
	cases := []struct {
		name       string
		kind       string
		probe      *corev1.Probe
		seed       *schemas.ProbeResult
		startedAgo time.Duration
		steps      []step
	}{
		{
			// The wall clock stepped back an hour, past the container's
			// start: probes go on (the kubelet's would stop for the hour).
			name: "liveness probes on after the clock stepped back an hour", startedAgo: time.Minute,
			kind: schemas.ProbeLiveness, probe: execProbe(func(p *corev1.Probe) { p.FailureThreshold = 1 }),
			steps: []step{
				{out: outcomeSuccess, want: schemas.ProbeSuccess},
				{advance: -time.Hour, out: outcomeFailure, output: "x", want: schemas.ProbeFailure},
			},
		},
		{
			// Stepped back before the initial delay was over: it counts
			// from the step, and is not stretched by it.
			name: "initialDelaySeconds after the clock stepped back an hour",
			kind: schemas.ProbeReadiness, probe: execProbe(func(p *corev1.Probe) { p.InitialDelaySeconds = 15 }),
			steps: []step{
				{advance: -time.Hour, want: schemas.ProbeFailure},
				{advance: p, want: schemas.ProbeFailure},
				{advance: p, out: outcomeSuccess, want: schemas.ProbeSuccess},
			},
		},
		{
			// Stepped forward: the delay is over at once, one probe.
			name: "initialDelaySeconds after the clock stepped forward an hour",
			kind: schemas.ProbeReadiness, probe: execProbe(func(p *corev1.Probe) { p.InitialDelaySeconds = 15 }),
			steps: []step{
				{want: schemas.ProbeFailure},
				{advance: time.Hour, out: outcomeSuccess, want: schemas.ProbeSuccess},
			},
		},
		{
			name: "readiness starts as failure and turns success",
			kind: schemas.ProbeReadiness, probe: execProbe(nil),
			steps: []step{
				{out: outcomeSuccess, want: schemas.ProbeSuccess},
			},
		},
		{
			name: "readiness is failure before initialDelaySeconds, then probed",
			kind: schemas.ProbeReadiness, probe: execProbe(func(p *corev1.Probe) { p.InitialDelaySeconds = 15 }),
			steps: []step{
				{want: schemas.ProbeFailure, wantMsg: ""},
				{advance: p, want: schemas.ProbeFailure},
				{advance: p, out: outcomeSuccess, want: schemas.ProbeSuccess},
			},
		},
		{
			name: "liveness starts as success",
			kind: schemas.ProbeLiveness, probe: execProbe(func(p *corev1.Probe) { p.InitialDelaySeconds = 5 }),
			steps: []step{{want: schemas.ProbeSuccess}},
		},
		{
			name: "startup starts as unknown",
			kind: schemas.ProbeStartup, probe: execProbe(func(p *corev1.Probe) { p.InitialDelaySeconds = 5 }),
			steps: []step{{want: schemas.ProbeUnknown}},
		},
		{
			name: "liveness fails after failureThreshold failures, then holds",
			kind: schemas.ProbeLiveness, probe: execProbe(nil),
			steps: []step{
				{out: outcomeFailure, output: "boom", want: schemas.ProbeSuccess},
				{advance: p, out: outcomeFailure, output: "boom", want: schemas.ProbeSuccess},
				{advance: p, out: outcomeFailure, output: "HTTP probe failed with statuscode: 500", want: schemas.ProbeFailure,
					wantMsg: "Liveness probe failed: HTTP probe failed with statuscode: 500"},
				// On hold until the runtime replaces the container.
				{advance: p, want: schemas.ProbeFailure},
				{advance: p, want: schemas.ProbeFailure},
				// A new container starts over: success, and probing again.
				{advance: p, mutate: replace("b"), out: outcomeSuccess, want: schemas.ProbeSuccess,
					check: func(t *testing.T, r schemas.ProbeResult) {
						if r.ContainerID != "containerd://b" {
							t.Errorf("ContainerID = %s, want containerd://b", r.ContainerID)
						}
					}},
				{advance: p, out: outcomeFailure, output: "x", want: schemas.ProbeSuccess},
			},
		},
		{
			name: "a success breaks a run of failures",
			kind: schemas.ProbeLiveness, probe: execProbe(func(p *corev1.Probe) { p.FailureThreshold = 2 }),
			steps: []step{
				{out: outcomeFailure, output: "x", want: schemas.ProbeSuccess},
				{advance: p, out: outcomeSuccess, want: schemas.ProbeSuccess},
				{advance: p, out: outcomeFailure, output: "x", want: schemas.ProbeSuccess},
				{advance: p, out: outcomeFailure, output: "x", want: schemas.ProbeFailure},
			},
		},
		{
			name: "readiness needs successThreshold successes and keeps probing",
			kind: schemas.ProbeReadiness, probe: execProbe(func(p *corev1.Probe) { p.SuccessThreshold = 2; p.FailureThreshold = 1 }),
			steps: []step{
				{out: outcomeSuccess, want: schemas.ProbeFailure},
				{advance: p, out: outcomeSuccess, want: schemas.ProbeSuccess},
				{advance: p, out: outcomeFailure, output: "down", want: schemas.ProbeFailure, wantMsg: "Readiness probe failed: down"},
				{advance: p, out: outcomeSuccess, want: schemas.ProbeFailure},
				{advance: p, out: outcomeSuccess, want: schemas.ProbeSuccess},
			},
		},
		{
			name: "startup success holds: the startup probe does not run again",
			kind: schemas.ProbeStartup, probe: execProbe(func(p *corev1.Probe) { p.FailureThreshold = 30 }),
			steps: []step{
				{out: outcomeFailure, output: "not yet", want: schemas.ProbeUnknown},
				{advance: p, out: outcomeSuccess, want: schemas.ProbeSuccess},
				{advance: p, want: schemas.ProbeSuccess},
			},
		},
		{
			name: "startup that never succeeds fails after failureThreshold periods and holds",
			kind: schemas.ProbeStartup, probe: execProbe(func(p *corev1.Probe) { p.FailureThreshold = 3 }),
			steps: []step{
				{out: outcomeFailure, output: "x", want: schemas.ProbeUnknown},
				{advance: p, out: outcomeFailure, output: "x", want: schemas.ProbeUnknown},
				{advance: p, out: outcomeFailure, output: "x", want: schemas.ProbeFailure, wantMsg: "Startup probe failed: x"},
				{advance: p, want: schemas.ProbeFailure},
			},
		},
		{
			name: "a probe error is thrown away",
			kind: schemas.ProbeReadiness, probe: execProbe(func(p *corev1.Probe) { p.FailureThreshold = 1 }),
			steps: []step{
				{out: outcomeSuccess, want: schemas.ProbeSuccess},
				{advance: p, out: outcomeUnknown, err: errors.New("runtime down"), want: schemas.ProbeSuccess},
			},
		},
		{
			name: "unknown without error is a failure, warning a success",
			kind: schemas.ProbeReadiness, probe: execProbe(func(p *corev1.Probe) { p.FailureThreshold = 1 }),
			steps: []step{
				{out: outcomeWarning, output: "Probe terminated redirects", want: schemas.ProbeSuccess},
				{advance: p, out: outcomeUnknown, want: schemas.ProbeFailure},
			},
		},
		{
			name: "a stopped container is not ready and not probed; liveness untouched",
			kind: schemas.ProbeReadiness, probe: execProbe(nil),
			steps: []step{
				{out: outcomeSuccess, want: schemas.ProbeSuccess},
				{advance: p, mutate: stopped, want: schemas.ProbeFailure},
			},
		},
		{
			name: "liveness of a stopped container is left as it is",
			kind: schemas.ProbeLiveness, probe: execProbe(nil),
			steps: []step{
				{out: outcomeSuccess, want: schemas.ProbeSuccess},
				{advance: p, mutate: stopped, want: schemas.ProbeSuccess},
			},
		},
		{
			name: "deletion: liveness says success once and stops probing",
			kind: schemas.ProbeLiveness, probe: execProbe(func(p *corev1.Probe) { p.FailureThreshold = 2 }),
			steps: []step{
				{out: outcomeFailure, output: "x", want: schemas.ProbeSuccess},
				{advance: p, pod: func(p *corev1.Pod) { now := metav1.NewTime(t0); p.DeletionTimestamp = &now }, want: schemas.ProbeSuccess},
				{advance: p, want: schemas.ProbeSuccess},
			},
		},
		{
			name: "deletion: readiness goes on",
			kind: schemas.ProbeReadiness, probe: execProbe(func(p *corev1.Probe) { p.FailureThreshold = 1 }),
			steps: []step{
				{out: outcomeSuccess, want: schemas.ProbeSuccess},
				{advance: p, mutate: func(o *schemas.PodObserved) { o.Terminating = true }, out: outcomeFailure, output: "x", want: schemas.ProbeFailure},
			},
		},
		{
			name: "liveness carries the probe-level terminationGracePeriodSeconds",
			kind: schemas.ProbeLiveness, probe: execProbe(func(p *corev1.Probe) { g := int64(7); p.TerminationGracePeriodSeconds = &g; p.FailureThreshold = 1 }),
			steps: []step{
				{out: outcomeFailure, output: "x", want: schemas.ProbeFailure, check: func(t *testing.T, r schemas.ProbeResult) {
					if r.TerminationGracePeriodSeconds == nil || *r.TerminationGracePeriodSeconds != 7 {
						t.Errorf("TerminationGracePeriodSeconds = %v, want 7", r.TerminationGracePeriodSeconds)
					}
				}},
			},
		},
		{
			name: "restart: a stored result of the same container stands and thresholds count anew",
			kind: schemas.ProbeLiveness, probe: execProbe(nil),
			seed: &schemas.ProbeResult{ContainerID: "containerd://a", Result: schemas.ProbeSuccess, Since: t0.Add(-time.Hour)},
			steps: []step{
				{out: outcomeFailure, output: "x", want: schemas.ProbeSuccess, check: func(t *testing.T, r schemas.ProbeResult) {
					if !r.Since.Equal(t0.Add(-time.Hour)) {
						t.Errorf("stored result was replaced: since %v", r.Since)
					}
				}},
				{advance: p, out: outcomeFailure, output: "x", want: schemas.ProbeSuccess},
				{advance: p, out: outcomeFailure, output: "x", want: schemas.ProbeFailure},
			},
		},
		{
			name: "restart: a stored liveness failure of the same container holds (the runtime restarts it)",
			kind: schemas.ProbeLiveness, probe: execProbe(nil),
			seed: &schemas.ProbeResult{ContainerID: "containerd://a", Result: schemas.ProbeFailure},
			steps: []step{
				{want: schemas.ProbeFailure},
				{advance: p, mutate: replace("b"), out: outcomeSuccess, want: schemas.ProbeSuccess},
			},
		},
		{
			name: "restart: a stored ready result is kept, not reset to failure",
			kind: schemas.ProbeReadiness, probe: execProbe(func(p *corev1.Probe) { p.InitialDelaySeconds = 3600 * 24 }),
			seed:       &schemas.ProbeResult{ContainerID: "containerd://a", Result: schemas.ProbeSuccess},
			startedAgo: time.Minute,
			steps:      []step{{want: schemas.ProbeSuccess}},
		},
		{
			name: "restart: no result for a container that ran before the prober started: no reset",
			kind: schemas.ProbeReadiness, probe: execProbe(func(p *corev1.Probe) { p.InitialDelaySeconds = 3600 * 24 }),
			startedAgo: time.Minute,
			steps:      []step{{want: ""}},
		},
		{
			name: "restart: a stored result of an older container is replaced by the initial one",
			kind: schemas.ProbeReadiness, probe: execProbe(func(p *corev1.Probe) { p.InitialDelaySeconds = 60 }),
			seed: &schemas.ProbeResult{ContainerID: "containerd://old", Result: schemas.ProbeSuccess},
			steps: []step{{want: schemas.ProbeFailure, check: func(t *testing.T, r schemas.ProbeResult) {
				if r.ContainerID != "containerd://a" {
					t.Errorf("ContainerID = %s", r.ContainerID)
				}
			}}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			c := corev1.Container{Name: "c", Image: "busybox"}
			switch tc.kind {
			case schemas.ProbeLiveness:
				c.LivenessProbe = tc.probe
			case schemas.ProbeReadiness:
				c.ReadinessProbe = tc.probe
			case schemas.ProbeStartup:
				c.StartupProbe = tc.probe
			}
			pod := testPod("u1", c)
			obs := observed("u1", running("c", "a", t0.Add(-tc.startedAgo)))
			h.setPod(pod, obs)
			key := probeKey{uid: "u1", container: "c", kind: tc.kind}
			if tc.seed != nil {
				s := *tc.seed
				s.UID, s.Namespace, s.Container, s.Probe = "u1", "default", "c", tc.kind
				h.m.results.seed(key, s)
			}
			w := h.worker(pod, "c", tc.kind)
			for i, st := range tc.steps {
				h.clock.Step(st.advance)
				if st.mutate != nil || st.pod != nil {
					h.m.mu.Lock()
					o := *h.m.pods["u1"].observed
					o.Containers = append([]schemas.ContainerObserved(nil), o.Containers...)
					if st.mutate != nil {
						st.mutate(&o)
					}
					h.m.pods["u1"].observed = &o
					if st.pod != nil {
						d := h.m.pods["u1"].desired.DeepCopy()
						st.pod(d)
						h.m.pods["u1"].desired = d
					}
					h.m.mu.Unlock()
				}
				before := h.runner.count(tc.kind)
				h.runner.set(tc.kind, st.out, st.output, st.err)
				w.doProbe()
				ran := h.runner.count(tc.kind) - before
				switch {
				case st.out == "" && ran != 0:
					t.Errorf("step %d: the probe ran %d times, want not at all", i, ran)
				case st.out != "" && st.err == nil && ran != 1:
					t.Errorf("step %d: the probe ran %d times, want once", i, ran)
				case st.err != nil && ran != maxProbeRetries:
					t.Errorf("step %d: an erroring probe ran %d times, want %d", i, ran, maxProbeRetries)
				}
				r, ok := h.result("u1", "c", tc.kind)
				if st.want == "" {
					if ok && tc.seed == nil {
						t.Errorf("step %d: result %+v published, want none", i, r)
					}
					continue
				}
				if !ok || r.Result != st.want {
					t.Fatalf("step %d: result = %q (found %v), want %q", i, r.Result, ok, st.want)
				}
				if st.wantMsg != "" && r.Message != st.wantMsg {
					t.Errorf("step %d: message = %q, want %q", i, r.Message, st.wantMsg)
				}
				if r.UID != "u1" || r.Container != "c" || r.Probe != tc.kind || r.Namespace != "default" {
					t.Errorf("step %d: result names %+v", i, r)
				}
				if st.check != nil {
					st.check(t, r)
				}
			}
		})
	}
}

// The startup probe gates liveness and readiness: they do not run before
// it succeeded, and run after.
func TestStartupGatesLivenessAndReadiness(t *testing.T) {
	h := newHarness(t)
	c := corev1.Container{Name: "c",
		StartupProbe:   execProbe(func(p *corev1.Probe) { p.FailureThreshold = 10 }),
		LivenessProbe:  execProbe(nil),
		ReadinessProbe: execProbe(nil),
	}
	pod := testPod("u1", c)
	h.setPod(pod, observed("u1", running("c", "a", t0)))
	su, li, re := h.worker(pod, "c", schemas.ProbeStartup), h.worker(pod, "c", schemas.ProbeLiveness), h.worker(pod, "c", schemas.ProbeReadiness)
	h.runner.set(schemas.ProbeStartup, outcomeFailure, "not yet", nil)
	h.runner.set(schemas.ProbeLiveness, outcomeFailure, "dead", nil)
	h.runner.set(schemas.ProbeReadiness, outcomeSuccess, "", nil)
	for i := 0; i < 5; i++ {
		su.doProbe()
		li.doProbe()
		re.doProbe()
		h.clock.Step(10 * time.Second)
	}
	if n := h.runner.count(schemas.ProbeLiveness) + h.runner.count(schemas.ProbeReadiness); n != 0 {
		t.Fatalf("liveness/readiness ran %d times before the startup probe succeeded", n)
	}
	if r, _ := h.result("u1", "c", schemas.ProbeReadiness); r.Result != schemas.ProbeFailure {
		t.Fatalf("readiness = %q before startup, want failure", r.Result)
	}
	h.runner.set(schemas.ProbeStartup, outcomeSuccess, "", nil)
	su.doProbe()
	if r, _ := h.result("u1", "c", schemas.ProbeStartup); r.Result != schemas.ProbeSuccess {
		t.Fatalf("startup = %q, want success", r.Result)
	}
	for i := 0; i < 3; i++ {
		li.doProbe()
		re.doProbe()
		su.doProbe()
		h.clock.Step(10 * time.Second)
	}
	if n := h.runner.count(schemas.ProbeLiveness); n != 3 {
		t.Errorf("liveness ran %d times after startup, want 3", n)
	}
	if r, _ := h.result("u1", "c", schemas.ProbeLiveness); r.Result != schemas.ProbeFailure {
		t.Errorf("liveness = %q, want failure after 3 failures", r.Result)
	}
	if r, _ := h.result("u1", "c", schemas.ProbeReadiness); r.Result != schemas.ProbeSuccess {
		t.Errorf("readiness = %q, want success", r.Result)
	}
	if n := h.runner.count(schemas.ProbeStartup); n != 6 {
		t.Errorf("startup ran %d times, want 6 (5 failures, 1 success, then never again)", n)
	}

	// A new container must pass its startup probe again.
	h.m.mu.Lock()
	h.m.pods["u1"].observed = observed("u1", running("c", "b", h.clock.Now()))
	h.m.mu.Unlock()
	before := h.runner.count(schemas.ProbeLiveness)
	h.runner.set(schemas.ProbeStartup, outcomeFailure, "not yet", nil)
	su.doProbe()
	li.doProbe()
	re.doProbe()
	if h.runner.count(schemas.ProbeLiveness) != before {
		t.Errorf("liveness ran on a new container before its startup probe succeeded")
	}
	if r, _ := h.result("u1", "c", schemas.ProbeStartup); r.Result != schemas.ProbeUnknown || r.ContainerID != "containerd://b" {
		t.Errorf("startup of the new container = %+v, want unknown for containerd://b", r)
	}
}

// Every failed probe is an Unhealthy event naming the failure, within the
// pod's event budget; the one that changes the result always goes out.
func TestUnhealthyEvents(t *testing.T) {
	h := newHarness(t)
	c := corev1.Container{Name: "c", LivenessProbe: execProbe(func(p *corev1.Probe) { p.FailureThreshold = 40 })}
	pod := testPod("u1", c)
	h.setPod(pod, observed("u1", running("c", "a", t0)))
	w := h.worker(pod, "c", schemas.ProbeLiveness)
	h.runner.set(schemas.ProbeLiveness, outcomeFailure, "cat: can't open '/tmp/healthy': No such file or directory", nil)
	for i := 0; i < 40; i++ {
		w.doProbe()
		h.clock.Step(time.Second)
	}
	evs := h.events.list()
	// The burst of 25 (the budget refills one per 5 minutes, not within
	// these 40s), plus the 40th failure, which changed the result.
	if len(evs) != eventBurst+1 {
		t.Fatalf("%d events, want %d", len(evs), eventBurst+1)
	}
	ev := evs[0]
	want := schemas.Event{
		Object: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: "default", Name: "web-u1", UID: "u1", FieldPath: "spec.containers{c}"},
		Type:   "Warning", Reason: "Unhealthy",
		Message: "Liveness probe failed: cat: can't open '/tmp/healthy': No such file or directory",
	}
	if ev.Object != want.Object || ev.Type != want.Type || ev.Reason != want.Reason || ev.Message != want.Message {
		t.Errorf("event = %+v\nwant    %+v", ev, want)
	}
	if r, _ := h.result("u1", "c", schemas.ProbeLiveness); r.Result != schemas.ProbeFailure {
		t.Errorf("liveness = %q, want failure", r.Result)
	}

	// Errors and warnings have their own wording.
	h2 := newHarness(t)
	c2 := corev1.Container{Name: "side", RestartPolicy: ptr(corev1.ContainerRestartPolicyAlways), ReadinessProbe: execProbe(nil)}
	pod2 := testPod("u2", corev1.Container{Name: "main"})
	pod2.Spec.InitContainers = []corev1.Container{c2}
	o2 := observed("u2", running("main", "m", t0))
	side := running("side", "s", t0)
	side.Kind = schemas.ContainerKindSidecar
	o2.InitContainers = []schemas.ContainerObserved{side}
	h2.setPod(pod2, o2)
	w2 := h2.worker(pod2, "side", schemas.ProbeReadiness)
	h2.runner.set(schemas.ProbeReadiness, outcomeUnknown, "", errors.New(`port "http" not found`))
	w2.doProbe()
	h2.runner.set(schemas.ProbeReadiness, outcomeWarning, "Probe terminated redirects, Response body: ", nil)
	w2.doProbe()
	evs = h2.events.list()
	if len(evs) != 2 {
		t.Fatalf("events = %+v, want 2", evs)
	}
	if evs[0].Reason != "Unhealthy" || evs[0].Message != `Readiness probe errored and resulted in unknown state: port "http" not found` ||
		evs[0].Object.FieldPath != "spec.initContainers{side}" {
		t.Errorf("error event = %+v", evs[0])
	}
	if evs[1].Reason != "ProbeWarning" || !strings.HasPrefix(evs[1].Message, "Readiness probe warning: Probe terminated redirects") {
		t.Errorf("warning event = %+v", evs[1])
	}
}

func ptr[T any](v T) *T { return &v }

// Probe targets: the raw container ID, the pod IP, named ports resolved by
// the handlers; host-network pods are probed on the host IP.
func TestProbeTarget(t *testing.T) {
	h := newHarness(t)
	h.m.hostIP = "192.0.2.1"
	var got []target
	h.runner.onCall = func(tg target) { got = append(got, tg) }
	c := corev1.Container{Name: "c", ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{
		TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString("http")}}}}
	pod := testPod("u1", c)
	h.setPod(pod, observed("u1", running("c", "abc", t0)))
	h.runner.set(schemas.ProbeReadiness, outcomeSuccess, "", nil)
	h.worker(pod, "c", schemas.ProbeReadiness).doProbe()

	hpod := testPod("u2", c)
	hpod.Spec.HostNetwork = true
	ho := observed("u2", running("c", "def", t0))
	ho.Sandbox.IPs = nil
	h.setPod(hpod, ho)
	h.worker(hpod, "c", schemas.ProbeReadiness).doProbe()
	if len(got) != 2 {
		t.Fatalf("%d probes, want 2", len(got))
	}
	if got[0].containerID != "abc" || got[0].podIP != "10.0.0.7" {
		t.Errorf("target = %+v", got[0])
	}
	if got[1].podIP != "192.0.2.1" {
		t.Errorf("host-network pod probed at %q, want the host IP", got[1].podIP)
	}
	if got[0].spec.PeriodSeconds != defaultPeriodSeconds || got[0].spec.FailureThreshold != defaultFailureThreshold ||
		got[0].spec.TimeoutSeconds != defaultTimeoutSeconds || got[0].spec.SuccessThreshold != defaultSuccessThreshold {
		t.Errorf("defaults not applied: %+v", got[0].spec)
	}
}
