package status

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/podutil"
	"github.com/nodelet/nodelet/schemas"
)

// statusLoop computes the status of every dirty pod and writes it to the
// status bucket, one pod at a time so that writes happen in order. The
// writer stores only what changed, so recomputing after a restart writes
// nothing when nothing happened.
func (s *Daemon) statusLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.st.wake:
		}
		var failed []string
		for _, uid := range s.st.takeDirty() {
			if ctx.Err() != nil {
				return
			}
			if err := s.syncPodStatus(ctx, uid); err != nil {
				if ctx.Err() != nil {
					return
				}
				s.log.Error("Failed to write pod status", "podUID", uid, "err", err)
				failed = append(failed, uid)
			}
		}
		if len(failed) > 0 {
			// The bus is away: try again shortly.
			go func() {
				select {
				case <-ctx.Done():
				case <-time.After(500 * time.Millisecond):
					s.st.mu.Lock()
					for _, uid := range failed {
						s.st.markDirty(uid)
					}
					s.st.mu.Unlock()
				}
			}()
		}
	}
}

// syncPodStatus computes one pod's status and writes it when it changed;
// a pod gone from both the desired and the observed bucket loses its key.
func (s *Daemon) syncPodStatus(ctx context.Context, uid string) error {
	start := s.clock.Now()
	s.st.mu.Lock()
	in, ok := s.st.podInputsLocked(uid)
	_, hasObserved := s.st.observed[uid]
	old := s.st.records[uid]
	key := s.st.names[uid]
	if key == "" && old != nil {
		key = old.Namespace + "/" + old.Name
	}
	var firstSeen time.Time
	if d := s.st.desired[uid]; d != nil {
		firstSeen = d.FirstSeen
	}
	s.st.mu.Unlock()
	// The API syncer looks at every change of a pod (spec, deletion, mirror
	// pod version), not only status writes; its queue coalesces them and it
	// writes only what differs.
	defer s.notifyKey(key)

	if !ok {
		if hasObserved {
			// Still on the node without a spec: keep the last status.
			return nil
		}
		deleted, err := s.statusW.Delete(ctx, uid)
		if err != nil {
			return err
		}
		s.st.mu.Lock()
		delete(s.st.records, uid)
		delete(s.st.names, uid)
		s.st.mu.Unlock()
		if deleted {
			s.log.Info("Deleted pod status", "podUID", uid)
		}
		return nil
	}
	if podutil.IsMirrorPod(in.Pod) {
		s.log.Warn("Ignoring a mirror pod in the desired pods", "pod", podutil.PodRef(in.Pod), "podUID", uid)
		return nil
	}
	if in.Observed == nil && in.Eviction == nil && (in.Verdict == nil || in.Verdict.Admitted) {
		// Not admitted yet, or admitted but not yet seen by the runtime:
		// the kubelet generates a pod's status from what the runtime
		// reports (syncPod), never before. After a restart with the bus's
		// store wiped, this is what keeps a running pod from reading
		// Pending until the runtime has published it again.
		return nil
	}
	in.HostIPs = s.hostIPs
	in.Now = s.clock.Now()
	st := ComputePodStatus(in)
	rec := &schemas.PodStatusRecord{UID: uid, Namespace: in.Pod.Namespace, Name: in.Pod.Name, Static: in.Static, Status: st}
	// The record is what the next status must not go behind, and what
	// /pods serves, from now on; a failed write is retried.
	s.st.mu.Lock()
	s.st.records[uid] = rec
	s.st.mu.Unlock()
	wrote, _, err := s.statusW.Put(ctx, uid, rec)
	if err != nil {
		return err
	}

	op := "sync"
	switch {
	case old == nil:
		op = "create"
	case wrote:
		op = "update"
	}
	s.metrics.podWorkerDuration.WithLabelValues(op).Observe(s.clock.Since(start).Seconds())
	if allContainersRunning(in.Pod, &st) && (old == nil || !allContainersRunning(in.Pod, &old.Status)) {
		if !firstSeen.IsZero() {
			s.metrics.podStartDuration.Observe(s.clock.Since(firstSeen).Seconds())
		}
		s.kubelet.started(in.Pod, &st, firstSeen, s.clock.Now())
	}
	if wrote {
		s.log.Debug("Wrote pod status", "pod", podutil.PodRef(in.Pod), "podUID", uid, "phase", st.Phase)
	}
	return nil
}

// notifyKey tells the API syncer that the pod namespace/name changed.
func (s *Daemon) notifyKey(key string) {
	if s.api != nil && key != "" {
		s.api.queue.Add(key)
	}
}

// allContainersRunning: every regular container runs (the kubelet's "pod
// started" for nodelet_pod_start_duration_seconds).
func allContainersRunning(pod *corev1.Pod, st *corev1.PodStatus) bool {
	if len(pod.Spec.Containers) == 0 {
		return false
	}
	for _, c := range pod.Spec.Containers {
		cs := statusByName(st.ContainerStatuses, c.Name)
		if cs == nil || cs.State.Running == nil {
			return false
		}
	}
	return true
}
