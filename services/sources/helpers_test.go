package sources

import (
	"github.com/nodelet/nodelet/internal/testenv/eventually"

	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/bus/bustest"
	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/internal/daemon"
	"github.com/nodelet/nodelet/internal/testenv"
	"github.com/nodelet/nodelet/schemas"
)

// waitTimeout bounds every wait for the daemon to act. It is generous:
// machines are shared; the tests never assert speed.
const waitTimeout = 30 * time.Second

// discardLogger is quiet unless NODELET_TEST_LOG is set.
func discardLogger() *slog.Logger {
	if os.Getenv("NODELET_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// The control plane is started once, by the first test that needs it, and
// stopped by TestMain.
var sharedControlPlane = testenv.SharedControlPlane{NodeName: "node-1"}

func controlPlane(t *testing.T) *testenv.ControlPlane {
	t.Helper()
	return sharedControlPlane.Get(t)
}

func TestMain(m *testing.M) {
	code := m.Run()
	sharedControlPlane.Stop()
	os.Exit(code)
}

// harness runs the daemon's Run in-process against a real bus, and watches
// the buckets and the events it produces as the tap does.
type harness struct {
	t    *testing.T
	bus  *bustest.Bus
	tap  *bus.Conn
	cfg  *config.Config
	opts Options

	mu     sync.Mutex
	events []schemas.Event
	flushd []bool

	// daemon is the running nodelet-sources.
	daemon testenv.Runner
}

func newHarness(t *testing.T, configure func(*config.Config)) *harness {
	t.Helper()
	b := bustest.Start(t)
	cfg := config.Defaults()
	cfg.Node.Name = "node-1"
	cfg.Node.StateDir = b.StateDir
	cfg.Bus.Listen = strings.TrimPrefix(b.URL, "nats://")
	cfg.Sources.FileCheckFrequency = time.Hour // tests that want the re-list set it
	cfg.Sources.HTTPCheckFrequency = 200 * time.Millisecond
	if configure != nil {
		configure(cfg)
	}
	h := &harness{t: t, bus: b, tap: b.Connect(bus.Tap), cfg: cfg, opts: Options{Clock: clock.RealClock{}}}
	h.subscribeEvents()
	return h
}

// subscribeEvents records the events sources emits, through tap.
func (h *harness) subscribeEvents() {
	h.t.Helper()
	sub, err := h.tap.NC.Subscribe(bus.Prefix+"events."+bus.Sources+".>", func(msg *nats.Msg) {
		_, ev, err := schemas.Decode[schemas.Event](msg.Data)
		if err != nil {
			h.t.Errorf("event on %s does not decode: %v", msg.Subject, err)
			return
		}
		h.mu.Lock()
		h.events = append(h.events, *ev)
		h.mu.Unlock()
	})
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := h.tap.NC.Flush(); err != nil {
		h.t.Fatal(err)
	}
}

// start runs the daemon until stop (or the end of the test).
func (h *harness) start() {
	h.t.Helper()
	conn := h.bus.Connect(bus.Sources)
	env := &daemon.Env{Config: h.cfg, Log: discardLogger().With("component", bus.Sources), Bus: conn,
		Component: bus.Sources, Started: time.Now()}
	opts := h.opts
	opts.Config, opts.Log, opts.Bus, opts.Health = h.cfg, env.Log, conn, env.SetHealth
	opts.OnFlush = func(all bool) {
		h.mu.Lock()
		h.flushd = append(h.flushd, all)
		h.mu.Unlock()
	}
	h.mu.Lock()
	h.flushd = nil
	h.mu.Unlock()
	d, err := New(opts)
	if err != nil {
		h.t.Fatal(err)
	}
	h.daemon.Start(h.t, d.Run)
}

// stop cancels Run and waits for it to return.
func (h *harness) stop() { h.daemon.Stop() }

// waitAllReadyFlush waits until Run has published with every source's first
// list in.
func (h *harness) waitAllReadyFlush() {
	h.t.Helper()
	waitFor(h.t, "a publish with all sources ready", func() (bool, string) {
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, all := range h.flushd {
			if all {
				return true, ""
			}
		}
		return false, fmt.Sprintf("flushes: %v", h.flushd)
	})
}

// desiredEntry is one key of the desired bucket as the tap reads it.
type desiredEntry struct {
	*schemas.PodDesired
	rev uint64
}

func (h *harness) kv(bucket string) jetstream.KeyValue {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	kv, err := h.tap.KV(ctx, bucket)
	if err != nil {
		h.t.Fatal(err)
	}
	return kv
}

// desired reads the whole desired bucket, by pod name.
func (h *harness) desired() map[string]desiredEntry {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	kv := h.kv(bus.BucketDesired)
	out := map[string]desiredEntry{}
	lister, err := kv.ListKeys(ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	for k := range lister.Keys() {
		e, err := kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			h.t.Fatal(err)
		}
		_, d, err := schemas.Decode[schemas.PodDesired](e.Value())
		if err != nil {
			h.t.Fatalf("desired %s: %v", k, err)
		}
		if string(d.Pod.UID) != k {
			h.t.Fatalf("desired key %s holds pod UID %s", k, d.Pod.UID)
		}
		out[d.Pod.Name] = desiredEntry{PodDesired: d, rev: e.Revision()}
	}
	return out
}

// waitDesired waits until the desired bucket satisfies ok and returns it.
func (h *harness) waitDesired(what string, ok func(map[string]desiredEntry) bool) map[string]desiredEntry {
	h.t.Helper()
	var got map[string]desiredEntry
	waitFor(h.t, what, func() (bool, string) {
		got = h.desired()
		return ok(got), describe(got)
	})
	return got
}

// waitNames waits until the desired bucket holds exactly these pod names.
func (h *harness) waitNames(names ...string) map[string]desiredEntry {
	h.t.Helper()
	sort.Strings(names)
	return h.waitDesired("pods "+strings.Join(names, ","), func(m map[string]desiredEntry) bool {
		var have []string
		for n := range m {
			have = append(have, n)
		}
		sort.Strings(have)
		return strings.Join(have, ",") == strings.Join(names, ",")
	})
}

func describe(m map[string]desiredEntry) string {
	var s []string
	for n, e := range m {
		img := ""
		if len(e.Pod.Spec.Containers) > 0 {
			img = e.Pod.Spec.Containers[0].Image
		}
		s = append(s, fmt.Sprintf("%s(uid=%s src=%s img=%s rev=%d)", n, e.Pod.UID, e.Source, img, e.rev))
	}
	sort.Strings(s)
	return "bucket: " + strings.Join(s, " ")
}

// ready reads the sources-ready key (nil when absent) and its revision.
func (h *harness) ready() (*schemas.SourcesReady, uint64) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	e, err := h.kv(bus.BucketSources).Get(ctx, bus.KeySourcesReady)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0
	}
	if err != nil {
		h.t.Fatal(err)
	}
	_, r, err := schemas.Decode[schemas.SourcesReady](e.Value())
	if err != nil {
		h.t.Fatal(err)
	}
	return r, e.Revision()
}

func (h *harness) waitAllReady() *schemas.SourcesReady {
	h.t.Helper()
	var r *schemas.SourcesReady
	waitFor(h.t, "sources ready", func() (bool, string) {
		r, _ = h.ready()
		return r != nil && r.AllReady, fmt.Sprintf("%+v", r)
	})
	return r
}

// lastSeq is the last sequence of a bucket's stream: it moves on every put
// and every delete.
func (h *harness) lastSeq(bucket string) uint64 {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	st, err := h.kv(bucket).Status(ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	return st.(*jetstream.KeyValueBucketStatus).StreamInfo().State.LastSeq
}

// waitEvent waits for an event matching ok and returns it.
func (h *harness) waitEvent(what string, ok func(schemas.Event) bool) schemas.Event {
	h.t.Helper()
	var found schemas.Event
	waitFor(h.t, "event: "+what, func() (bool, string) {
		h.mu.Lock()
		defer h.mu.Unlock()
		var seen []string
		for _, e := range h.events {
			if ok(e) {
				found = e
				return true, ""
			}
			seen = append(seen, e.Reason+": "+e.Message)
		}
		return false, fmt.Sprintf("events: %q", seen)
	})
	return found
}

func (h *harness) eventCount(ok func(schemas.Event) bool) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, e := range h.events {
		if ok(e) {
			n++
		}
	}
	return n
}

// waitFor polls cond until it holds or waitTimeout passes.
func waitFor(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	eventually.State(t, waitTimeout, what, cond)
}

// writeFile writes a manifest the way editors do: a temporary file renamed
// over the old one.
func writeFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".swp")
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// podYAML is a minimal static pod manifest.
func podYAML(name, image string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: Pod\nmetadata:\n  name: %s\nspec:\n  containers:\n  - name: main\n    image: %s\n", name, image)
}
