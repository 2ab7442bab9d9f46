package prober

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/podutil"
	"github.com/nodelet/nodelet/schemas"
)

// Probe defaults, as the API server fills them in (a pod from a file or a
// URL has them too, but a bad one must not stop the prober).
const (
	defaultPeriodSeconds    = 10
	defaultTimeoutSeconds   = 1
	defaultSuccessThreshold = 1
	defaultFailureThreshold = 3
)

// worker runs one probe of one container (the kubelet's prober worker):
// it probes every periodSeconds (after a random part of a period when the
// prober has just started, so that a node full of pods does not probe in
// lockstep), turns runs of successThreshold successes or failureThreshold
// failures into a result, and starts over when the container is replaced.
type worker struct {
	m         *Daemon
	key       probeKey
	pod       *corev1.Pod       // the desired pod the worker was made for
	container *corev1.Container // its spec (probes cannot change)
	spec      corev1.Probe      // with defaults applied
	initial   string            // the result of a new container until probed
	fieldPath string            // of the container in the pod, for events
	metrics   *probeMetrics

	ctx     context.Context
	cancel  context.CancelFunc
	stopped atomic.Bool
	pokeCh  chan struct{}

	// Owned by the worker's goroutine.
	containerID string
	lastResult  string
	resultRun   int
	// onHold: after a liveness failure or a startup result the container
	// is not probed again until the runtime replaces it (the kubelet's
	// onHold; probing a container being killed helps nobody).
	onHold bool
	// delayFrom: the wall clock was stepped back past the container's
	// start; the initial delay counts from here (startedAt).
	delayFrom time.Time
	// quiet: the pod is being deleted; liveness and startup said success
	// once and stop.
	quiet bool
}

func newWorker(m *Daemon, k probeKey, pod *corev1.Pod, c *corev1.Container) *worker {
	w := &worker{m: m, key: k, pod: pod, container: c, pokeCh: make(chan struct{}, 1)}
	switch k.kind {
	case schemas.ProbeReadiness:
		w.spec = *c.ReadinessProbe
		w.initial = schemas.ProbeFailure
	case schemas.ProbeLiveness:
		w.spec = *c.LivenessProbe
		w.initial = schemas.ProbeSuccess
	case schemas.ProbeStartup:
		w.spec = *c.StartupProbe
		w.initial = schemas.ProbeUnknown
	}
	if w.spec.PeriodSeconds <= 0 {
		w.spec.PeriodSeconds = defaultPeriodSeconds
	}
	if w.spec.TimeoutSeconds <= 0 {
		w.spec.TimeoutSeconds = defaultTimeoutSeconds
	}
	if w.spec.SuccessThreshold <= 0 {
		w.spec.SuccessThreshold = defaultSuccessThreshold
	}
	if w.spec.FailureThreshold <= 0 {
		w.spec.FailureThreshold = defaultFailureThreshold
	}
	w.fieldPath = fmt.Sprintf("spec.containers{%s}", c.Name)
	if podutil.IsRestartableInit(c) {
		w.fieldPath = fmt.Sprintf("spec.initContainers{%s}", c.Name)
	}
	w.metrics = newProbeMetrics(k.kind, c.Name, pod.Name, pod.Namespace, string(pod.UID))
	w.ctx, w.cancel = context.WithCancel(m.ctx)
	return w
}

// stop ends the worker; an in-flight probe is cancelled and its result
// dropped, and its metric series go (at once, so that a worker made for
// the same probe later keeps its own). Safe to call more than once.
func (w *worker) stop() {
	if w.stopped.CompareAndSwap(false, true) {
		w.metrics.delete()
	}
	w.cancel()
}

// poke makes the worker probe now instead of at its next tick.
func (w *worker) poke() {
	select {
	case w.pokeCh <- struct{}{}:
	default:
	}
}

func (w *worker) period() time.Duration { return time.Duration(w.spec.PeriodSeconds) * time.Second }

// run probes until the worker is stopped or the manager's context ends.
func (w *worker) run() {
	defer w.cancel()
	clk := w.m.clock
	period := w.period()
	// Right after the prober (re)started every worker starts at once:
	// spread the first probes over a period.
	if period > clk.Since(w.m.start) {
		select {
		case <-w.ctx.Done():
			return
		case <-clk.After(time.Duration(w.m.jitter() * float64(period))):
		}
	}
	ticker := clk.NewTicker(period)
	defer func() { ticker.Stop() }()
	for {
		w.doProbe()
		select {
		case <-w.ctx.Done():
			return
		case <-ticker.C():
		case <-w.pokeCh:
			// The next period counts from this probe.
			ticker.Stop()
			ticker = clk.NewTicker(period)
		}
	}
}

// doProbe probes the container once, if it is time to, and records the
// result (the kubelet's worker.doProbe).
func (w *worker) doProbe() {
	defer func() {
		if r := recover(); r != nil {
			w.m.log.Error("Probe worker panicked", "pod", podutil.PodRef(w.pod), "podUID", w.key.uid,
				"containerName", w.key.container, "probeType", w.key.kind, "err", r)
		}
	}()
	began := w.m.clock.Now()
	v, ok := w.m.view(w.key)
	if !ok || v.container == nil || v.container.ContainerID == "" {
		return // not created yet, or gone: the manager stops us
	}
	c := v.container
	if c.ContainerID != w.containerID {
		w.newContainer(c)
	}
	if w.onHold {
		return
	}
	if c.State.Running == nil {
		// A container that is not running is not ready. Liveness and
		// startup are left as they are: whether it starts again is the
		// restart policy's business, and a failure here would read as a
		// request to kill it.
		if w.key.kind == schemas.ProbeReadiness {
			w.set(schemas.ProbeFailure, "")
		}
		return
	}
	if v.deleting && w.key.kind != schemas.ProbeReadiness {
		// Graceful shutdown: a last success keeps the runtime from
		// restarting a container it is stopping anyway; readiness goes on
		// so that a pod failing it during termination turns NotReady.
		if !w.quiet {
			w.set(schemas.ProbeSuccess, "")
			w.quiet = true
		}
		return
	}
	w.quiet = false
	if int32(w.m.clock.Since(w.startedAt(c.State.Running.StartedAt.Time)).Seconds()) < w.spec.InitialDelaySeconds {
		return
	}
	// The startup probe gates the others: until it succeeded only it
	// runs; after that only they do.
	if started := w.m.started(w.key, w.container, w.containerID); started == (w.key.kind == schemas.ProbeStartup) {
		return
	}

	result, message, ok := w.probe(v)
	if !ok {
		return
	}
	switch result {
	case schemas.ProbeSuccess:
		w.metrics.success.Inc()
		w.metrics.duration.Observe(w.m.clock.Since(began).Seconds())
	case schemas.ProbeFailure:
		w.metrics.failed.Inc()
	default:
		w.metrics.unknown.Inc()
		w.metrics.duration.Observe(w.m.clock.Since(began).Seconds())
	}

	if w.lastResult == result {
		w.resultRun++
	} else {
		w.lastResult, w.resultRun = result, 1
	}
	changed := false
	if (result == schemas.ProbeFailure && w.resultRun >= int(w.spec.FailureThreshold)) ||
		(result == schemas.ProbeSuccess && w.resultRun >= int(w.spec.SuccessThreshold)) {
		changed = w.set(result, message)
		if (w.key.kind == schemas.ProbeLiveness && result == schemas.ProbeFailure) || w.key.kind == schemas.ProbeStartup {
			// The container will be restarted (or has started): stop
			// probing until there is a new container ID.
			w.onHold = true
			w.resultRun = 0
		}
	}
	if result == schemas.ProbeFailure && message != "" {
		w.m.emit(w, "Unhealthy", message, changed)
	}
}

// newContainer starts over for a new container: the runs are forgotten
// and the result is the initial one, unless a result for this very
// container is already there (published before the prober restarted: it
// stands) or the container ran before the prober started (no reset, like
// the kubelet after a restart, so that a ready container does not flap).
func (w *worker) newContainer(c *schemas.ContainerObserved) {
	w.containerID = c.ContainerID
	w.delayFrom = time.Time{}
	w.lastResult, w.resultRun, w.onHold, w.quiet = "", 0, false, false
	if prev, ok := w.m.results.get(w.key); ok && prev.ContainerID == w.containerID {
		switch {
		case w.key.kind == schemas.ProbeLiveness && prev.Result == schemas.ProbeFailure,
			w.key.kind == schemas.ProbeStartup && prev.Result != schemas.ProbeUnknown:
			w.onHold = true
		}
		return
	}
	if r := c.State.Running; r != nil && !r.StartedAt.IsZero() && r.StartedAt.Time.Before(w.m.start.Add(-restartGrace)) {
		return
	}
	w.set(w.initial, "")
}

// startedAt is when the initial delay counts from: the container's start
// (CRI's StartedAt, wall time), or, once the wall clock was stepped back
// past it, the moment the worker first saw that. The kubelet counts from
// StartedAt alone (worker.doProbe), so a step back of an hour stops every
// probe for an hour; here it delays them by initialDelaySeconds at most.
func (w *worker) startedAt(started time.Time) time.Time {
	now := w.m.clock.Now()
	if !started.After(now) {
		return started
	}
	if w.delayFrom.IsZero() || w.delayFrom.After(now) {
		w.delayFrom = now
	}
	return w.delayFrom
}

// set records a result for the current container; it returns whether the
// published result changed. Startup success lets readiness run at once.
func (w *worker) set(result, message string) bool {
	pr := schemas.ProbeResult{
		UID:         w.key.uid,
		Namespace:   w.pod.Namespace,
		Name:        w.pod.Name,
		Container:   w.key.container,
		ContainerID: w.containerID,
		Probe:       w.key.kind,
		Result:      result,
		Message:     message,
		Since:       w.m.clock.Now().UTC(),
	}
	if w.key.kind != schemas.ProbeReadiness {
		pr.TerminationGracePeriodSeconds = w.spec.TerminationGracePeriodSeconds
	}
	changed := w.m.results.set(w.key, pr, func() bool { return !w.stopped.Load() })
	if changed {
		w.m.log.Debug("Probe result changed", "pod", podutil.PodRef(w.pod), "podUID", w.key.uid, "containerName", w.key.container,
			"probeType", w.key.kind, "result", result, "containerID", w.containerID)
		if w.key.kind == schemas.ProbeStartup && result == schemas.ProbeSuccess {
			w.m.trigger(w.key.uid, w.key.container, schemas.ProbeReadiness)
		}
	}
	return changed
}

// probe runs the handler, retrying errors, and turns its outcome into a
// result the kubelet's way (prober.probe): success and warning succeed,
// failure and unknown fail, an error throws the run away (ok false). The
// events are the kubelet's: Unhealthy for an error, ProbeWarning for a
// warning (an Unhealthy event for a failure is sent by the caller, who
// knows whether it changed the result).
func (w *worker) probe(v view) (result, message string, ok bool) {
	t := target{
		pod:         w.pod,
		container:   w.container,
		kind:        w.key.kind,
		spec:        &w.spec,
		containerID: rawContainerID(w.containerID),
		podIP:       v.podIP,
	}
	if m := w.m.sem; m != nil {
		select {
		case m <- struct{}{}:
			defer func() { <-m }()
		case <-w.ctx.Done():
			return "", "", false
		}
	}
	var (
		out    outcome
		output string
		err    error
	)
	for i := 0; i < maxProbeRetries; i++ {
		out, output, err = w.m.runner.run(w.ctx, t)
		if err == nil || w.ctx.Err() != nil {
			break
		}
	}
	if w.ctx.Err() != nil {
		return "", "", false // stopped: whatever happened is not the container's doing
	}
	kind := kubeletProbeType(w.key.kind)
	if err != nil {
		w.m.log.Debug("Probe errored", "probeType", kind, "pod", podutil.PodRef(w.pod), "podUID", w.key.uid,
			"containerName", w.key.container, "probeResult", out, "err", err)
		w.m.emit(w, "Unhealthy", fmt.Sprintf("%s probe errored and resulted in %s state: %s", kind, out, err), false)
		return "", "", false
	}
	switch out {
	case outcomeSuccess:
		return schemas.ProbeSuccess, "", true
	case outcomeWarning:
		w.m.emit(w, "ProbeWarning", fmt.Sprintf("%s probe warning: %s", kind, output), false)
		return schemas.ProbeSuccess, "", true
	case outcomeFailure:
		w.m.log.Debug("Probe failed", "probeType", kind, "pod", podutil.PodRef(w.pod), "podUID", w.key.uid,
			"containerName", w.key.container, "output", output)
		return schemas.ProbeFailure, fmt.Sprintf("%s probe failed: %s", kind, output), true
	default:
		return schemas.ProbeFailure, "", true
	}
}

// rawContainerID strips the runtime scheme: containerd://<id> → <id>.
func rawContainerID(s string) string { return podutil.RawContainerID(s) }

// kubeletProbeType is the kubelet's name of a probe kind, used in messages
// and metric labels: Liveness, Readiness, Startup.
func kubeletProbeType(kind string) string {
	switch kind {
	case schemas.ProbeLiveness:
		return "Liveness"
	case schemas.ProbeReadiness:
		return "Readiness"
	case schemas.ProbeStartup:
		return "Startup"
	}
	return "UNKNOWN"
}
