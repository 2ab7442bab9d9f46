package admission

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/bus/bustest"
	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/internal/daemon"
	"github.com/nodelet/nodelet/internal/testenv"
	"github.com/nodelet/nodelet/internal/testenv/eventually"
	"github.com/nodelet/nodelet/schemas"
)

// waitFor is how long a test waits for the daemon to act: generous, the
// machines are shared.
const waitFor = 30 * time.Second

// harness is a real bus with nodelet-admission running in-process, and the
// other daemons' credentials to feed it.
type harness struct {
	t       *testing.T
	b       *bustest.Bus
	cfg     *config.Config
	sources *bus.Conn // writes desired pods
	runtime *bus.Conn // writes observed pods
	gc      *bus.Conn // writes node pressure
	reader  *bus.Conn // status's credential: reads every bucket

	mu     sync.Mutex
	events []schemas.Event

	// daemon is the running nodelet-admission.
	daemon testenv.Runner
	// volumes, when set, is the daemon's VolumeSource.
	volumes VolumeSource
	// nodeClient, when set, is the daemon's NodeClient.
	nodeClient kubernetes.Interface
}

func newHarness(t *testing.T, mutate ...func(*config.Config)) *harness {
	t.Helper()
	b := bustest.Start(t)
	h := &harness{
		t: t, b: b, cfg: testConfig(mutate...),
		sources: b.Connect(bus.Sources), runtime: b.Connect(bus.Runtime), gc: b.Connect(bus.GC), reader: b.Connect(bus.Status),
	}
	h.cfg.Node.StateDir = b.StateDir
	bustest.OnEvents(t, b.Connect(bus.Tap), bus.EventSubject(bus.Admission, ">"), func(ev schemas.Event) {
		h.mu.Lock()
		h.events = append(h.events, ev)
		h.mu.Unlock()
	})
	t.Cleanup(h.stop)
	return h
}

// start runs the daemon on a new connection, as a new process would.
func (h *harness) start() {
	h.t.Helper()
	conn := h.b.Connect(bus.Admission)
	d, err := New(Options{Deps: daemon.Deps{Config: h.cfg, Log: bustest.Logger(), Bus: conn}, Capacity: twoCPU, Volumes: h.volumes,
		NodeClient: h.nodeClient})
	if err != nil {
		h.t.Fatal(err)
	}
	h.daemon.Start(h.t, d.Run)
}

// stop cancels the daemon and waits for Run to return.
func (h *harness) stop() { h.daemon.Stop() }

func (h *harness) put(p *corev1.Pod) uint64 {
	h.t.Helper()
	rev, err := h.sources.Put(context.Background(), bus.BucketDesired, string(p.UID),
		schemas.PodDesired{Pod: p, Source: schemas.SourceAPI, FirstSeen: p.CreationTimestamp.Time})
	if err != nil {
		h.t.Fatal(err)
	}
	return rev
}

func (h *harness) remove(p *corev1.Pod) {
	h.t.Helper()
	if err := h.sources.Delete(context.Background(), bus.BucketDesired, string(p.UID)); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) observe(o schemas.PodObserved) {
	h.t.Helper()
	if _, err := h.runtime.Put(context.Background(), bus.BucketObserved, o.UID, o); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) pressure(conds ...corev1.NodeConditionType) uint64 {
	h.t.Helper()
	np := schemas.NodePressure{}
	for _, c := range []corev1.NodeConditionType{corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure} {
		status := corev1.ConditionFalse
		for _, want := range conds {
			if want == c {
				status = corev1.ConditionTrue
			}
		}
		np.Conditions = append(np.Conditions, corev1.NodeCondition{Type: c, Status: status})
	}
	rev, err := h.gc.Put(context.Background(), bus.BucketPressure, bus.KeyPressure, np)
	if err != nil {
		h.t.Fatal(err)
	}
	return rev
}

// verdict reads p's verdict and its revision; nil when there is none.
func (h *harness) verdict(p *corev1.Pod) (*schemas.AdmissionVerdict, uint64) {
	h.t.Helper()
	v, rev, err := bus.Get[schemas.AdmissionVerdict](context.Background(), h.reader, bus.BucketAdmission, string(p.UID))
	if err != nil {
		h.t.Fatal(err)
	}
	return v, rev
}

// wait waits until p has a verdict and returns it.
func (h *harness) wait(p *corev1.Pod) (v *schemas.AdmissionVerdict, rev uint64) {
	h.t.Helper()
	eventually.True(h.t, waitFor, "a verdict for "+p.Name, func() bool {
		v, rev = h.verdict(p)
		return v != nil
	})
	return v, rev
}

// waitGone waits until p has no verdict.
func (h *harness) waitGone(p *corev1.Pod) {
	h.t.Helper()
	eventually.True(h.t, waitFor, "the verdict of "+p.Name+" to go", func() bool {
		v, _ := h.verdict(p)
		return v == nil
	})
}

func (h *harness) admitted(p *corev1.Pod) *schemas.AdmissionVerdict {
	h.t.Helper()
	v, _ := h.wait(p)
	if !v.Admitted || v.Reason != "" || v.Message != "" {
		h.t.Fatalf("%s: want admitted, got %+v", p.Name, v)
	}
	return v
}

func (h *harness) rejected(p *corev1.Pod, reason, message string) *schemas.AdmissionVerdict {
	h.t.Helper()
	v, _ := h.wait(p)
	if v.Admitted || v.Reason != reason || (message != "" && v.Message != message) {
		h.t.Fatalf("%s: want %s %q, got %+v", p.Name, reason, message, v)
	}
	return v
}

// waitEvent waits for the Warning event admission emits about p.
func (h *harness) waitEvent(p *corev1.Pod) (found schemas.Event) {
	h.t.Helper()
	eventually.True(h.t, waitFor, "an event about "+p.Name, func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, ev := range h.events {
			if ev.Object.UID == p.UID {
				found = ev
				return true
			}
		}
		return false
	})
	return found
}

func (h *harness) eventCount(p *corev1.Pod) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, ev := range h.events {
		if ev.Object.UID == p.UID {
			n++
		}
	}
	return n
}

// snapshot is every verdict with its revision.
type snapshot map[string]struct {
	V   schemas.AdmissionVerdict
	Rev uint64
}

func (h *harness) snapshot(pods ...*corev1.Pod) snapshot {
	h.t.Helper()
	s := snapshot{}
	for _, p := range pods {
		v, rev := h.wait(p)
		s[string(p.UID)] = struct {
			V   schemas.AdmissionVerdict
			Rev uint64
		}{*v, rev}
	}
	return s
}

func (h *harness) sameSnapshot(before, after snapshot) {
	h.t.Helper()
	for uid, b := range before {
		a, ok := after[uid]
		if !ok {
			h.t.Errorf("%s: verdict lost", uid)
			continue
		}
		if !reflect.DeepEqual(a.V, b.V) || !a.V.DecidedAt.Equal(b.V.DecidedAt) {
			h.t.Errorf("%s: verdict changed:\n before %+v\n after  %+v", uid, b.V, a.V)
		}
		if a.Rev != b.Rev {
			h.t.Errorf("%s: verdict rewritten: revision %d, was %d", uid, a.Rev, b.Rev)
		}
	}
}

// pressureSeen waits until admission decides under pressure revision rev:
// the pressure and desired buckets are separate watches, so it puts
// critical marker pods until one's verdict carries rev.
func (h *harness) pressureSeen(rev uint64) {
	h.t.Helper()
	i := 0
	eventually.True(h.t, waitFor, fmt.Sprintf("a verdict under pressure revision %d", rev), func() bool {
		i++
		p := makePod(fmt.Sprintf("pressure-marker-%d-%d", rev, i), 1000, withPriority(2000001000))
		h.put(p)
		v, _ := h.wait(p)
		return v.PressureRevision >= rev
	})
}

// barrier puts a marker pod and waits for its verdict: everything put to
// the desired bucket before it has been handled by then.
func (h *harness) barrier(name string) {
	h.t.Helper()
	p := makePod(name, 1000)
	h.put(p)
	h.wait(p)
}
