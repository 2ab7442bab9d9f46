package runtime

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/schemas"
)

// syncRunning is the kubelet's SyncPod for an admitted pod that should
// run: pkg/kubelet/kubelet.go SyncPod (pod cgroup, volumes) followed by
// pkg/kubelet/kuberuntime/kuberuntime_manager.go SyncPod (kills, sandbox,
// resize, ephemeral, init and app containers). Each step returns what it
// made, or the syncResult that ends this pass (the pod waits for
// something, or syncs again after a back-off).
func (s *podSync) syncRunning(ctx context.Context) syncResult {
	m, pr, st := s.m, s.pr, s.st
	// The pod with its allocated resources: a resize that does not fit
	// waits (resize.go, the kubelet's allocation manager).
	pod := m.resources.admitResize(ctx, s.pod, pr)
	// Step 1 (computePodActions): what to kill, create and start; a
	// resize that needs a restart kills and starts the container again.
	s.pod, s.actions = pod, m.actionsFor(pod, pr)
	if s.actions.Terminal {
		return s.terminal(ctx)
	}
	restarting := m.resources.resizeRestarts(pod, pr, &s.actions)
	s.begin(ctx)
	if s.actions.CreateSandbox && len(s.actions.Kill) == 0 && len(s.actions.StopSandboxes) == 0 && quickVolumes(pod, m.cluster != nil) {
		// A new sandbox with nothing to kill first and volumes made on the
		// node alone: the slot of runtime.maxConcurrentSandboxCreations is
		// held from here, so the pod's cgroup and volumes are made as its
		// sandbox's turn comes (takeSandboxSlot). A kill (up to its grace
		// period) or a volume that waits on something outside the node
		// never holds one: newSandbox takes it after.
		if stop := s.takeSandboxSlot(ctx); stop != nil {
			return *stop
		}
		defer s.releaseSandboxSlot()
	}

	// Pod cgroup (kubelet.go SyncPod: pcm.EnsureExists, before the data
	// directories and volumes), before any sandbox is created.
	if stop := s.ensurePodCgroup(ctx); stop != nil {
		return *stop
	}

	// Volumes (kubelet.go SyncPod: WaitForAttachAndMount).
	volumes, stop := s.mountVolumes(ctx)
	if stop != nil {
		return *stop
	}
	// Steps 2 and 3: kill what must not run; a replaced sandbox's
	// containers go with it.
	if _, stop := s.killUnwanted(ctx); stop != nil {
		return *stop
	}
	// Step 4: the sandbox, created when there is none usable.
	sandbox, stop := s.ensureSandbox(ctx)
	s.releaseSandboxSlot()
	if stop != nil {
		return *stop
	}

	// Step 6 (resize): the resources of running containers and the pod
	// cgroup (UpdateContainerResources, doPodResizeAction), once the
	// sandbox is known and before anything starts.
	m.resources.syncResize(ctx, s.pod, s.pr, s.st, restarting)

	start := func(ts containerToStart) *waitError {
		id, w := m.startContainer(ctx, pod, ts, sandbox.Sandbox, sandbox.Config, volumes, s.pr)
		if w != nil && w.Reason == reasonCrashLoopBackOff {
			s.backingOff = append(s.backingOff, ts.Spec.Name)
		}
		if w != nil || ts.Replace != nil || ts.Existing != nil {
			// A container may have been created, removed or left
			// half-started: report reads the pod again.
			s.startsUnclear = true
		} else {
			s.started = append(s.started, id)
		}
		return w
	}
	// Step 7: ephemeral containers, even while init containers run.
	started := startEach(s.actions.toStart(schemas.ContainerKindEphemeral), st, start, false)
	// Step 8: init containers and sidecars, in order.
	inits := startEach(s.actions.toStart(schemas.ContainerKindInit, schemas.ContainerKindSidecar), st, start, true)
	started.add(inits)
	// Step 9: app containers, unless an init container or sidecar waits.
	if !inits.Blocked {
		started.add(startEach(s.actions.toStart(schemas.ContainerKindApp), st, start, false))
	}
	current := s.report(ctx, sandbox)
	res := syncResult{RequeueAfter: started.Requeue}
	if current && (res.RequeueAfter == 0 || len(s.backingOff) > 0) {
		res.Settled = s.settled()
	}
	return res
}

// podSync is one pass of syncRunning over a pod: the inputs of its steps
// and what CRI has of the pod (re-read once a sandbox was created).
type podSync struct {
	m       *Daemon
	pod     *corev1.Pod
	uid     string
	st      *podState
	pr      *podRuntime
	actions podActions
	// after is computePodActions on what report read: what is left to do.
	after podActions
	// firstStart: this pass made the pod's first sandbox (nothing of the
	// pod was in CRI before).
	firstStart bool
	// started are the containers this pass started, when every start it
	// tried went the plain way (created and started, nothing replaced):
	// else startsUnclear.
	started       []string
	startsUnclear bool
	// backingOff are the containers whose restart this pass left to its
	// CrashLoopBackOff wait: the requeue at the wait's end restarts them.
	backingOff []string
	// slot: this pass holds a slot of runtime.maxConcurrentSandboxCreations
	// (a chan receive frees it), taken after waiting slotWait.
	slot     bool
	slotWait time.Duration
}

// requeueIn ends the pass: the pod syncs again after d.
func requeueIn(d time.Duration) *syncResult { return &syncResult{RequeueAfter: d} }

// publish writes the pod's observed state with this pass's actions.
func (s *podSync) publish(ctx context.Context) {
	s.m.publish(ctx, s.pod, s.pr, s.st, &s.actions)
}

// terminal kills a pod that is done under its restart policy.
func (s *podSync) terminal(ctx context.Context) syncResult {
	if s.actions.TerminalReason != "Completed" {
		s.st.setPodReason(s.actions.TerminalReason, s.actions.TerminalMessage)
	}
	return s.syncTerminating(ctx, nil)
}

// begin marks the pod as running and, the first time, says at once that
// the runtime has it (containers waiting in ContainerCreating):
// nodelet-status generates a pod's status only from what the runtime
// reports, as the kubelet's syncPod does.
func (s *podSync) begin(ctx context.Context) {
	s.st.running(s.actions.Start)
	if s.m.observed.get(s.uid) == nil {
		s.publish(ctx)
	}
}

// podVolumes maps each of a pod's volumes to its host path.
type podVolumes = map[string]string

// mountVolumes sets up the pod's volumes. One that cannot be set up leaves
// the pod waiting with FailedMount, the error naming each volume as the
// kubelet's does: MountVolume.SetUp failed for volume "x" : <why>, or, for
// a claim that is not bound or a volume not attached yet, "Unable to
// attach or mount volumes: unmounted volumes=[...], ...". It tries
// again after 500 ms, 1 s, 2 s, then every retryWaiting: a token refused
// for a pod the API server's NodeRestriction cache does not see bound to
// the node yet starts in half a second, as on the kubelet's node.
func (s *podSync) mountVolumes(ctx context.Context) (podVolumes, *syncResult) {
	if left, _ := s.m.mountBackoff.Remaining(s.uid); left > 0 {
		// Another sync (a pod update) before the retry is due: the
		// kubelet's volume reconciler does not retry before its back-off
		// ends either.
		return nil, requeueIn(left)
	}
	volumes, err := s.m.volumes.Setup(ctx, s.pod)
	if err == nil {
		s.m.mountBackoff.Reset(s.uid)
		return volumes, nil
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, "MountVolume.") && !strings.HasPrefix(msg, "Unable to attach or mount volumes") {
		msg = "MountVolume.SetUp failed: " + msg
	}
	if _, prev := s.st.setPodReason("FailedMount", msg); prev != msg {
		s.m.log.Warn("Unable to mount volumes for pod", "pod", podRef(s.pod), "podUID", s.uid, "err", err)
	}
	s.m.event(s.pod, nil, "", corev1.EventTypeWarning, "FailedMount", msg)
	s.publish(ctx)
	return nil, requeueIn(s.m.mountBackoff.Failed(s.uid))
}

// killResult is what killUnwanted stopped.
type killResult struct {
	Containers, Sandboxes int
}

// killUnwanted is SyncPod's steps 2 and 3: it kills the containers
// computePodActions does not keep (with their Killing reasons and grace
// periods) and stops the pod's other ready sandboxes. Unless a new sandbox
// follows, what was killed restarts (under its back-off) on the next pass.
func (s *podSync) killUnwanted(ctx context.Context) (killResult, *syncResult) {
	m, a := s.m, &s.actions
	var done killResult
	for _, k := range a.Kill {
		grace := containerGrace(s.pod, k.C, k.Grace)
		if err := m.killer.killContainer(ctx, s.pod, k.C, grace, false, k.Message, k.Reason); err != nil {
			m.log.Error("Cannot kill container", "pod", podRef(s.pod), "podUID", s.uid, "containerName", k.C.Name, "err", err)
			return done, requeueIn(retryCRI)
		}
		done.Containers++
	}
	if err := m.killer.stopSandboxes(ctx, a.StopSandboxes); err != nil {
		m.log.Error("Cannot stop extra sandbox", "pod", podRef(s.pod), "podUID", s.uid, "err", err)
		return done, requeueIn(retryCRI)
	}
	done.Sandboxes = len(a.StopSandboxes)
	if !a.CreateSandbox && slices.ContainsFunc(a.Kill, func(k containerToKill) bool { return !k.ForResize }) {
		// What was killed restarts on the next pass; a container killed
		// for its resize starts again in this one, as the kubelet's.
		return done, requeueIn(retryNext)
	}
	return done, nil
}

// sandboxResult is the sandbox the pod's containers start in and its
// config.
type sandboxResult struct {
	Sandbox *sandboxInfo
	Config  *runtimeapi.PodSandboxConfig
	// Created: the sandbox was created by this pass.
	Created bool
}

// ensureSandbox is SyncPod's step 4: the pod's ready sandbox, or a new one
// (newSandbox). Once there is one, the pod-level reason is cleared and the
// pod's dead sandboxes are removed.
func (s *podSync) ensureSandbox(ctx context.Context) (sandboxResult, *syncResult) {
	var res sandboxResult
	if s.actions.CreateSandbox {
		var stop *syncResult
		if res, stop = s.newSandbox(ctx); stop != nil {
			return res, stop
		}
	} else {
		cfg, err := s.m.sandboxConfig(s.pod, s.actions.Sandbox.Attempt)
		if err != nil {
			s.st.setPodReason("FailedCreatePodSandBox", err.Error())
			s.publish(ctx)
			return res, requeueIn(retryWaiting)
		}
		res = sandboxResult{Sandbox: s.actions.Sandbox, Config: cfg}
	}
	s.st.setPodReason("", "")
	s.m.killer.removeDeadSandboxes(ctx, s.pod, s.pr, res.Sandbox)
	return res, nil
}

// newSandbox creates the pod's sandbox (the kubelet's createPodSandbox
// within SyncPod's step 4): once the network is ready (unless the pod is
// on the host's), under the sandbox back-off; a creation of the same
// attempt still under way in the runtime is waited for. On success the
// pod's first sandbox is read with its own status (criView.withSandbox),
// a later one with the pod again.
func (s *podSync) newSandbox(ctx context.Context) (sandboxResult, *syncResult) {
	m, pod, a := s.m, s.pod, &s.actions
	if stop := s.waitForNetwork(ctx); stop != nil {
		return sandboxResult{}, stop
	}
	if stop := s.waitForClaims(ctx); stop != nil {
		return sandboxResult{}, stop
	}
	key := s.uid + "_sandbox"
	if left, _ := m.backoff.Remaining(key); left > 0 {
		return sandboxResult{}, requeueIn(left)
	}
	if s.pr.newestSandbox() != nil {
		m.event(pod, nil, "", corev1.EventTypeNormal, "SandboxChanged", "Pod sandbox changed, it will be killed and re-created.")
	}
	if !s.slot {
		if stop := s.takeSandboxSlot(ctx); stop != nil {
			return sandboxResult{}, stop
		}
	}
	id, cfg, took, err := m.createSandbox(ctx, pod, a.Attempt)
	switch {
	case errors.Is(err, errRuntimeClassesNotSynced):
		return sandboxResult{}, requeueIn(500 * time.Millisecond)
	case isNameReserved(err):
		// A creation of this attempt is still under way in the runtime
		// (nodelet-runtime was killed while it asked): wait for it rather
		// than make a second sandbox.
		m.log.Info("Sandbox creation already under way, waiting for it", "pod", podRef(pod), "podUID", s.uid, "attempt", a.Attempt)
		return sandboxResult{}, requeueIn(time.Second)
	case err != nil:
		wait := m.backoff.Failed(key)
		msg := fmt.Sprintf("Failed to create pod sandbox: %v", err)
		m.log.Error("Cannot create pod sandbox", "pod", podRef(pod), "podUID", s.uid, "err", err)
		m.event(pod, nil, "", corev1.EventTypeWarning, "FailedCreatePodSandBox", msg)
		s.st.setPodReason("FailedCreatePodSandBox", msg)
		s.publish(ctx)
		return sandboxResult{}, requeueIn(wait)
	}
	m.backoff.Reset(key)
	m.log.Info("Created pod sandbox", "pod", podRef(pod), "podUID", s.uid, "sandboxID", id, "attempt", a.Attempt,
		"waited", s.slotWait, "took", took)
	if s.pr.empty() {
		// The pod's first sandbox: nothing of the pod was in CRI, so
		// the new sandbox's own status is all there is to read.
		pr, err := m.view.withSandbox(ctx, s.pr, id)
		if err != nil {
			return sandboxResult{}, requeueIn(retryCRI)
		}
		s.pr, s.firstStart = pr, true
		return sandboxResult{Sandbox: pr.Sandboxes[0], Config: cfg, Created: true}, nil
	}
	pr, err := m.view.pod(ctx, s.uid)
	if err != nil {
		return sandboxResult{}, requeueIn(retryCRI)
	}
	s.pr = pr
	for _, sb := range pr.Sandboxes {
		if sb.ID == id {
			return sandboxResult{Sandbox: sb, Config: cfg, Created: true}, nil
		}
	}
	return sandboxResult{}, requeueIn(retryCRI)
}

// waitForNetwork keeps a pod on the pod network waiting with
// NetworkNotReady (one event when it starts waiting) while the network is
// not ready, as the kubelet's SyncPod does (kubelet.go,
// "network is not ready").
func (s *podSync) waitForNetwork(ctx context.Context) *syncResult {
	if s.pod.Spec.HostNetwork {
		return nil
	}
	ok, why := s.m.network.networkReady()
	if ok {
		return nil
	}
	msg := "network is not ready: " + why
	if prev, _ := s.st.setPodReason(reasonNetworkNotReady, msg); prev != reasonNetworkNotReady {
		s.m.event(s.pod, nil, "", corev1.EventTypeWarning, reasonNetworkNotReady, msg)
	}
	s.publish(ctx)
	return requeueIn(retryWaiting)
}

// report publishes the pod's state after the start steps, with init
// progress as it is now, and says whether what the pass knows of the pod
// is current. A pass that changed nothing of the pod in CRI keeps what it
// read at its start; one that made the pod's first sandbox and then only
// started containers the plain way adds their own ContainerStatus to what
// it knows; any other pass reads the pod from CRI again.
func (s *podSync) report(ctx context.Context, sandbox sandboxResult) bool {
	fresh, err := s.pr, error(nil)
	quiet := s.quiet()
	switch {
	case quiet:
	case s.firstStart && !s.startsUnclear:
		fresh, err = s.m.view.withStarted(ctx, s.pr, sandbox.Sandbox.ID, s.started)
	default:
		fresh, err = s.m.view.pod(ctx, s.uid)
	}
	if err == nil {
		s.pr = fresh
		// What is left to do: a quiet pass read nothing new, so it is what
		// the pass started with.
		s.after = s.actions
		if !quiet {
			s.after = s.m.actionsFor(s.pod, s.pr)
		}
		if len(s.actions.Start) > 0 {
			s.actions.InitDone = s.after.InitDone
		}
		s.m.resources.noteStarted(s.pod, s.pr)
	}
	s.publish(ctx)
	return err == nil
}

// quiet: the pass had nothing to create, kill, stop, start or remove (a
// dead sandbox is removed only beside a second one).
func (s *podSync) quiet() bool {
	a := &s.actions
	return !a.CreateSandbox && len(a.Kill) == 0 && len(a.StopSandboxes) == 0 && len(a.Start) == 0 && len(s.pr.Sandboxes) == 1
}

// settled is the pod's CRI state as the PLEG snapshots it when, as the
// pass leaves it, there is nothing more to do in it: one ready sandbox,
// nothing to start, kill or stop, but containers that wait out their
// back-off (their requeue restarts them; a relist of the same state would
// only record BackOff again — the kubelet syncs once per PLEG event, and
// nodelet's task events and relists both report an exit). Else nil.
// Only after a report that could read the pod.
func (s *podSync) settled() map[string]string {
	a := &s.after
	if a.CreateSandbox || a.Terminal || a.Sandbox == nil || len(s.pr.Sandboxes) != 1 ||
		len(a.StopSandboxes) > 0 || len(a.Kill) > 0 {
		return nil
	}
	for _, ts := range a.Start {
		if !slices.Contains(s.backingOff, ts.Spec.Name) {
			return nil
		}
	}
	out := map[string]string{}
	addSnapshot(out, s.pr)
	return out
}

// startResult is what a start step did: the soonest retry a container
// that waits asks for (0: none), and whether an init container or sidecar
// waits, which holds back the steps after it.
type startResult struct {
	Requeue time.Duration
	Blocked bool
}

// again asks for a sync within d.
func (r *startResult) again(d time.Duration) {
	if d > 0 && (r.Requeue == 0 || d < r.Requeue) {
		r.Requeue = d
	}
}

// add merges the result of a later step.
func (r *startResult) add(o startResult) {
	r.again(o.Requeue)
	r.Blocked = r.Blocked || o.Blocked
}

// startEach starts each container of list with start and records in st
// why each one waits (or that it does not). inOrder is for init
// containers and sidecars (SyncPod's step 8): they go one at a time, the
// next one on the next pass, right away; the first that waits blocks the
// rest.
func startEach(list []containerToStart, st *podState, start func(containerToStart) *waitError, inOrder bool) startResult {
	var r startResult
	for _, ts := range list {
		w := start(ts)
		st.setWaiting(ts.Spec.Name, w)
		if w != nil {
			r.again(w.Retry)
			if w.Retry == 0 {
				r.again(retryWaiting)
			}
			if inOrder {
				r.Blocked = true
				return r
			}
			continue
		}
		if inOrder {
			r.again(retryNext)
		}
	}
	return r
}
