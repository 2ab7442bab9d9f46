package runtime

import (
	"context"
	"errors"
	"maps"
	"reflect"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critest "k8s.io/cri-api/pkg/apis/testing"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/bus/bustest"
	"github.com/nodelet/nodelet/schemas"
)

// The steps of syncRunning, one at a time, over CRI's fake runtime and a
// real bus (events and the observed bucket); the whole sequence against
// containerd is e2e_test.go's and lifecycle_test.go's.

// stepVolumes is a VolumeManager that fails with err, else returns paths.
type stepVolumes struct {
	paths  podVolumes
	err    error
	setups int
}

func (v *stepVolumes) Setup(context.Context, *corev1.Pod) (map[string]string, error) {
	v.setups++
	return v.paths, v.err
}
func (v *stepVolumes) Teardown(context.Context, string) error { return nil }
func (v *stepVolumes) Unmount(context.Context, string) error  { return nil }

type stepEnv struct {
	m     *Daemon
	cri   *critest.FakeRuntimeService
	clock *testingclock.FakeClock
	vols  *stepVolumes
}

func newStepEnv(t *testing.T) *stepEnv {
	t.Helper()
	m := testManager(t)
	m.cfg.Node.PodLogsDir = t.TempDir()
	m.log = bustest.Logger()
	m.bus = bustest.Start(t).Connect(bus.Runtime)
	clk := testingclock.NewFakeClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	m.clock = clk
	fake := critest.NewFakeRuntimeService()
	m.rs, m.view = fake, newCRIView(fake)
	m.runtime = runtimeInfo{name: "containerd"}
	m.store, m.pods = newStore(), newPodStates()
	m.backoff = newBackOff(clk, initialBackOff, time.Minute)
	m.mountBackoff = newBackOff(clk, retryMountFirst, retryWaiting)
	m.observed = newObservedWriter(m.bus, m.log)
	m.store.bus, m.store.log, m.store.observed = m.bus, m.log, m.observed
	m.metrics = newMetrics(m.observed)
	vols := &stepVolumes{}
	res, err := newPodResources(m.cfg, m.log, clk, fake, m.capacity, m.store, m.observed, m.view, m.event)
	if err != nil {
		t.Fatal(err)
	}
	m.resources = res
	m.hooks = &hookRunner{rs: fake, clock: clk}
	m.killer = newPodKiller(m.cfg, m.log, clk, fake, m.hooks, vols, res, m.event)
	m.stopSignals.rs, m.stopSignals.log, m.stopSignals.runtime = fake, m.log, m.runtime
	m.network = newNetworkState(m, nil)
	m.network.checked, m.network.state.NetworkReady = true, true
	m.volumes = vols
	return &stepEnv{m: m, cri: fake, clock: clk, vols: vols}
}

// sync is a pass over pod as CRI has it now, up to its first step.
func (e *stepEnv) sync(t *testing.T, pod *corev1.Pod) *podSync {
	t.Helper()
	uid := string(pod.UID)
	pr, err := e.m.view.pod(context.Background(), uid)
	if err != nil {
		t.Fatal(err)
	}
	return &podSync{m: e.m, pod: pod, uid: uid, st: e.m.pods.get(uid), pr: pr, actions: e.m.actionsFor(pod, pr)}
}

// startIn creates and starts container name in the pass's sandbox the
// plain way, as the pass's start step would, and notes it as started.
func (e *stepEnv) startIn(t *testing.T, s *podSync, res sandboxResult, name string) string {
	t.Helper()
	ctx := context.Background()
	id, err := e.cri.CreateContainer(ctx, res.Sandbox.ID, &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: name}, Image: &runtimeapi.ImageSpec{Image: "busybox"},
		Labels:      map[string]string{labelPodUID: s.uid, LabelManaged: "true", labelContainerName: name},
		Annotations: map[string]string{annotationRestartCount: "0"},
	}, res.Config)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.cri.StartContainer(ctx, id); err != nil {
		t.Fatal(err)
	}
	s.started = append(s.started, id)
	return id
}

func (e *stepEnv) calls(name string) int {
	n := 0
	for _, c := range e.cri.GetCalls() {
		if c == name {
			n++
		}
	}
	return n
}

func TestMountVolumesStep(t *testing.T) {
	e := newStepEnv(t)
	ctx := context.Background()
	pod := newPod("vols", busybox("app", ""))
	s := e.sync(t, pod)

	e.vols.err = errors.New(`configmap "cm" not found`)
	vols, stop := s.mountVolumes(ctx)
	if stop == nil || stop.RequeueAfter != retryMountFirst || vols != nil {
		t.Fatalf("failing volume: %v %v", vols, stop)
	}
	ph := s.st.phase()
	if ph.Reason != "FailedMount" || ph.Message != `MountVolume.SetUp failed: configmap "cm" not found` {
		t.Fatalf("pod reason %+v", ph)
	}
	if o := e.m.observed.get(s.uid); o == nil || o.Reason != "FailedMount" {
		t.Fatalf("observed %+v", o)
	}
	// The volume manager's own wording is kept.
	e.vols.err = errors.New("Unable to attach or mount volumes: unmounted volumes=[data]")
	e.clock.Step(retryMountFirst)
	if _, stop := s.mountVolumes(ctx); stop == nil || s.st.phase().Message != e.vols.err.Error() {
		t.Fatalf("kubelet wording lost: %+v", s.st.phase())
	}

	e.vols.err, e.vols.paths = nil, podVolumes{"data": "/var/lib/nodelet/pods/x/volumes/data"}
	e.clock.Step(time.Second)
	vols, stop = s.mountVolumes(ctx)
	if stop != nil || vols["data"] == "" {
		t.Fatalf("volumes set up: %v %v", vols, stop)
	}
}

// A failed mount is retried after 500 ms, doubling up to retryWaiting (the
// kubelet's volume operations back off from 500 ms); a sync before the
// retry is due does not try the volumes again; a success starts over.
func TestMountVolumesBackOff(t *testing.T) {
	e := newStepEnv(t)
	ctx := context.Background()
	s := e.sync(t, newPod("backoff", busybox("app", "")))
	setups := func() int { return e.vols.setups }

	e.vols.err = errors.New(`failed to fetch token: node requested token bound to a pod scheduled on a different node`)
	for i, want := range []time.Duration{retryMountFirst, time.Second, 2 * time.Second, 4 * time.Second, retryWaiting, retryWaiting} {
		n := setups()
		if _, stop := s.mountVolumes(ctx); stop == nil || stop.RequeueAfter != want || setups() != n+1 {
			t.Fatalf("failure %d: requeue %v (want %v), setups %d -> %d", i+1, stop, want, n, setups())
		}
		// Too early: the volumes are not tried, the pass waits the rest.
		e.clock.Step(want / 2)
		n = setups()
		if _, stop := s.mountVolumes(ctx); stop == nil || stop.RequeueAfter != want-want/2 || setups() != n {
			t.Fatalf("early sync %d: requeue %v (want %v), setups %d -> %d", i+1, stop, want-want/2, n, setups())
		}
		e.clock.Step(want - want/2)
	}
	e.vols.err, e.vols.paths = nil, podVolumes{"token": "/var/lib/nodelet/pods/x/volumes/token"}
	if vols, stop := s.mountVolumes(ctx); stop != nil || vols["token"] == "" {
		t.Fatalf("volumes set up: %v %v", vols, stop)
	}
	e.vols.err = errors.New("again")
	if _, stop := s.mountVolumes(ctx); stop == nil || stop.RequeueAfter != retryMountFirst {
		t.Fatalf("after a success the back-off starts over: %v", stop)
	}
	e.m.images = &imagePuller{backoff: newBackOff(e.clock, initialBackOff, time.Minute)}
	e.m.forgetPod(s.uid)
	if left, _ := e.m.mountBackoff.Remaining(s.uid); left != 0 {
		t.Fatalf("a forgotten pod still backs off %v", left)
	}
}

func TestSandboxSteps(t *testing.T) {
	e := newStepEnv(t)
	ctx := context.Background()
	pod := newPod("sandbox", busybox("app", ""))

	// The network is not ready: the pod waits, nothing is created.
	e.m.network.state = schemas.RuntimeState{NetworkReady: false, Message: "no CNI config"}
	s := e.sync(t, pod)
	if !s.actions.CreateSandbox {
		t.Fatal("a pod without a sandbox must create one")
	}
	if _, stop := s.ensureSandbox(ctx); stop == nil || stop.RequeueAfter != retryWaiting {
		t.Fatalf("network not ready: %v", stop)
	}
	if ph := s.st.phase(); ph.Reason != reasonNetworkNotReady || ph.Message != "network is not ready: no CNI config" {
		t.Fatalf("pod reason %+v", ph)
	}
	if n := e.calls("RunPodSandbox"); n != 0 {
		t.Fatalf("RunPodSandbox called %d times while the network is not ready", n)
	}
	// A host-network pod does not wait for it.
	host := newPod("host", busybox("app", ""))
	host.Spec.HostNetwork = true
	if stop := e.sync(t, host).waitForNetwork(ctx); stop != nil {
		t.Fatalf("host network pod waits: %v", stop)
	}
	e.m.network.state = schemas.RuntimeState{NetworkReady: true}

	// A failed creation backs off: no second try before it ends.
	e.cri.InjectError("RunPodSandbox", errors.New("cni plugin failed"))
	if _, stop := s.ensureSandbox(ctx); stop == nil || stop.RequeueAfter != initialBackOff {
		t.Fatalf("failed creation: %v", stop)
	}
	if ph := s.st.phase(); ph.Reason != "FailedCreatePodSandBox" || ph.Message != "Failed to create pod sandbox: cni plugin failed" {
		t.Fatalf("pod reason %+v", ph)
	}
	e.clock.Step(4 * time.Second)
	if _, stop := s.ensureSandbox(ctx); stop == nil || stop.RequeueAfter != initialBackOff-4*time.Second {
		t.Fatalf("within back-off: %v", stop)
	}
	if n := e.calls("RunPodSandbox"); n != 1 {
		t.Fatalf("RunPodSandbox called %d times, want 1 (back-off)", n)
	}
	e.clock.Step(initialBackOff)

	// A creation of the same attempt still under way: waited for, no back-off.
	e.cri.InjectError("RunPodSandbox", errors.New(`failed to reserve sandbox name "x": name "x" is reserved for "abc"`))
	if _, stop := s.ensureSandbox(ctx); stop == nil || stop.RequeueAfter != time.Second {
		t.Fatalf("name reserved: %v", stop)
	}
	if left, _ := e.m.backoff.Remaining(s.uid + "_sandbox"); left != 0 {
		t.Fatalf("name reserved backs off %v", left)
	}

	// Created: the pass continues in it, with CRI read again.
	res, stop := s.ensureSandbox(ctx)
	if stop != nil || !res.Created || res.Sandbox == nil || res.Config == nil {
		t.Fatalf("created: %+v %v", res, stop)
	}
	if len(s.pr.Sandboxes) != 1 || s.pr.Sandboxes[0] != res.Sandbox || !res.Sandbox.Ready || res.Config.Metadata.Uid != s.uid {
		t.Fatalf("sandbox %+v in %+v", res.Sandbox, s.pr.Sandboxes)
	}
	if ph := s.st.phase(); ph.Reason != "" || ph.Message != "" {
		t.Fatalf("pod reason not cleared: %+v", ph)
	}

	// The next pass finds it ready and uses it.
	s = e.sync(t, pod)
	again, stop := s.ensureSandbox(ctx)
	if stop != nil || again.Created || again.Sandbox.ID != res.Sandbox.ID || again.Config.LogDirectory != res.Config.LogDirectory {
		t.Fatalf("existing sandbox: %+v %v", again, stop)
	}
	if n := e.calls("RunPodSandbox"); n != 3 {
		t.Fatalf("RunPodSandbox called %d times, want 3", n)
	}
}

func TestKillUnwantedStep(t *testing.T) {
	e := newStepEnv(t)
	ctx := context.Background()
	pod := newPod("kill", busybox("app", ""))
	uid := string(pod.UID)
	e.cri.SetFakeContainers([]*critest.FakeContainer{{
		SandboxID: "sb",
		ContainerStatus: runtimeapi.ContainerStatus{
			Id: "c1", Metadata: &runtimeapi.ContainerMetadata{Name: "app"}, State: runtimeapi.ContainerState_CONTAINER_RUNNING,
			Labels: map[string]string{labelPodUID: uid, labelContainerName: "app", LabelManaged: "true"},
		},
	}})
	s := e.sync(t, pod)
	if len(s.pr.Containers) != 1 {
		t.Fatalf("containers %+v", s.pr.Containers)
	}
	s.actions = podActions{Sandbox: &sandboxInfo{ID: "sb", Ready: true},
		Kill: []containerToKill{{C: s.pr.Containers[0], Message: "Container app definition changed, will be restarted"}}}

	// Killed in place: it restarts on the next pass, right away.
	done, stop := s.killUnwanted(ctx)
	if stop == nil || stop.RequeueAfter != retryNext || done.Containers != 1 {
		t.Fatalf("kill: %+v %v", done, stop)
	}
	if e.calls("StopContainer") != 1 || e.cri.Containers["c1"].State != runtimeapi.ContainerState_CONTAINER_EXITED {
		t.Fatalf("not stopped: %v", e.cri.GetCalls())
	}
	// Killed for a new sandbox: the pass goes on to create it.
	s.actions.CreateSandbox = true
	if done, stop := s.killUnwanted(ctx); stop != nil || done.Containers != 1 {
		t.Fatalf("kill before a new sandbox: %+v %v", done, stop)
	}
	// A failed kill ends the pass for a CRI retry.
	e.cri.InjectError("StopContainer", errors.New("deadline exceeded"))
	if _, stop := s.killUnwanted(ctx); stop == nil || stop.RequeueAfter != retryCRI {
		t.Fatalf("failed kill: %v", stop)
	}
}

func TestStartEach(t *testing.T) {
	spec := func(names ...string) []containerToStart {
		var out []containerToStart
		for _, n := range names {
			out = append(out, containerToStart{Spec: &corev1.Container{Name: n}, Kind: schemas.ContainerKindInit})
		}
		return out
	}
	waits := map[string]*waitError{
		"pull":  {Reason: "ImagePullBackOff", Retry: 20 * time.Second},
		"crash": {Reason: reasonCrashLoopBackOff, Retry: 40 * time.Second},
		"hook":  {Reason: reasonPostStartHookError}, // no retry of its own
	}
	var started []string
	start := func(ts containerToStart) *waitError {
		started = append(started, ts.Spec.Name)
		return waits[ts.Spec.Name]
	}

	// Init containers and sidecars one at a time: the next one right
	// away, the first that waits blocks the rest.
	st := newPodState()
	st.setWaiting("a", &waitError{Reason: reasonCrashLoopBackOff})
	r := startEach(spec("a", "pull", "b"), st, start, true)
	if !slices.Equal(started, []string{"a", "pull"}) || !r.Blocked || r.Requeue != retryNext {
		t.Fatalf("in order: started %v, %+v", started, r)
	}
	if st.waitingOf("a") != nil || st.waitingOf("pull").Reason != "ImagePullBackOff" {
		t.Fatalf("waiting a=%v pull=%v", st.waitingOf("a"), st.waitingOf("pull"))
	}

	// App (and ephemeral) containers all start; the soonest retry wins,
	// a wait without one retries after retryWaiting.
	started = nil
	r = startEach(spec("crash", "x", "hook", "pull"), st, start, false)
	if !slices.Equal(started, []string{"crash", "x", "hook", "pull"}) || r.Blocked || r.Requeue != retryWaiting {
		t.Fatalf("all: started %v, %+v", started, r)
	}
	var sum startResult
	sum.add(startResult{Requeue: 20 * time.Second})
	sum.add(startResult{})
	sum.add(startResult{Requeue: 7 * time.Second, Blocked: true})
	if sum.Requeue != 7*time.Second || !sum.Blocked {
		t.Fatalf("merged %+v", sum)
	}
}

func TestPodStateOwnsItsLock(t *testing.T) {
	st := newPodState()
	st.setWaiting("a", &waitError{Reason: "x"})
	st.setWaiting("b", &waitError{Reason: "y"})
	st.killing()
	if ph := st.phase(); !ph.Terminating || ph.Terminated {
		t.Fatalf("killing: %+v", ph)
	}
	// Running again: only the containers about to start keep a reason.
	st.running([]containerToStart{{Spec: &corev1.Container{Name: "b"}}})
	if ph := st.phase(); ph.Terminating || ph.Terminated || st.waitingOf("a") != nil || st.waitingOf("b") == nil {
		t.Fatalf("running: %+v a=%v b=%v", ph, st.waitingOf("a"), st.waitingOf("b"))
	}
	st.killed()
	if ph := st.phase(); ph.Terminating || !ph.Terminated || st.waitingOf("b") != nil {
		t.Fatalf("killed: %+v", ph)
	}
	if r, m := st.setPodReason("A", "a"); r != "" || m != "" {
		t.Fatalf("first reason replaced %q %q", r, m)
	}
	if r, m := st.setPodReason("B", "b"); r != "A" || m != "a" {
		t.Fatalf("replaced %q %q", r, m)
	}
	for i := 1; i <= maxReplacements; i++ {
		if st.replacedAgain("c", maxReplacements) {
			t.Fatalf("replacement %d is too many", i)
		}
	}
	if !st.replacedAgain("c", maxReplacements) {
		t.Fatal("no limit on replacements")
	}
}

// syncRunning's start steps take podActions.Start by kind: that is
// SyncPod's order only while computePodActions lists ephemeral
// containers, then init containers and sidecars, then app containers.
func TestStartOrderByKind(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	pod := newPod("order", busybox("a", ""), busybox("b", ""))
	side := busybox("side", "")
	side.RestartPolicy = &always
	pod.Spec.InitContainers = []corev1.Container{side, busybox("i1", "")}
	pod.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon(busybox("debug", ""))}}
	// The app ran (so init is over); the sidecar and b exited, a runs.
	pr := runtimeOf([]*sandboxInfo{readySB("sb", 0)},
		ctr(pod, "side", "sb", "exited", 1, 1), ctr(pod, "i1", "sb", "exited", 0, 2),
		ctr(pod, "a", "sb", "running", 0, 3), ctr(pod, "b", "sb", "exited", 1, 4))
	noProbes := func(string, string, string) *schemas.ProbeResult { return nil }
	a := computePodActions(pod, pr, noProbes)
	var kinds []string
	for _, ts := range a.Start {
		kinds = append(kinds, ts.Spec.Name+":"+ts.Kind)
	}
	want := []string{"debug:" + schemas.ContainerKindEphemeral, "side:" + schemas.ContainerKindSidecar, "b:" + schemas.ContainerKindApp}
	if !slices.Equal(kinds, want) {
		t.Fatalf("start %v, want %v", kinds, want)
	}
	names := func(list []containerToStart) (out []string) {
		for _, ts := range list {
			out = append(out, ts.Spec.Name)
		}
		return out
	}
	if got := names(a.toStart(schemas.ContainerKindInit, schemas.ContainerKindSidecar)); !slices.Equal(got, []string{"side"}) {
		t.Fatalf("init step %v", got)
	}
	if got := names(a.toStart(schemas.ContainerKindApp)); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("app step %v", got)
	}
}

// TestFirstStartReadsNoList: a pod's first pass reads its new sandbox and
// the containers it started with their own status calls, no relist, and
// knows the same as a relist would.
func TestFirstStartReadsNoList(t *testing.T) {
	e := newStepEnv(t)
	ctx := context.Background()
	pod := newPod("first", busybox("app", ""))
	s := e.sync(t, pod)
	lists := func() int { return e.calls("ListPodSandbox") + e.calls("ListContainers") }
	before := lists()
	res, stop := s.ensureSandbox(ctx)
	if stop != nil || !res.Created || !s.firstStart {
		t.Fatalf("first sandbox: %+v %v, firstStart %v", res, stop, s.firstStart)
	}
	id := e.startIn(t, s, res, "app")
	s.report(ctx, res)
	if n := lists() - before; n != 0 {
		t.Fatalf("%d list calls in the first pass, want 0", n)
	}
	relisted, err := e.m.view.pod(ctx, s.uid)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.pr.Sandboxes) != 1 || len(s.pr.Containers) != 1 || !reflect.DeepEqual(s.pr.Sandboxes[0], relisted.Sandboxes[0]) ||
		s.pr.Containers[0].ID != id || s.pr.Containers[0].SandboxID != res.Sandbox.ID ||
		s.pr.Containers[0].State != runtimeapi.ContainerState_CONTAINER_RUNNING || s.pr.Containers[0].Name != relisted.Containers[0].Name {
		t.Fatalf("first pass knows %+v / %+v; a relist %+v / %+v", s.pr.Sandboxes, s.pr.Containers, relisted.Sandboxes, relisted.Containers)
	}

	// It leaves the pod settled in the state the PLEG's next relist sees:
	// that relist wakes no worker (podWorkers.Relisted).
	all, err := e.m.view.all(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.settled(), snapshotsByPod(snapshot(all))[s.uid]; got == nil || !maps.Equal(got, want) {
		t.Fatalf("settled in %v; a relist sees %v", got, want)
	}

	// A later pass with nothing to do reads nothing more; one that acted
	// reads the pod again.
	s = e.sync(t, pod)
	if !s.quiet() {
		t.Fatalf("actions %+v: want none", s.actions)
	}
	before = lists()
	s.report(ctx, sandboxResult{Sandbox: res.Sandbox})
	if n := lists() - before; n != 0 {
		t.Fatalf("%d list calls in a quiet pass's report, want 0", n)
	}
	s = e.sync(t, pod)
	s.actions.Kill = []containerToKill{{C: s.pr.Containers[0]}}
	before = lists()
	s.report(ctx, sandboxResult{Sandbox: res.Sandbox})
	if n := lists() - before; n != 2 {
		t.Fatalf("%d list calls in a later pass's report, want 2", n)
	}
}

// A pod is not settled while anything is left to do in it: a container to
// start, a second sandbox.
func TestSettledOnlyWhenNothingIsLeft(t *testing.T) {
	e := newStepEnv(t)
	ctx := context.Background()
	pod := newPod("two", busybox("a", ""), busybox("b", ""))
	s := e.sync(t, pod)
	res, stop := s.ensureSandbox(ctx)
	if stop != nil {
		t.Fatal(stop)
	}
	e.startIn(t, s, res, "a")
	if !s.report(ctx, res) {
		t.Fatal("report could not read the pod")
	}
	if got := s.settled(); got != nil {
		t.Fatalf("settled with container b not started: %v", got)
	}
}

// slotVolumes records how many slots of runtime.maxConcurrentSandboxCreations
// were held while a pod's volumes were set up, and fails the set-up so the
// pass ends there.
type slotVolumes struct {
	slots chan struct{}
	held  []int
}

func (v *slotVolumes) Setup(context.Context, *corev1.Pod) (map[string]string, error) {
	v.held = append(v.held, len(v.slots))
	return nil, errors.New("stop here")
}
func (v *slotVolumes) Teardown(context.Context, string) error { return nil }
func (v *slotVolumes) Unmount(context.Context, string) error  { return nil }

// A pod's first sandbox takes its slot of runtime.maxConcurrentSandboxCreations
// before the pod's cgroup and volumes are made, and frees it when the pass
// ends; a pod that waits for a slot makes nothing; a sandbox that replaces
// one whose containers must be killed first takes the slot only after the
// kill.
func TestSandboxSlotCoversPreparation(t *testing.T) {
	e := newStepEnv(t)
	ctx := context.Background()
	e.m.sandboxSlots = make(chan struct{}, 1)
	vols := &slotVolumes{slots: e.m.sandboxSlots}
	e.m.volumes = vols
	e.m.killer.volumes = vols
	sync := func(ctx context.Context, pod *corev1.Pod) syncResult {
		s := e.sync(t, pod)
		return (&podSync{m: e.m, pod: pod, uid: string(pod.UID), pr: s.pr, st: s.st}).syncRunning(ctx)
	}

	first := newPod("first", busybox("app", ""))
	if res := sync(ctx, first); res.RequeueAfter != retryMountFirst {
		t.Fatalf("pass: %+v", res)
	}
	if len(vols.held) != 1 || vols.held[0] != 1 {
		t.Fatalf("slots held during the volume set-up: %v, want [1]", vols.held)
	}
	if n := len(e.m.sandboxSlots); n != 0 {
		t.Fatalf("%d slots still held after the pass", n)
	}

	// Every slot is taken: the next pod waits before making anything.
	e.m.sandboxSlots <- struct{}{}
	waiting, cancel := context.WithCancel(ctx)
	cancel()
	sync(waiting, newPod("second", busybox("app", "")))
	if len(vols.held) != 1 {
		t.Fatalf("volumes set up while waiting for a slot: %v", vols.held)
	}
	<-e.m.sandboxSlots

	// A running container in a sandbox that is no longer ready: it is
	// killed first, with no slot held.
	replaced := newPod("replaced", busybox("app", ""))
	uid := string(replaced.UID)
	e.cri.SetFakeSandboxes([]*critest.FakePodSandbox{{PodSandboxStatus: runtimeapi.PodSandboxStatus{
		Id: "old", Metadata: &runtimeapi.PodSandboxMetadata{Name: "replaced", Uid: uid, Namespace: "default"},
		State:  runtimeapi.PodSandboxState_SANDBOX_NOTREADY,
		Labels: map[string]string{labelPodUID: uid, LabelManaged: "true"},
	}}})
	e.cri.SetFakeContainers([]*critest.FakeContainer{{SandboxID: "old", ContainerStatus: runtimeapi.ContainerStatus{
		Id: "c1", Metadata: &runtimeapi.ContainerMetadata{Name: "app"}, State: runtimeapi.ContainerState_CONTAINER_RUNNING,
		Labels: map[string]string{labelPodUID: uid, labelContainerName: "app", LabelManaged: "true"},
	}}})
	if s := e.sync(t, replaced); !s.actions.CreateSandbox || len(s.actions.Kill) == 0 {
		t.Fatalf("actions %+v: want a new sandbox after a kill", s.actions)
	}
	sync(ctx, replaced)
	if len(vols.held) != 2 || vols.held[1] != 0 {
		t.Fatalf("slots held during the replaced pod's volume set-up: %v, want 0", vols.held)
	}

	// A claim may wait on its driver: its set-up holds no slot either.
	claimed := newPod("claimed", busybox("app", ""))
	claimed.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}}
	sync(ctx, claimed)
	if len(vols.held) != 3 || vols.held[2] != 0 {
		t.Fatalf("slots held during a claim's set-up: %v, want 0", vols.held)
	}
}

func TestQuickVolumes(t *testing.T) {
	vol := func(src corev1.VolumeSource) corev1.Volume { return corev1.Volume{Name: "v", VolumeSource: src} }
	for _, tc := range []struct {
		name    string
		volumes []corev1.Volume
		apiMode bool
		want    bool
	}{
		{"none", nil, true, true},
		{"emptyDir, hostPath, downwardAPI", []corev1.Volume{
			vol(corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}),
			vol(corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/x"}}),
			vol(corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{}}),
		}, true, true},
		{"configMap standalone", []corev1.Volume{vol(corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{}})}, false, true},
		{"configMap in API mode", []corev1.Volume{vol(corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{}})}, true, false},
		{"projected in API mode", []corev1.Volume{vol(corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{}})}, true, false},
		{"claim", []corev1.Volume{vol(corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "c"}})}, false, false},
		{"csi", []corev1.Volume{vol(corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: "d"}})}, false, false},
	} {
		pod := newPod("p", busybox("app", ""))
		pod.Spec.Volumes = tc.volumes
		if got := quickVolumes(pod, tc.apiMode); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// A desired pod that is not admitted wakes its worker only when the
// runtime has reported it before (something of it may be in CRI); its
// verdict wakes it.
func TestUnadmittedPodWakesNoWorker(t *testing.T) {
	e := newStepEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, b := range watchedBuckets {
		e.m.store.setSynced(b, true)
	}
	synced := make(chan string, 10)
	e.m.workers = newPodWorkers(ctx, e.clock, func(_ context.Context, uid string) syncResult {
		synced <- uid
		return syncResult{}
	})
	e.m.store.workers = e.m.workers
	expect := func(what, want string) {
		t.Helper()
		select {
		case uid := <-synced:
			if uid != want {
				t.Fatalf("%s: synced %q, want %q", what, uid, want)
			}
		case <-time.After(200 * time.Millisecond):
			if want != "" {
				t.Fatalf("%s: no sync of %s", what, want)
			}
		}
	}
	fresh := newPod("fresh", busybox("app", ""))
	e.m.store.onDesired(ctx, bus.Update[schemas.PodDesired]{Kind: bus.Put, Key: string(fresh.UID), Value: &schemas.PodDesired{Pod: fresh}})
	expect("a new pod without a verdict", "")
	e.m.store.onVerdict(bus.Update[schemas.AdmissionVerdict]{Kind: bus.Put, Key: string(fresh.UID), Value: &schemas.AdmissionVerdict{Admitted: true}})
	expect("its verdict", string(fresh.UID))

	known := newPod("known", busybox("app", ""))
	if _, err := e.m.observed.publish(ctx, &schemas.PodObserved{UID: string(known.UID)}); err != nil {
		t.Fatal(err)
	}
	e.m.store.onDesired(ctx, bus.Update[schemas.PodDesired]{Kind: bus.Put, Key: string(known.UID), Value: &schemas.PodDesired{Pod: known}})
	expect("a pod the runtime reported, without a verdict", string(known.UID))
}
