package runtime

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/schemas"
)

// Requeue delays.
const (
	retryCRI      = 2 * time.Second
	retryWaiting  = 5 * time.Second
	retryNext     = 50 * time.Millisecond // the next step of init right away
	orphanRecheck = 5 * time.Second
)

// syncPod is one pass of a pod's worker: it reads the newest inputs and
// what CRI has, and drives the pod towards its spec or kills it.
func (m *Manager) syncPod(ctx context.Context, uid string) syncResult {
	if !m.store.allSynced() {
		// An input is reloading (the bus store was wiped): decide nothing.
		return syncResult{RequeueAfter: time.Second}
	}
	rec := m.store.get(uid)
	pr, err := m.view.pod(ctx, uid)
	if err != nil {
		if ctx.Err() == nil {
			m.log.Error("Cannot read pod from the container runtime", "podUID", uid, "err", err)
		}
		return syncResult{RequeueAfter: retryCRI}
	}
	st := m.state(uid)
	switch {
	case rec == nil || rec.Pod == nil:
		return m.syncOrphan(ctx, uid, pr, st)
	case rec.Gone && rec.Unconfirmed && !m.store.sourcesReady():
		// The bus store was wiped: wait for the sources to deliver again.
		return syncResult{RequeueAfter: orphanRecheck}
	case rec.Gone:
		if !pr.empty() && !m.confirmGone(ctx, uid) {
			return syncResult{RequeueAfter: 500 * time.Millisecond}
		}
		return m.syncGone(ctx, uid, rec.Pod, pr, st)
	case rec.Verdict == nil:
		// Not admitted yet: it waits. Report what already runs (after a
		// wipe of the bus store admission decides again).
		if !pr.empty() {
			m.publish(ctx, rec.Pod, pr, st, nil)
		}
		return syncResult{}
	case rec.Verdict.Preempted:
		// Preempted for a critical pod: killed as an eviction is.
		st.setPodReason(rec.Verdict.Reason, rec.Verdict.Message)
		return m.syncTerminating(ctx, rec.Pod, pr, st, nil)
	case !rec.Verdict.Admitted:
		// Rejected pods never run.
		return m.syncTerminating(ctx, rec.Pod, pr, st, nil)
	case rec.Pod.DeletionTimestamp != nil:
		return m.syncTerminating(ctx, rec.Pod, pr, st, nil)
	case rec.Eviction != nil:
		// Killed with the eviction's grace period when it gives one (the
		// eviction manager's, the shutdown manager's per priority group).
		st.setPodReason(rec.Eviction.Reason, rec.Eviction.Message)
		return m.syncTerminating(ctx, rec.Pod, pr, st, rec.Eviction.GracePeriodSeconds)
	}
	return m.syncWithDeadline(ctx, rec.Pod, pr, st)
}

// syncOrphan handles a pod that only CRI knows: once the sources are
// ready, it is killed and removed; before, it is left alone.
func (m *Manager) syncOrphan(ctx context.Context, uid string, pr *podRuntime, st *podState) syncResult {
	if !m.store.sourcesReady() {
		if !pr.empty() {
			m.publish(ctx, nil, pr, st, nil)
		}
		return syncResult{RequeueAfter: orphanRecheck}
	}
	if !pr.empty() {
		if !m.confirmGone(ctx, uid) {
			return syncResult{RequeueAfter: 500 * time.Millisecond}
		}
		m.log.Info("Killing pod the sources do not know", "pod", pr.Namespace+"/"+pr.Name, "podUID", uid)
	}
	return m.syncGone(ctx, uid, nil, pr, st)
}

// confirmGone reads the desired bucket itself before a pod is killed for
// being gone: the watches of the desired and sources buckets run apart, so
// "sources ready" may be seen before the pods the sources put just before
// it.
func (m *Manager) confirmGone(ctx context.Context, uid string) bool {
	d, _, err := bus.Get[schemas.PodDesired](ctx, m.bus, bus.BucketDesired, uid)
	if err != nil {
		m.log.Warn("Cannot read desired pod, not killing it yet", "podUID", uid, "err", err)
		return false
	}
	return d == nil
}

// syncGone kills a pod that left the sources, publishes its final state,
// removes it from the runtime and then deletes its observed state.
func (m *Manager) syncGone(ctx context.Context, uid string, pod *corev1.Pod, pr *podRuntime, st *podState) syncResult {
	if !pr.empty() {
		if res := m.syncTerminating(ctx, pod, pr, st, nil); res.RequeueAfter > 0 {
			return res
		}
		// The final state is published; now the sandbox may go.
		fresh, err := m.view.pod(ctx, uid)
		if err != nil {
			m.log.Error("Cannot read pod from the container runtime", "podUID", uid, "err", err)
			return syncResult{RequeueAfter: retryCRI}
		}
		if err := m.removePod(ctx, uid, pod, fresh); err != nil {
			m.log.Error("Cannot remove pod", "podUID", uid, "err", err)
			return syncResult{RequeueAfter: retryCRI}
		}
		m.log.Info("Removed pod", "pod", fresh.Namespace+"/"+fresh.Name, "podUID", uid)
	} else if err := m.volumes.Teardown(ctx, uid); err != nil {
		m.log.Error("Cannot tear down volumes", "podUID", uid, "err", err)
		return syncResult{RequeueAfter: retryCRI}
	}
	if err := m.observed.delete(ctx, uid); err != nil {
		m.log.Error("Cannot delete observed state", "podUID", uid, "err", err)
		return syncResult{RequeueAfter: retryCRI}
	}
	m.forgetState(uid)
	m.store.forget(uid)
	return syncResult{Forget: m.store.get(uid) == nil}
}

// syncTerminating kills what still runs of the pod and stops its
// sandboxes, publishing Terminating while it does and Terminated once
// everything is stopped.
func (m *Manager) syncTerminating(ctx context.Context, pod *corev1.Pod, pr *podRuntime, st *podState, grace *int64) syncResult {
	running := len(pr.active()) > 0
	for _, sb := range pr.Sandboxes {
		running = running || sb.Ready
	}
	if running {
		st.mu.Lock()
		st.terminating, st.terminated = true, false
		st.mu.Unlock()
		m.publish(ctx, pod, pr, st, nil)
		if err := m.killPod(ctx, pod, pr, grace); err != nil {
			m.log.Error("Cannot kill pod", "podUID", pr.UID, "err", err)
			return syncResult{RequeueAfter: retryCRI}
		}
		fresh, err := m.view.pod(ctx, pr.UID)
		if err != nil {
			return syncResult{RequeueAfter: retryCRI}
		}
		pr = fresh
		if len(pr.active()) > 0 {
			return syncResult{RequeueAfter: time.Second}
		}
	}
	st.mu.Lock()
	st.terminating, st.terminated = false, true
	st.waiting = map[string]*waitError{}
	st.mu.Unlock()
	if !pr.empty() || m.observed.get(pr.UID) != nil {
		m.publish(ctx, pod, pr, st, nil)
	}
	return syncResult{}
}

// syncRunning is the kubelet's SyncPod for an admitted pod that should run.
func (m *Manager) syncRunning(ctx context.Context, pod *corev1.Pod, pr *podRuntime, st *podState) syncResult {
	// The pod with its allocated resources (a resize that does not fit waits).
	pod = m.admitResize(ctx, pod, pr)
	uid := string(pod.UID)
	a := computePodActions(pod, pr, func(container, kind, id string) *schemas.ProbeResult {
		return m.store.probe(uid, container, kind, id)
	})
	if a.Terminal {
		if a.TerminalReason != "Completed" {
			st.setPodReason(a.TerminalReason, a.TerminalMessage)
		}
		return m.syncTerminating(ctx, pod, pr, st, nil)
	}
	st.mu.Lock()
	st.terminating, st.terminated = false, false
	starting := map[string]bool{}
	for _, s := range a.Start {
		starting[s.Spec.Name] = true
	}
	for name := range st.waiting {
		if !starting[name] {
			delete(st.waiting, name)
		}
	}
	st.mu.Unlock()

	if m.observed.get(uid) == nil {
		// Say at once that the runtime has the pod (containers waiting in
		// ContainerCreating): nodelet-status generates a pod's status only
		// from what the runtime reports, as the kubelet's syncPod does.
		m.publish(ctx, pod, pr, st, &a)
	}

	volumes, err := m.volumes.Setup(ctx, pod)
	if err != nil {
		// The error names each volume as the kubelet's FailedMount does:
		// MountVolume.SetUp failed for volume "x" : <why>, or, for a claim
		// that is not bound or a volume not attached yet, "Unable to
		// attach or mount volumes: unmounted volumes=[...], ...".
		msg := err.Error()
		if !strings.HasPrefix(msg, "MountVolume.") && !strings.HasPrefix(msg, "Unable to attach or mount volumes") {
			msg = "MountVolume.SetUp failed: " + msg
		}
		st.mu.Lock()
		changed := st.podMessage != msg
		st.mu.Unlock()
		if changed {
			m.log.Warn("Unable to mount volumes for pod", "pod", podRef(pod), "podUID", pod.UID, "err", err)
		}
		m.event(pod, nil, "", corev1.EventTypeWarning, "FailedMount", msg)
		st.setPodReason("FailedMount", msg)
		m.publish(ctx, pod, pr, st, &a)
		return syncResult{RequeueAfter: retryWaiting}
	}

	for _, k := range a.Kill {
		grace := m.containerGrace(pod, k.C, k.Grace)
		if err := m.killContainer(ctx, pod, k.C, grace, false, k.Message, k.Reason); err != nil {
			m.log.Error("Cannot kill container", "pod", podRef(pod), "podUID", uid, "containerName", k.C.Name, "err", err)
			return syncResult{RequeueAfter: retryCRI}
		}
	}
	if err := m.stopSandboxes(ctx, a.StopSandboxes); err != nil {
		m.log.Error("Cannot stop extra sandbox", "pod", podRef(pod), "podUID", uid, "err", err)
		return syncResult{RequeueAfter: retryCRI}
	}
	if len(a.Kill) > 0 && !a.CreateSandbox {
		// What was killed restarts (under its back-off) on the next pass.
		return syncResult{RequeueAfter: retryNext}
	}

	if res, ok := m.podCgroupStep(ctx, pod, pr, st, &a); !ok {
		return res
	}

	var sbConfig *runtimeapi.PodSandboxConfig
	sb := a.Sandbox
	if a.CreateSandbox {
		if !pod.Spec.HostNetwork {
			if ok, why := m.network.networkReady(); !ok {
				msg := "network is not ready: " + why
				st.mu.Lock()
				already := st.podReason == reasonNetworkNotReady
				st.mu.Unlock()
				if !already {
					m.event(pod, nil, "", corev1.EventTypeWarning, reasonNetworkNotReady, msg)
				}
				st.setPodReason(reasonNetworkNotReady, msg)
				m.publish(ctx, pod, pr, st, &a)
				return syncResult{RequeueAfter: retryWaiting}
			}
		}
		key := uid + "_sandbox"
		if left, _ := m.backoff.Remaining(key); left > 0 {
			return syncResult{RequeueAfter: left}
		}
		if pr.newestSandbox() != nil {
			m.event(pod, nil, "", corev1.EventTypeNormal, "SandboxChanged", "Pod sandbox changed, it will be killed and re-created.")
		}
		id, cfg, err := m.createSandbox(ctx, pod, a.Attempt)
		if errors.Is(err, errRuntimeClassesNotSynced) {
			return syncResult{RequeueAfter: 500 * time.Millisecond}
		}
		if err != nil && isNameReserved(err) {
			// A creation of this attempt is still under way in the runtime
			// (nodelet-runtime was killed while it asked): wait for it
			// rather than make a second sandbox.
			m.log.Info("Sandbox creation already under way, waiting for it", "pod", podRef(pod), "podUID", uid, "attempt", a.Attempt)
			return syncResult{RequeueAfter: time.Second}
		}
		if err != nil {
			wait := m.backoff.Failed(key)
			msg := fmt.Sprintf("Failed to create pod sandbox: %v", err)
			m.log.Error("Cannot create pod sandbox", "pod", podRef(pod), "podUID", uid, "err", err)
			m.event(pod, nil, "", corev1.EventTypeWarning, "FailedCreatePodSandBox", msg)
			st.setPodReason("FailedCreatePodSandBox", msg)
			m.publish(ctx, pod, pr, st, &a)
			return syncResult{RequeueAfter: wait}
		}
		m.backoff.Reset(key)
		m.log.Info("Created pod sandbox", "pod", podRef(pod), "podUID", uid, "sandboxID", id, "attempt", a.Attempt)
		sbConfig = cfg
		if pr, err = m.view.pod(ctx, uid); err != nil {
			return syncResult{RequeueAfter: retryCRI}
		}
		for _, s := range pr.Sandboxes {
			if s.ID == id {
				sb = s
			}
		}
		if sb == nil {
			return syncResult{RequeueAfter: retryCRI}
		}
	} else {
		if sbConfig, err = m.sandboxConfig(pod, sb.Attempt); err != nil {
			st.setPodReason("FailedCreatePodSandBox", err.Error())
			m.publish(ctx, pod, pr, st, &a)
			return syncResult{RequeueAfter: retryWaiting}
		}
	}
	st.setPodReason("", "")
	m.removeDeadSandboxes(ctx, pod, pr, sb)

	var requeue time.Duration
	again := func(d time.Duration) {
		if d > 0 && (requeue == 0 || d < requeue) {
			requeue = d
		}
	}
	// Ephemeral containers come first in a.Start, as the kubelet's SyncPod
	// starts them before init containers (step 7).
	for _, ts := range a.Start {
		initKind := ts.Kind == schemas.ContainerKindInit || ts.Kind == schemas.ContainerKindSidecar
		w := m.startContainer(ctx, pod, ts, sb, sbConfig, volumes, pr)
		st.setWaiting(ts.Spec.Name, w)
		if w != nil {
			again(w.Retry)
			if w.Retry == 0 {
				again(retryWaiting)
			}
			if initKind {
				break // init containers and sidecars go one at a time
			}
			continue
		}
		if initKind {
			again(retryNext)
		}
	}
	if fresh, err := m.view.pod(ctx, uid); err == nil {
		pr = fresh
		if len(a.Start) > 0 {
			// Report with the actions of the new state (init progress).
			a2 := computePodActions(pod, pr, func(container, kind, id string) *schemas.ProbeResult {
				return m.store.probe(uid, container, kind, id)
			})
			a.InitDone = a2.InitDone
		}
	}
	m.publish(ctx, pod, pr, st, &a)
	return syncResult{RequeueAfter: requeue}
}

// publish writes the pod's observed state when it changed.
func (m *Manager) publish(ctx context.Context, pod *corev1.Pod, pr *podRuntime, st *podState, a *podActions) {
	if a == nil && pod != nil {
		uid := string(pod.UID)
		x := computePodActions(pod, pr, func(container, kind, id string) *schemas.ProbeResult {
			return m.store.probe(uid, container, kind, id)
		})
		a = &x
	}
	o := m.buildObserved(pod, pr, st, a)
	st.mu.Lock()
	o.Terminating, o.Terminated = st.terminating, st.terminated
	st.mu.Unlock()
	if o.UID == "" {
		return
	}
	if _, err := m.observed.publish(ctx, o); err != nil && ctx.Err() == nil {
		m.log.Error("Cannot publish observed state", "podUID", o.UID, "err", err)
	}
}

// isNameReserved: containerd refuses a sandbox or container name that a
// creation still in progress holds.
func isNameReserved(err error) bool {
	return err != nil && strings.Contains(err.Error(), "is reserved for")
}

// removeDeadSandboxes removes the pod's sandboxes other than current that
// are stopped and hold no containers (left by a creation that was cut
// short, or replaced): as the kubelet's sandbox GC does for pods that
// still exist, so that a pod has exactly one sandbox.
func (m *Manager) removeDeadSandboxes(ctx context.Context, pod *corev1.Pod, pr *podRuntime, current *sandboxInfo) {
	for _, sb := range pr.Sandboxes {
		if sb == current || sb.ID == current.ID || sb.Ready {
			continue
		}
		empty := true
		for _, c := range pr.Containers {
			if c.SandboxID == sb.ID {
				empty = false
			}
		}
		if !empty {
			continue
		}
		if err := m.rs.RemovePodSandbox(ctx, sb.ID); err != nil && !isNotFound(err) {
			m.log.Warn("Cannot remove dead sandbox", "pod", podRef(pod), "podUID", pod.UID, "sandboxID", sb.ID, "err", err)
			continue
		}
		m.log.Info("Removed dead sandbox", "pod", podRef(pod), "podUID", pod.UID, "sandboxID", sb.ID, "attempt", sb.Attempt)
	}
}
