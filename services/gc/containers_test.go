package gc

import (
	"os"
	"path/filepath"
	"slices"
	"sort"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critest "k8s.io/cri-api/pkg/apis/testing"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/bus/bustest"
	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/internal/cri"
	"github.com/nodelet/nodelet/internal/daemon"
)

// A container that crashed four times keeps exactly its last dead instance
// (and its log); the pod's running container, sandbox and log directory stay.
func TestContainerGCKeepsLastDeadInstance(t *testing.T) {
	e := newTestEnv(t)
	pod := newPod("crashy", corev1.Container{Name: "app"}, corev1.Container{Name: "side"})
	p := e.runSandbox(pod, 0)
	var crashed []string
	for attempt := range uint32(4) {
		crashed = append(crashed, e.crash(p, "app", attempt))
	}
	side := e.startContainer(p, "side", 0, "sleep", "3600")
	e.desire(pod)
	e.observe(pod, false)
	e.sourcesReady(true)

	g, _ := e.newGC()
	waitFor(t, "gc to see the pod", func() bool { return g.state.pod(string(pod.UID)) != nil && g.state.allSourcesReady() })
	res, err := g.containers.garbageCollect(testCtx(t), false)
	if err != nil {
		t.Fatal(err)
	}
	got := slices.Clone(res.Containers)
	sort.Strings(got)
	want := slices.Clone(crashed[:3])
	sort.Strings(want)
	if !slices.Equal(got, want) {
		t.Errorf("removed %v, want the three oldest instances %v", got, want)
	}
	left := map[string]bool{}
	for _, c := range e.containersOf(string(pod.UID)) {
		left[c.Id] = true
	}
	if len(left) != 2 || !left[crashed[3]] || !left[side] {
		t.Errorf("left %v, want the last dead instance %s and the running %s", left, crashed[3], side)
	}
	for attempt, exists := range []bool{false, false, false, true} {
		_, err := os.Stat(filepath.Join(p.logDir, "app", []string{"0", "1", "2", "3"}[attempt]+".log"))
		if (err == nil) != exists {
			t.Errorf("app/%d.log exists = %v, want %v", attempt, err == nil, exists)
		}
	}
	if sbs := e.sandboxesOf(string(pod.UID)); len(sbs) != 1 {
		t.Errorf("sandboxes = %d, want 1", len(sbs))
	}

	// A second pass finds nothing more to do.
	res, err = g.containers.garbageCollect(testCtx(t), false)
	if err != nil || len(res.Containers)+len(res.Sandboxes)+len(res.LogDirs) != 0 {
		t.Errorf("second pass removed %+v (err %v), want nothing", res, err)
	}
}

// A pod gone from desired that the runtime no longer reports leaves no
// container, sandbox or log directory after a pass — but only once every
// source is ready, and never while the runtime still reports it, running or
// final (it removes the pod itself).
func TestContainerGCRemovesRemovedPod(t *testing.T) {
	e := newTestEnv(t)
	gone := newPod("gone", corev1.Container{Name: "app"})
	pg := e.runSandbox(gone, 0)
	e.crash(pg, "app", 0)
	e.crash(pg, "app", 1)
	e.stopPod(pg)

	stopping := newPod("stopping", corev1.Container{Name: "app"})
	ps := e.runSandbox(stopping, 0)
	e.crash(ps, "app", 0)
	e.observe(stopping, false) // not desired, but the runtime is still killing it

	// The live pod has three sandboxes: an old dead empty one (goes), one
	// holding a dead container (stays: active) and the newest (stays).
	live := newPod("live", corev1.Container{Name: "app"})
	old := e.runSandbox(live, 0)
	if err := e.cri.Runtime.StopPodSandbox(testCtx(t), old.sandboxID); err != nil {
		t.Fatal(err)
	}
	pl := e.runSandbox(live, 1)
	e.crash(pl, "app", 0)
	newer := e.runSandbox(live, 2)
	e.desire(live)
	e.observe(live, false)

	e.sourcesReady(false)
	g, _ := e.newGC()
	waitFor(t, "gc to see the pods", func() bool { return g.state.pod(string(live.UID)) != nil })

	// Sources not ready: a pod missing from desired may just not be
	// delivered yet. It is treated as live: its last dead instance, its
	// sandbox and its logs stay.
	if _, err := g.containers.garbageCollect(testCtx(t), false); err != nil {
		t.Fatal(err)
	}
	if n := len(e.containersOf(string(gone.UID))); n != 1 {
		t.Fatalf("with sources not ready, %d containers of the removed pod are left, want its last instance", n)
	}
	if n := len(e.sandboxesOf(string(gone.UID))); n != 1 {
		t.Fatalf("with sources not ready, %d sandboxes of the removed pod are left, want 1", n)
	}
	if _, err := os.Stat(pg.logDir); err != nil {
		t.Fatalf("with sources not ready, the log dir went: %v", err)
	}

	e.sourcesReady(true)
	waitFor(t, "gc to see the sources ready", g.state.allSourcesReady)
	res, err := g.containers.garbageCollect(testCtx(t), false)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(e.containersOf(string(gone.UID))); n != 0 {
		t.Errorf("%d containers of the removed pod left", n)
	}
	if n := len(e.sandboxesOf(string(gone.UID))); n != 0 {
		t.Errorf("%d sandboxes of the removed pod left", n)
	}
	if _, err := os.Stat(pg.logDir); !os.IsNotExist(err) {
		t.Errorf("log dir of the removed pod: %v, want it gone", err)
	}
	if !slices.Contains(res.LogDirs, pg.logDir) || !slices.Contains(res.Sandboxes, pg.sandboxID) {
		t.Errorf("result %+v does not name the removed pod's sandbox and log dir", res)
	}
	// The pod the runtime still kills keeps everything.
	if n := len(e.containersOf(string(stopping.UID))); n != 1 {
		t.Errorf("%d containers of the terminating pod left, want 1", n)
	}
	if _, err := os.Stat(ps.logDir); err != nil {
		t.Errorf("log dir of the terminating pod: %v", err)
	}
	// The live pod keeps its dead container, newest sandbox and logs.
	if n := len(e.containersOf(string(live.UID))); n != 1 {
		t.Errorf("%d containers of the live pod left, want 1", n)
	}
	var sbs []string
	for _, sb := range e.sandboxesOf(string(live.UID)) {
		sbs = append(sbs, sb.Id)
	}
	// pl's sandbox still holds the dead container, so it is active too.
	sort.Strings(sbs)
	want := []string{pl.sandboxID, newer.sandboxID}
	sort.Strings(want)
	if !slices.Equal(sbs, want) {
		t.Errorf("sandboxes of the live pod = %v, want %v (the dead, empty %s removed)", sbs, want, old.sandboxID)
	}

	// Final, the pod is still the runtime's to remove (nodelet-runtime's
	// syncGone), with or without disk pressure: gc does not race it.
	e.stopPod(ps)
	e.observe(stopping, true)
	waitFor(t, "gc to see the pod final", func() bool { return g.state.observedTerminated(string(stopping.UID)) })
	for _, diskPressure := range []bool{false, true} {
		if _, err := g.containers.garbageCollect(testCtx(t), diskPressure); err != nil {
			t.Fatal(err)
		}
		if n := len(e.containersOf(string(stopping.UID))) + len(e.sandboxesOf(string(stopping.UID))); n != 2 {
			t.Errorf("disk pressure %v: %d containers and sandboxes of the pod the runtime still removes left, want 2", diskPressure, n)
		}
	}
	// Once the runtime forgot it (its observed entry deleted), what is
	// left goes: a runtime stopped midway.
	e.unobserve(stopping)
	waitFor(t, "gc to see the pod forgotten", func() bool { return g.state.shouldContentBeRemoved(string(stopping.UID)) })
	if _, err := g.containers.garbageCollect(testCtx(t), false); err != nil {
		t.Fatal(err)
	}
	if n := len(e.containersOf(string(stopping.UID))) + len(e.sandboxesOf(string(stopping.UID))); n != 0 {
		t.Errorf("%d containers and sandboxes of the terminated pod left", n)
	}
	if _, err := os.Stat(ps.logDir); !os.IsNotExist(err) {
		t.Errorf("log dir of the terminated pod: %v, want it gone", err)
	}
}

// The policy knobs, on the cri-api fake runtime (the real one is above).
func TestContainerGCPolicy(t *testing.T) {
	b := bustest.Start(t)
	now := time.Now()
	type ctr struct {
		id, uid, name string
		attempt       uint32
		state         runtimeapi.ContainerState
		age           time.Duration
		unmanaged     bool
	}
	dead := func(id, uid, name string, attempt uint32) ctr {
		return ctr{id, uid, name, attempt, runtimeapi.ContainerState_CONTAINER_EXITED, time.Duration(10-attempt) * time.Hour, false}
	}
	for _, tc := range []struct {
		name        string
		maxPer, max int
		minAge      time.Duration
		containers  []ctr
		wantLeft    []string
	}{
		{"maxPerPodContainer 1 keeps the newest", 1, -1, 0,
			[]ctr{dead("a0", "p", "a", 0), dead("a1", "p", "a", 1), dead("a2", "p", "a", 2)}, []string{"a2"}},
		{"maxPerPodContainer 2", 2, -1, 0,
			[]ctr{dead("a0", "p", "a", 0), dead("a1", "p", "a", 1), dead("a2", "p", "a", 2)}, []string{"a1", "a2"}},
		{"maxPerPodContainer 0 still keeps the newest", 0, -1, 0,
			[]ctr{dead("a0", "p", "a", 0), dead("a1", "p", "a", 1)}, []string{"a1"}},
		{"maxContainers levels across units but keeps each newest", 5, 1, 0,
			[]ctr{dead("a0", "p", "a", 0), dead("a1", "p", "a", 1), dead("b0", "q", "b", 0), dead("b1", "q", "b", 1)},
			[]string{"a1", "b1"}},
		{"maxContainers 3 of 2 units of 3", 5, 3, 0,
			[]ctr{dead("a0", "p", "a", 0), dead("a1", "p", "a", 1), dead("a2", "p", "a", 2), dead("b0", "q", "b", 0), dead("b1", "q", "b", 1), dead("b2", "q", "b", 2)},
			[]string{"a2", "b2"}},
		{"younger than minAge stays", 1, -1, 24 * time.Hour,
			[]ctr{dead("a0", "p", "a", 0), dead("a1", "p", "a", 1)}, []string{"a0", "a1"}},
		{"running and unmanaged are never touched", 1, -1, 0,
			[]ctr{dead("a0", "p", "a", 0), {"a1", "p", "a", 1, runtimeapi.ContainerState_CONTAINER_RUNNING, time.Hour, false},
				{"x0", "p", "x", 0, runtimeapi.ContainerState_CONTAINER_EXITED, 9 * time.Hour, true},
				{"x1", "p", "x", 1, runtimeapi.ContainerState_CONTAINER_EXITED, 8 * time.Hour, true}},
			[]string{"a0", "a1", "x0", "x1"}},
		{"unknown state is stopped and removed", 1, -1, 0,
			[]ctr{{"a0", "p", "a", 0, runtimeapi.ContainerState_CONTAINER_UNKNOWN, 3 * time.Hour, false}, dead("a1", "p", "a", 1)},
			[]string{"a1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt := critest.NewFakeRuntimeService()
			var fakes []*critest.FakeContainer
			for _, c := range tc.containers {
				labels := map[string]string{cri.LabelPodUID: c.uid, cri.LabelContainerName: c.name}
				if !c.unmanaged {
					labels[cri.LabelManaged] = "true"
				}
				fakes = append(fakes, &critest.FakeContainer{ContainerStatus: runtimeapi.ContainerStatus{
					Id: c.id, Metadata: &runtimeapi.ContainerMetadata{Name: c.name, Attempt: c.attempt},
					State: c.state, CreatedAt: now.Add(-c.age).UnixNano(), Labels: labels,
				}, SandboxID: "sb-" + c.uid})
			}
			rt.SetFakeContainers(fakes)
			cfg := config.Defaults()
			cfg.Node.PodLogsDir = t.TempDir()
			cfg.GC.MaxPerPodContainer, cfg.GC.MaxContainers, cfg.GC.MinAge = tc.maxPer, tc.max, tc.minAge
			g, err := New(Options{Deps: daemon.Deps{Config: cfg, Log: bustest.Logger(), Bus: b.Connect(bus.GC)}, Runtime: rt, Images: critest.NewFakeImageService()})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := g.containers.garbageCollect(testCtx(t), false); err != nil {
				t.Fatal(err)
			}
			var left []string
			for _, c := range rt.Containers {
				left = append(left, c.Id)
			}
			sort.Strings(left)
			if !slices.Equal(left, tc.wantLeft) {
				t.Errorf("left %v, want %v (calls %v)", left, tc.wantLeft, rt.GetCalls())
			}
		})
	}
}
