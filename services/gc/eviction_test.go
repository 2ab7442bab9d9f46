package gc

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/schemas"
)

func guaranteed(name string) corev1.Container {
	rl := corev1.ResourceList{
		corev1.ResourceCPU:              resource.MustParse("100m"),
		corev1.ResourceMemory:           resource.MustParse("64Mi"),
		corev1.ResourceEphemeralStorage: resource.MustParse("1Gi"),
	}
	return corev1.Container{Name: name, Resources: corev1.ResourceRequirements{Requests: rl, Limits: rl}}
}

func pressureOf(t *testing.T, c *bus.Conn) map[corev1.NodeConditionType]corev1.NodeCondition {
	t.Helper()
	np, _, err := bus.Get[schemas.NodePressure](testCtx(t), c, bus.BucketPressure, bus.KeyPressure)
	if err != nil || np == nil {
		t.Fatalf("pressure bucket: %+v, %v", np, err)
	}
	out := map[corev1.NodeConditionType]corev1.NodeCondition{}
	for _, c := range np.Conditions {
		out[c.Type] = c
	}
	return out
}

// With a threshold set just past what the node has free right now, the node
// reports the pressure condition and the BestEffort pod is evicted, the
// Guaranteed one stays; with one well below, nothing happens. Real memory,
// real filesystems, real pods.
func TestEvictionWithRealThresholds(t *testing.T) {
	for _, tc := range []struct {
		signal    string
		margin    int64 // added to what is available now; negative: no pressure
		condition corev1.NodeConditionType
		resource  string
		reason    string
	}{
		{SignalMemoryAvailable, 2 << 30, corev1.NodeMemoryPressure, "memory", "KubeletHasInsufficientMemory"},
		{SignalNodeFsAvailable, 1 << 30, corev1.NodeDiskPressure, "ephemeral-storage", "KubeletHasDiskPressure"},
		{SignalMemoryAvailable, -1, corev1.NodeMemoryPressure, "", "KubeletHasSufficientMemory"},
	} {
		t.Run(tc.signal+"/"+tc.reason, func(t *testing.T) {
			e := newTestEnv(t)
			// Measure what the node has, then set the threshold near it.
			probe, _ := e.newGC()
			ns, err := probe.measure.NodeStats(testCtx(t))
			if ns == nil {
				t.Fatal(err)
			}
			obs := makeObservations(ns)[tc.signal]
			if obs.available == nil {
				t.Fatalf("no observation of %s: %+v (%v)", tc.signal, ns, err)
			}
			value := "1Ki"
			if tc.margin > 0 {
				value = resource.NewQuantity(obs.available.Value()+tc.margin, resource.BinarySI).String()
			}
			e.cfg.GC.EvictionHard = map[string]string{tc.signal: value}
			t.Logf("%s available %s, threshold %s<%s", tc.signal, obs.available, tc.signal, value)

			be := newPod("besteffort", corev1.Container{Name: "app"})
			pb := e.runSandbox(be, 0)
			e.startContainer(pb, "app", 0, "sh", "-c", "echo writing a log line; sleep 3600")
			gu := newPod("guaranteed", guaranteed("app"))
			pg := e.runSandbox(gu, 0)
			e.startContainer(pg, "app", 0, "sleep", "3600")
			for _, p := range []*corev1.Pod{be, gu} {
				e.desire(p)
				e.observe(p, false)
			}
			e.sourcesReady(true)
			events := subscribeEvents(t, e.bus)

			g, _ := e.newGC()
			waitFor(t, "gc to see both pods", func() bool { return len(g.state.activePods()) == 2 })
			// Both containers must have started writing their log and stats.
			waitFor(t, "the BestEffort pod's log", func() bool {
				return fileSize(pb.logDir+"/app/0.log") > 0
			})
			evictedBefore := counterValue(evictionsTotal.WithLabelValues(tc.signal))
			kubeletBefore := counterValue(kubeletEvictions.WithLabelValues(tc.signal))
			evicted, err := g.eviction.synchronize(testCtx(t))
			if err != nil {
				t.Fatal(err)
			}
			cond := pressureOf(t, e.bus.Connect(bus.Status))[tc.condition]
			if cond.Reason != tc.reason {
				t.Errorf("%s = %+v, want reason %s", tc.condition, cond, tc.reason)
			}
			if tc.margin < 0 {
				if cond.Status != corev1.ConditionFalse || len(evicted) != 0 {
					t.Errorf("no pressure expected: %s %s, evicted %d pods", tc.condition, cond.Status, len(evicted))
				}
				return
			}
			if cond.Status != corev1.ConditionTrue || cond.Message == "" {
				t.Errorf("%s = %+v, want True", tc.condition, cond)
			}
			if len(evicted) != 1 || evicted[0].UID != be.UID {
				t.Fatalf("evicted %v, want only the BestEffort pod %s", evicted, be.UID)
			}
			ev, _, err := bus.Get[schemas.PodEviction](testCtx(t), e.runtime, bus.BucketEvictions, string(be.UID))
			if err != nil || ev == nil {
				t.Fatalf("eviction of the BestEffort pod: %+v, %v", ev, err)
			}
			t.Logf("eviction message: %s", ev.Message)
			wantPrefix := "The node was low on resource: " + tc.resource + ". Threshold quantity: " + value + ", available: "
			if ev.Reason != "Evicted" || !strings.HasPrefix(ev.Message, wantPrefix) || ev.GracePeriodSeconds == nil || *ev.GracePeriodSeconds != 1 {
				t.Errorf("eviction = %+v (message %q), want reason Evicted, message starting %q, grace 1", ev, ev.Message, wantPrefix)
			}
			if !strings.Contains(ev.Message, "Container app was using ") {
				t.Errorf("message %q does not name the container over its request", ev.Message)
			}
			if ev, _, _ := bus.Get[schemas.PodEviction](testCtx(t), e.runtime, bus.BucketEvictions, string(gu.UID)); ev != nil {
				t.Errorf("the Guaranteed pod was evicted: %+v", ev)
			}
			if got := counterValue(kubeletEvictions.WithLabelValues(tc.signal)) - kubeletBefore; got != 1 {
				t.Errorf("kubelet_evictions{eviction_signal=%q} grew by %v, want 1", tc.signal, got)
			}
			if got := counterValue(evictionsTotal.WithLabelValues(tc.signal)) - evictedBefore; got != 1 {
				t.Errorf("nodelet_evictions{%s} grew by %v, want 1", tc.signal, got)
			}
			podEv := events.wait(t, "Evicted")
			if podEv.Object.UID != be.UID || podEv.Type != corev1.EventTypeWarning || podEv.Message != ev.Message {
				t.Errorf("Evicted event = %+v", podEv)
			}
			if nodeEv := events.wait(t, "EvictionThresholdMet"); nodeEv.Message != "Attempting to reclaim "+tc.resource {
				t.Errorf("EvictionThresholdMet event = %+v", nodeEv)
			}
		})
	}
}

// Conditions follow the kubelet: a soft threshold raises the condition at
// once but evicts only after its grace period; the condition is held for
// evictionPressureTransitionPeriod after the pressure ends; the bucket is
// written only on change; a restarted gc keeps the transition time and the
// held condition. Fake clock and measurements, real bus.
func TestPressureConditionsAndGracePeriods(t *testing.T) {
	b, cfg, clk, fm := newUnitEnv(t)
	cfg.GC.EvictionHard = map[string]string{}
	cfg.GC.EvictionSoft = map[string]string{SignalMemoryAvailable: "1Gi"}
	cfg.GC.EvictionSoftGracePeriod = map[string]string{SignalMemoryAvailable: "1m30s"}
	cfg.GC.EvictionPressureTransitionPeriod = 5 * time.Minute
	avail := int64(512 << 20)
	fm.node = func(ns *NodeStats) { ns.MemoryCapacity, ns.MemoryWorkingSet = 8<<30, 8<<30-avail }
	pod := newPod("victim", corev1.Container{Name: "app"})
	fm.pods = map[string]*PodUsage{string(pod.UID): {Containers: map[string]*ContainerUsage{"app": {Name: "app", MemoryWorkingSet: ptr(int64(100 << 20))}}}}
	src, rtc, st := b.Connect(bus.Sources), b.Connect(bus.Runtime), b.Connect(bus.Status)
	mustPut(t, src, bus.BucketSources, bus.KeySourcesReady, &schemas.SourcesReady{AllReady: true})
	mustPut(t, src, bus.BucketDesired, string(pod.UID), &schemas.PodDesired{Pod: pod})
	mustPut(t, rtc, bus.BucketObserved, string(pod.UID), &schemas.PodObserved{UID: string(pod.UID)})

	g := newUnitGC(t, b, cfg, clk, fm)
	waitFor(t, "the pod", func() bool { return len(g.state.activePods()) == 1 })
	sync := func() []*corev1.Pod {
		t.Helper()
		ev, err := g.eviction.synchronize(testCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		return ev
	}
	if ev := sync(); len(ev) != 0 {
		t.Fatalf("evicted %v within the grace period", ev)
	}
	c := pressureOf(t, st)[corev1.NodeMemoryPressure]
	if c.Status != corev1.ConditionTrue || c.Reason != "KubeletHasInsufficientMemory" {
		t.Fatalf("MemoryPressure = %+v, want True at once", c)
	}
	raised := c.LastTransitionTime
	_, rev1, _ := bus.Get[schemas.NodePressure](testCtx(t), st, bus.BucketPressure, bus.KeyPressure)

	clk.Step(time.Minute)
	if ev := sync(); len(ev) != 0 {
		t.Fatalf("evicted %v after 1m of a 1m30s grace period", ev)
	}
	if _, rev2, _ := bus.Get[schemas.NodePressure](testCtx(t), st, bus.BucketPressure, bus.KeyPressure); rev2 != rev1 {
		t.Errorf("pressure bucket rewritten without a change (revision %d → %d)", rev1, rev2)
	}
	clk.Step(time.Minute)
	ev := sync()
	if len(ev) != 1 || ev[0].UID != pod.UID {
		t.Fatalf("evicted %v after the grace period, want the pod", ev)
	}
	rec, _, _ := bus.Get[schemas.PodEviction](testCtx(t), rtc, bus.BucketEvictions, string(pod.UID))
	if rec == nil || rec.GracePeriodSeconds != nil {
		t.Errorf("soft eviction = %+v, want no grace override", rec)
	}
	want := "The node was low on resource: memory. Threshold quantity: 1Gi, available: 512Mi. Container app was using 100Mi, request is 0, has larger consumption of memory. "
	if rec != nil && rec.Message != want {
		t.Errorf("message\n %q\nwant\n %q", rec.Message, want)
	}

	// Pressure ends: the condition holds for the transition period.
	avail = 4 << 30
	clk.Step(time.Minute)
	sync()
	if c := pressureOf(t, st)[corev1.NodeMemoryPressure]; c.Status != corev1.ConditionTrue || !c.LastTransitionTime.Equal(&raised) {
		t.Errorf("right after the pressure ended MemoryPressure = %+v, want still True since %v", c, raised)
	}
	// A restarted gc does not know when the pressure was last seen: it
	// holds the condition, with the same transition time, for a whole
	// transition period from its start.
	g2 := newUnitGC(t, b, cfg, clk, fm)
	for _, step := range []time.Duration{0, 4 * time.Minute} {
		clk.Step(step)
		if _, err := g2.eviction.synchronize(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		if c := pressureOf(t, st)[corev1.NodeMemoryPressure]; c.Status != corev1.ConditionTrue || !c.LastTransitionTime.Equal(&raised) {
			t.Errorf("%v after a restart MemoryPressure = %+v, want still True since %v", step, c, raised)
		}
	}
	clk.Step(2 * time.Minute)
	if _, err := g2.eviction.synchronize(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	c = pressureOf(t, st)[corev1.NodeMemoryPressure]
	if c.Status != corev1.ConditionFalse || c.Reason != "KubeletHasSufficientMemory" || c.LastTransitionTime.Equal(&raised) {
		t.Errorf("after the transition period MemoryPressure = %+v, want False with a new transition time", c)
	}
	for _, ct := range []corev1.NodeConditionType{corev1.NodeDiskPressure, corev1.NodePIDPressure} {
		if c := pressureOf(t, st)[ct]; c.Status != corev1.ConditionFalse {
			t.Errorf("%s = %+v, want False", ct, c)
		}
	}
}

// Local storage limits evict whatever the node's pressure: an emptyDir past
// its sizeLimit, a container past its ephemeral-storage limit, a pod past
// the sum of its containers' limits. Critical (static) pods never go.
func TestLocalStorageEviction(t *testing.T) {
	limit := func(q string) corev1.Container {
		return corev1.Container{Name: "app", Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{corev1.ResourceEphemeralStorage: resource.MustParse(q)}}}
	}
	withEmptyDir := func(p *corev1.Pod, size string) *corev1.Pod {
		q := resource.MustParse(size)
		p.Spec.Volumes = []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: &q}}}}
		return p
	}
	for _, tc := range []struct {
		name   string
		pod    *corev1.Pod
		usage  *PodUsage
		want   string
		static bool
	}{
		{"emptyDir over sizeLimit", withEmptyDir(newPod("ed", corev1.Container{Name: "app"}), "1Mi"),
			&PodUsage{Volumes: map[string]VolumeUsage{"scratch": {Bytes: 2 << 20}}}, `Usage of EmptyDir volume "scratch" exceeds the limit "1Mi". `, false},
		{"emptyDir under sizeLimit", withEmptyDir(newPod("ed2", corev1.Container{Name: "app"}), "4Mi"),
			&PodUsage{Volumes: map[string]VolumeUsage{"scratch": {Bytes: 2 << 20}}}, "", false},
		{"container over its limit", newPod("cl", limit("10Mi"), func() corev1.Container { c := limit("100Mi"); c.Name = "other"; return c }()),
			&PodUsage{Containers: map[string]*ContainerUsage{"app": {RootfsBytes: 8 << 20, LogsBytes: 4 << 20}}}, `Container app exceeded its local ephemeral storage limit "10Mi". `, false},
		{"pod over the sum of limits", withEmptyDir(newPod("pl", limit("10Mi")), "1Gi"),
			&PodUsage{Containers: map[string]*ContainerUsage{"app": {RootfsBytes: 1 << 20}}, Volumes: map[string]VolumeUsage{"scratch": {Bytes: 12 << 20}}},
			"Pod ephemeral local storage usage exceeds the total limit of containers 10Mi. ", false},
		{"static pods are critical", withEmptyDir(newPod("st", corev1.Container{Name: "app"}), "1Mi"),
			&PodUsage{Volumes: map[string]VolumeUsage{"scratch": {Bytes: 2 << 20}}}, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, cfg, clk, fm := newUnitEnv(t)
			if tc.static {
				tc.pod.Annotations["kubernetes.io/config.source"] = schemas.SourceFile
			}
			fm.pods = map[string]*PodUsage{string(tc.pod.UID): tc.usage}
			mustPut(t, b.Connect(bus.Sources), bus.BucketDesired, string(tc.pod.UID), &schemas.PodDesired{Pod: tc.pod})
			mustPut(t, b.Connect(bus.Runtime), bus.BucketObserved, string(tc.pod.UID), &schemas.PodObserved{UID: string(tc.pod.UID)})
			g := newUnitGC(t, b, cfg, clk, fm)
			waitFor(t, "the pod", func() bool { return len(g.state.activePods()) == 1 })
			evicted, err := g.eviction.synchronize(testCtx(t))
			if err != nil {
				t.Fatal(err)
			}
			rec, _, _ := bus.Get[schemas.PodEviction](testCtx(t), g.bus, bus.BucketEvictions, string(tc.pod.UID))
			if tc.want == "" {
				if len(evicted) != 0 || rec != nil {
					t.Fatalf("evicted %v (%+v), want none", evicted, rec)
				}
				return
			}
			if len(evicted) != 1 || rec == nil || rec.Message != tc.want || rec.Reason != "Evicted" {
				t.Fatalf("eviction %+v, want message %q", rec, tc.want)
			}
			if !g.state.evicted(string(tc.pod.UID)) {
				t.Error("the eviction is not in gc's state")
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func mustPut(t *testing.T, c *bus.Conn, bucket, key string, m schemas.Message) {
	t.Helper()
	if _, err := c.Put(context.Background(), bucket, key, m); err != nil {
		t.Fatal(err)
	}
}

// Pods are measured only when a decision needs their figures: none while
// no pod has a local storage limit and no threshold is met; the limited
// pods alone for the local storage limits; every pod, with process counts
// only under pid pressure, once a threshold is reclaimed.
func TestPodsMeasuredOnlyWhenNeeded(t *testing.T) {
	limited := newPod("limited", corev1.Container{Name: "app", Resources: corev1.ResourceRequirements{
		Limits: corev1.ResourceList{corev1.ResourceEphemeralStorage: resource.MustParse("1Gi")}}})
	sized := newPod("sized", corev1.Container{Name: "app"})
	q := resource.MustParse("1Gi")
	sized.Spec.Volumes = []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: &q}}}}
	plain := newPod("plain", corev1.Container{Name: "app"})
	for _, tc := range []struct {
		name   string
		pods   []*corev1.Pod
		signal string // a threshold met past its grace period; "" none
		want   []usageCall
	}{
		{"no limits, no pressure", []*corev1.Pod{plain}, "", nil},
		{"limited pods only", []*corev1.Pod{plain, limited, sized}, "", []usageCall{{pods: []string{"limited", "sized"}}}},
		{"memory pressure", []*corev1.Pod{plain}, SignalMemoryAvailable, []usageCall{{pods: []string{"plain"}}}},
		{"pid pressure", []*corev1.Pod{plain}, SignalPIDAvailable, []usageCall{{pods: []string{"plain"}, processes: true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, cfg, clk, fm := newUnitEnv(t)
			cfg.GC.EvictionHard = map[string]string{}
			fm.node = func(ns *NodeStats) {
				ns.MemoryCapacity, ns.MemoryWorkingSet = 8<<30, 1<<30
				ns.MaxPID, ns.Processes = 1000, 100
			}
			switch tc.signal {
			case SignalMemoryAvailable:
				cfg.GC.EvictionHard = map[string]string{SignalMemoryAvailable: "8Gi"}
			case SignalPIDAvailable:
				cfg.GC.EvictionHard = map[string]string{SignalPIDAvailable: "950"}
			}
			src, rtc := b.Connect(bus.Sources), b.Connect(bus.Runtime)
			mustPut(t, src, bus.BucketSources, bus.KeySourcesReady, &schemas.SourcesReady{AllReady: true})
			for _, p := range tc.pods {
				mustPut(t, src, bus.BucketDesired, string(p.UID), &schemas.PodDesired{Pod: p})
				mustPut(t, rtc, bus.BucketObserved, string(p.UID), &schemas.PodObserved{UID: string(p.UID)})
			}
			g := newUnitGC(t, b, cfg, clk, fm)
			waitFor(t, "the pods", func() bool { return len(g.state.activePods()) == len(tc.pods) })
			if _, err := g.eviction.synchronize(testCtx(t)); err != nil {
				t.Fatal(err)
			}
			got := fm.calls()
			for i := range got {
				slices.Sort(got[i].pods)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("PodUsage calls %+v, want %+v", got, tc.want)
			}
		})
	}
}

// A container removed since the last pass (by container GC, or by this
// pass's reclaim) still holds its writable layer on disk until containerd's
// own garbage collection frees it: the pass measures again next time
// rather than evict a pod for space that is about to return. Once a pass
// has gone by without removals, the pod is evicted.
func TestNoEvictionWhileRemovedContainersFree(t *testing.T) {
	b, cfg, clk, fm := newUnitEnv(t)
	fm.node = func(ns *NodeStats) {
		ns.ImageFs = &FsStats{Device: 2, Capacity: 100 << 20, Available: 5 << 20, Inodes: 1000, InodesFree: 900}
		ns.NodeFs = &FsStats{Device: 1, Capacity: 100 << 20, Available: 90 << 20, Inodes: 1000, InodesFree: 900}
	}
	pod := newPod("hog", corev1.Container{Name: "app"})
	fm.pods = map[string]*PodUsage{string(pod.UID): {Containers: map[string]*ContainerUsage{"app": {Name: "app", RootfsBytes: 80 << 20}}}}
	mustPut(t, b.Connect(bus.Sources), bus.BucketDesired, string(pod.UID), &schemas.PodDesired{Pod: pod})
	mustPut(t, b.Connect(bus.Runtime), bus.BucketObserved, string(pod.UID), &schemas.PodObserved{UID: string(pod.UID)})
	g := newUnitGC(t, b, cfg, clk, fm)
	waitFor(t, "the pod", func() bool { return len(g.state.activePods()) == 1 })

	pass := func() []*corev1.Pod {
		t.Helper()
		clk.Step(10 * time.Second)
		evicted, err := g.eviction.synchronize(testCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		return evicted
	}
	// The container GC loop removes a container while a pass runs.
	g.containers.mu.Lock()
	g.containers.lastRemoval = clk.Now().Add(10*time.Second + time.Millisecond)
	g.containers.mu.Unlock()
	for i := range 2 { // the pass it ran in, and the next
		if evicted := pass(); len(evicted) != 0 {
			t.Fatalf("pass %d evicted %v, want none while a removed container's space may still return", i, evicted)
		}
	}
	if evicted := pass(); len(evicted) != 1 || evicted[0].UID != pod.UID {
		t.Fatalf("evicted %v, want the hog once no container was removed since the last pass", evicted)
	}

	// Containers removed before every pass (a pod crash-looping under
	// pressure) hold eviction off for maxDeferredEvictions passes only.
	other := newPod("other", corev1.Container{Name: "app"})
	fm.pods[string(other.UID)] = &PodUsage{Containers: map[string]*ContainerUsage{"app": {Name: "app", RootfsBytes: 10 << 20}}}
	mustPut(t, b.Connect(bus.Sources), bus.BucketDesired, string(other.UID), &schemas.PodDesired{Pod: other})
	mustPut(t, b.Connect(bus.Runtime), bus.BucketObserved, string(other.UID), &schemas.PodObserved{UID: string(other.UID)})
	waitFor(t, "the other pod", func() bool {
		for _, p := range g.state.activePods() {
			if p.UID == other.UID {
				return true
			}
		}
		return false
	})
	for i := 0; ; i++ {
		g.containers.mu.Lock()
		g.containers.lastRemoval = clk.Now().Add(time.Second) // after the last pass began
		g.containers.mu.Unlock()
		evicted := pass()
		if len(evicted) == 0 {
			if i >= maxDeferredEvictions {
				t.Fatalf("pass %d with removals evicted nothing, want eviction after %d deferred passes", i, maxDeferredEvictions)
			}
			continue
		}
		if i != maxDeferredEvictions || evicted[0].UID != other.UID {
			t.Fatalf("pass %d evicted %v, want %s after %d deferred passes", i, evicted, other.Name, maxDeferredEvictions)
		}
		break
	}
}
