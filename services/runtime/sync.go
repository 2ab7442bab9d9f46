package runtime

import (
	"context"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/podutil"
	"github.com/nodelet/nodelet/schemas"
)

// Requeue delays.
const (
	retryCRI      = 2 * time.Second
	retryWaiting  = 5 * time.Second
	retryNext     = 50 * time.Millisecond // the next step of init right away
	orphanRecheck = 5 * time.Second
	// A pod whose volumes failed to set up tries again after 500 ms,
	// doubling: the kubelet's volume operations back off from 500 ms
	// (exponentialbackoff.initialDurationBeforeRetry). The kubelet doubles
	// up to 2m2s; here the wait stops growing at retryWaiting, as a sync
	// that fails also holds the pod's other steps (restarts, probes'
	// kills) until its volumes are set up.
	retryMountFirst = 500 * time.Millisecond
)

// syncPod is one pass of a pod's worker: it reads the newest inputs and
// what CRI has, and drives the pod towards its spec or kills it.
func (m *Daemon) syncPod(ctx context.Context, uid string) syncResult {
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
	st := m.pods.get(uid)
	s := &podSync{m: m, uid: uid, pr: pr, st: st}
	if rec != nil {
		s.pod = rec.Pod
	}
	switch {
	case rec == nil || rec.Pod == nil:
		return s.syncOrphan(ctx)
	case rec.Gone && rec.Unconfirmed && !m.store.sourcesReady():
		// The bus store was wiped: wait for the sources to deliver again.
		return syncResult{RequeueAfter: orphanRecheck}
	case rec.Gone:
		if !pr.empty() && !m.confirmGone(ctx, uid) {
			return syncResult{RequeueAfter: 500 * time.Millisecond}
		}
		return s.syncGone(ctx)
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
		return s.syncTerminating(ctx, nil)
	case !rec.Verdict.Admitted:
		// Rejected pods never run.
		return s.syncTerminating(ctx, nil)
	case rec.Pod.DeletionTimestamp != nil:
		return s.syncTerminating(ctx, nil)
	case podutil.IsTerminalPhase(rec.Pod.Status.Phase):
		// The kubelet's UpdatePod: "Pod is in a terminal phase
		// (success/failed), begin teardown" — a pod the API server already
		// holds as finished (a node that came back, a second node of the
		// same name) is never started again.
		return s.syncTerminating(ctx, nil)
	case rec.Eviction != nil:
		// Killed with the eviction's grace period when it gives one (the
		// eviction manager's, the shutdown manager's per priority group).
		st.setPodReason(rec.Eviction.Reason, rec.Eviction.Message)
		return s.syncTerminating(ctx, rec.Eviction.GracePeriodSeconds)
	}
	return s.syncWithDeadline(ctx)
}

// syncOrphan handles a pod that only CRI knows: once the sources are
// ready, it is killed and removed; before, it is left alone.
func (s *podSync) syncOrphan(ctx context.Context) syncResult {
	m, uid, pr, st := s.m, s.uid, s.pr, s.st
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
	return s.syncGone(ctx)
}

// confirmGone reads the desired bucket itself before a pod is killed for
// being gone: the watches of the desired and sources buckets run apart, so
// "sources ready" may be seen before the pods the sources put just before
// it.
func (m *Daemon) confirmGone(ctx context.Context, uid string) bool {
	d, _, err := bus.Get[schemas.PodDesired](ctx, m.bus, bus.BucketDesired, uid)
	if err != nil {
		m.log.Warn("Cannot read desired pod, not killing it yet", "podUID", uid, "err", err)
		return false
	}
	return d == nil
}

// syncGone kills a pod that left the sources, publishes its final state,
// removes it from the runtime and then deletes its observed state.
func (s *podSync) syncGone(ctx context.Context) syncResult {
	m, uid, pod, pr := s.m, s.uid, s.pod, s.pr
	if !pr.empty() {
		if res := s.syncTerminating(ctx, nil); res.RequeueAfter > 0 {
			return res
		}
		// The final state is published; now the sandbox may go.
		fresh, err := m.view.pod(ctx, uid)
		if err != nil {
			m.log.Error("Cannot read pod from the container runtime", "podUID", uid, "err", err)
			return syncResult{RequeueAfter: retryCRI}
		}
		if err := m.killer.removePod(ctx, uid, pod, fresh); err != nil {
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
	m.forgetPod(uid)
	return syncResult{Forget: m.store.get(uid) == nil}
}

// forgetPod drops what the runtime remembers of a pod that is gone: its
// worker's memory, back-off, pulls, resize state and bus record. The
// resize state is forgotten here as well as with the pod cgroup: a pod
// deleted before it had a sandbox has no cgroup to remove.
func (m *Daemon) forgetPod(uid string) {
	m.pods.forget(uid)
	if m.resources != nil {
		m.resources.forgetResize(uid)
	}
	m.backoff.Forget(uid + "_")
	m.mountBackoff.Forget(uid)
	m.images.forgetPod(uid)
	m.store.forget(uid)
	m.metrics.forget(uid)
}

// syncTerminating kills what still runs of the pod and stops its
// sandboxes, publishing Terminating while it does and Terminated once
// everything is stopped.
func (s *podSync) syncTerminating(ctx context.Context, grace *int64) syncResult {
	m, pod, pr, st := s.m, s.pod, s.pr, s.st
	running := len(pr.active()) > 0
	for _, sb := range pr.Sandboxes {
		running = running || sb.Ready
	}
	if running {
		st.killing()
		m.publish(ctx, pod, pr, st, nil)
		if err := m.killer.killPod(ctx, pod, pr, grace); err != nil {
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
	st.killed()
	// The kubelet's SyncTerminatedPod: once the pod is stopped for good
	// its volumes are unmounted and its cgroup removed, and only then is
	// it finished (the status manager deletes it from the API no sooner);
	// its sandbox and containers stay until it leaves the node
	// (syncGone). Terminated is published either way: the terminal phase
	// does not wait for the volumes (the kubelet sets the final status
	// before WaitForUnmount).
	finishErr := s.finish(ctx)
	// A pod being deleted is published Terminated even when it never had
	// anything in CRI (deleted before its first sync): nodelet-status
	// finishes the API's graceful deletion only on that (canBeDeleted),
	// as the kubelet's pod worker takes a never-started pod straight to
	// terminated. Without it the pod stayed Terminating in the API for
	// good (the soak, issue 37).
	deleting := pod != nil && pod.DeletionTimestamp != nil
	if !pr.empty() || m.observed.get(pr.UID) != nil || deleting {
		m.publish(ctx, pod, pr, st, nil)
	}
	if finishErr != nil {
		return syncResult{RequeueAfter: retryCRI}
	}
	return syncResult{}
}

// finish unmounts a terminated pod's volumes and removes its cgroup, once.
func (s *podSync) finish(ctx context.Context) error {
	m, st := s.m, s.st
	if st.phase().Finished {
		return nil
	}
	if err := m.volumes.Unmount(ctx, s.uid); err != nil {
		ref := s.pr.Namespace + "/" + s.pr.Name
		if s.pod != nil {
			ref = podRef(s.pod)
		}
		m.log.Error("Cannot unmount volumes of terminated pod", "pod", ref, "podUID", s.uid, "err", err)
		return err
	}
	if m.resources != nil {
		if err := m.resources.removePodCgroup(s.uid, s.pod); err != nil {
			return err
		}
	}
	st.finish()
	return nil
}

// publish writes the pod's observed state when it changed.
func (m *Daemon) publish(ctx context.Context, pod *corev1.Pod, pr *podRuntime, st *podState, a *podActions) {
	if a == nil && pod != nil {
		x := m.actionsFor(pod, pr)
		a = &x
	}
	o := buildObserved(m.runtime.name, pod, pr, st, a)
	if o.UID == "" {
		return
	}
	m.resources.resizeObserved(pod, o)
	if pod != nil && asksRecursiveReadOnly(pod) {
		o.RecursiveReadOnlyMounts = m.supportsRecursiveReadOnly(ctx, pod)
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
