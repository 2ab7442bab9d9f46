package prober

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/bus/bustest"
	"github.com/nodelet/nodelet/internal/testenv"
	"github.com/nodelet/nodelet/schemas"
)

// busEnv is a real bus with the prober's neighbours: the test plays
// nodelet-sources and nodelet-runtime, and records (as nodelet tap would)
// every probe result and event the prober publishes.
type busEnv struct {
	t       *testing.T
	b       *bustest.Bus
	sources *bus.Conn
	runtime *bus.Conn
	tap     *bus.Conn

	mu      sync.Mutex
	history map[string][]schemas.ProbeResult // every put, per key
	deleted map[string]int
	current map[string]*schemas.ProbeResult
	events  []schemas.Event
}

func newBusEnv(t *testing.T) *busEnv {
	t.Helper()
	b := bustest.Start(t)
	e := &busEnv{t: t, b: b, sources: b.Connect(bus.Sources), runtime: b.Connect(bus.Runtime), tap: b.Connect(bus.Tap),
		history: map[string][]schemas.ProbeResult{}, deleted: map[string]int{}, current: map[string]*schemas.ProbeResult{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	synced := make(chan struct{})
	go func() {
		defer close(done)
		_ = bus.Watch[schemas.ProbeResult](ctx, e.tap, bus.BucketProbes, ">", func(u bus.Update[schemas.ProbeResult]) {
			e.mu.Lock()
			defer e.mu.Unlock()
			switch u.Kind {
			case bus.Put:
				e.history[u.Key] = append(e.history[u.Key], *u.Value)
				e.current[u.Key] = u.Value
			case bus.Deleted:
				e.deleted[u.Key]++
				delete(e.current, u.Key)
			case bus.Synced:
				select {
				case <-synced:
				default:
					close(synced)
				}
			}
		})
	}()
	bustest.OnEvents(t, e.tap, bus.EventSubject(bus.Prober, "*"), func(ev schemas.Event) {
		e.mu.Lock()
		e.events = append(e.events, ev)
		e.mu.Unlock()
	})
	select {
	case <-synced:
	case <-time.After(30 * time.Second):
		t.Fatal("watch of the probes bucket never synced")
	}
	return e
}

func busCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func (e *busEnv) putDesired(pod *corev1.Pod) {
	e.t.Helper()
	if _, err := e.sources.Put(busCtx(e.t), bus.BucketDesired, string(pod.UID),
		&schemas.PodDesired{Pod: pod, Source: schemas.SourceFile, FirstSeen: time.Now().UTC()}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *busEnv) putObserved(o *schemas.PodObserved) {
	e.t.Helper()
	if _, err := e.runtime.Put(busCtx(e.t), bus.BucketObserved, o.UID, o); err != nil {
		e.t.Fatal(err)
	}
}

// startProber runs a nodelet-prober (in this process) until the returned
// stop is called.
func (e *busEnv) startProber(o Options, r runner) (m *Daemon, stop func()) {
	e.t.Helper()
	conn := e.b.Connect(bus.Prober)
	o.Bus = conn
	if o.Log == nil {
		o.Log = bustest.Logger()
	}
	if r == nil {
		var err error
		if m, err = New(o); err != nil {
			e.t.Fatal(err)
		}
	} else {
		m = newManager(o, r, conn)
		m.conn = conn
	}
	return m, testenv.Start(e.t, m.Run)
}

func (e *busEnv) get(key string) (schemas.ProbeResult, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	r, ok := e.current[key]
	if !ok {
		return schemas.ProbeResult{}, false
	}
	return *r, true
}

// puts is how often key was written.
func (e *busEnv) puts(key string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.history[key])
}

// published lists every result written to key.
func (e *busEnv) published(key string) []schemas.ProbeResult {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]schemas.ProbeResult(nil), e.history[key]...)
}

// waitFor waits until key's current result satisfies cond.
func (e *busEnv) waitFor(key string, timeout time.Duration, what string, cond func(schemas.ProbeResult, bool) bool) schemas.ProbeResult {
	e.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		r, ok := e.get(key)
		if cond(r, ok) {
			return r
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%s: %s not reached in %v; now %+v (present %v); history %s", key, what, timeout, r, ok, e.describe(key))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (e *busEnv) waitResult(key, containerID, result string, timeout time.Duration) schemas.ProbeResult {
	e.t.Helper()
	return e.waitFor(key, timeout, result+" for "+containerID, func(r schemas.ProbeResult, ok bool) bool {
		return ok && r.Result == result && (containerID == "" || r.ContainerID == containerID)
	})
}

func (e *busEnv) waitGone(key string, timeout time.Duration) {
	e.t.Helper()
	e.waitFor(key, timeout, "deletion", func(_ schemas.ProbeResult, ok bool) bool { return !ok })
}

func (e *busEnv) describe(key string) string {
	var b strings.Builder
	for _, r := range e.published(key) {
		fmt.Fprintf(&b, "\n  %s %s %q", r.ContainerID, r.Result, r.Message)
	}
	return b.String()
}

// eventsFor lists the events received about pod uid.
func (e *busEnv) eventsFor(uid string) []schemas.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []schemas.Event
	for _, ev := range e.events {
		if string(ev.Object.UID) == uid {
			out = append(out, ev)
		}
	}
	return out
}
