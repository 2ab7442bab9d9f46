package status

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

	"github.com/nodelet/nodelet/schemas"
)

func TestAPIEvent(t *testing.T) {
	tests := []struct {
		name    string
		ev      schemas.Event
		wantErr string
		check   func(t *testing.T, e *corev1.Event)
	}{{
		name: "pod event",
		ev: schemas.Event{Object: corev1.ObjectReference{Kind: "Pod", Namespace: "team", Name: "web", UID: "u1", FieldPath: "spec.containers{app}"},
			Type: "Normal", Reason: "Pulled", Message: "Successfully pulled image", Time: t0},
		check: func(t *testing.T, e *corev1.Event) {
			expect(t, e.Namespace, "team", "namespace")
			expect(t, e.Name, fmt.Sprintf("web.%x", t0.UnixNano()), "name")
			expect(t, e.InvolvedObject.APIVersion, "v1", "apiVersion")
			expect(t, e.InvolvedObject.FieldPath, "spec.containers{app}", "fieldPath")
			expect(t, e.Source, corev1.EventSource{Component: EventSourceComponent, Host: "node-1"}, "source")
			expect(t, e.Count, int32(1), "count")
			expect(t, e.FirstTimestamp.Time, t0, "firstTimestamp")
		},
	}, {
		name: "node event gets the kubelet's node reference",
		ev:   schemas.Event{Object: corev1.ObjectReference{Kind: "Node"}, Type: "Normal", Reason: "Starting", Time: t0},
		check: func(t *testing.T, e *corev1.Event) {
			expect(t, e.Namespace, "default", "namespace")
			expect(t, e.InvolvedObject.Name, "node-1", "name")
			expect(t, string(e.InvolvedObject.UID), "node-1", "uid")
		},
	}, {
		name:    "no object",
		ev:      schemas.Event{Type: "Normal", Reason: "X", Time: t0},
		wantErr: "names no object",
	}, {
		name:    "bad type",
		ev:      schemas.Event{Object: corev1.ObjectReference{Kind: "Pod", Name: "p"}, Type: "Info", Reason: "X", Time: t0},
		wantErr: "unsupported event type",
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e, err := apiEvent(&tc.ev, "node-1")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, e)
		})
	}
}

// TestCorrelatorIsDeterministic shows why a restarted nodelet-status posts
// nothing twice: a correlator primed with the events already posted makes
// the same decisions for the rest as one that saw them all live.
func TestCorrelatorIsDeterministic(t *testing.T) {
	var evs []*corev1.Event
	for i := range 40 {
		// Repeats (counted), similar events (aggregated after 10), and
		// more than the spam filter's burst for one object.
		reason := []string{"BackOff", "Pulled", "Unhealthy"}[i%3]
		msg := fmt.Sprintf("message %d", i%12)
		e, err := apiEvent(&schemas.Event{Object: corev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: "web", UID: "u"},
			Type: "Warning", Reason: reason, Message: msg, Time: t0.Add(time.Duration(i) * 7 * time.Second)}, "node-1")
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, e)
	}
	run := func(corr *record.EventCorrelator, clk *eventClock, e *corev1.Event) string {
		clk.set(e.LastTimestamp.Time)
		c := *e
		res, _ := corr.EventCorrelate(&c)
		if res.Skip {
			return "skip"
		}
		corr.UpdateState(res.Event)
		return fmt.Sprintf("%s count=%d patch=%s", res.Event.Name, res.Event.Count, res.Patch)
	}
	newCorr := func() (*record.EventCorrelator, *eventClock) {
		clk := &eventClock{}
		return record.NewEventCorrelatorWithOptions(record.CorrelatorOptions{Clock: clk}), clk
	}
	live, liveClk := newCorr()
	var want []string
	for _, e := range evs {
		want = append(want, run(live, liveClk, e))
	}
	for _, cut := range []int{1, 13, 26} {
		primed, clk := newCorr()
		for _, e := range evs[:cut] {
			run(primed, clk, e)
		}
		for i, e := range evs[cut:] {
			if got := run(primed, clk, e); got != want[cut+i] {
				t.Fatalf("restart after %d events: event %d gives %q, live gave %q", cut, cut+i, got, want[cut+i])
			}
		}
	}
	skips := 0
	for _, w := range want {
		if w == "skip" {
			skips++
		}
	}
	if skips == 0 {
		t.Error("the spam filter never engaged; the test does not cover it")
	}
}

// fakeSink answers each call with the next error of errs (nil: success);
// past the end it succeeds.
type fakeSink struct {
	errs           []error
	creates, calls int
	patches        int
}

func (f *fakeSink) next() error {
	f.calls++
	if len(f.errs) == 0 {
		return nil
	}
	err := f.errs[0]
	f.errs = f.errs[1:]
	return err
}

func (f *fakeSink) Create(e *corev1.Event) (*corev1.Event, error) {
	f.creates++
	if err := f.next(); err != nil {
		return nil, err
	}
	return e, nil
}

func (f *fakeSink) Update(e *corev1.Event) (*corev1.Event, error) { return e, f.next() }

func (f *fakeSink) Patch(e *corev1.Event, _ []byte) (*corev1.Event, error) {
	f.patches++
	if err := f.next(); err != nil {
		return nil, err
	}
	return e, nil
}

// TestDeliverGivesUp: which answers of the API hold the event queue and
// for how long (eventPoster.deliver). An event the API will never take is
// given up at once, as client-go's recordEvent does: before issue 37's fix
// a NotFound (the event's namespace deleted while the event waited) was
// retried forever and held every later event of the node.
func TestDeliverGivesUp(t *testing.T) {
	gr := schema.GroupResource{Resource: "namespaces"}
	evGR := schema.GroupResource{Resource: "events"}
	refused := errors.New(`Post "https://127.0.0.1:6443/api/v1/namespaces/ns/events": dial tcp 127.0.0.1:6443: connect: connection refused`)
	terminating := apierrors.NewForbidden(evGR, "e", errors.New("namespace ns is being terminated"))
	terminating.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: corev1.NamespaceTerminatingCause}}
	internal := apierrors.NewInternalError(errors.New("etcdserver: request timed out"))
	tests := []struct {
		name        string
		count       int32 // >1: a patch of an existing event
		errs        []error
		wantCalls   int
		wantDropped string // the reason counted, "" when posted
	}{
		{name: "posted at once", wantCalls: 1},
		{name: "namespace gone", errs: []error{apierrors.NewNotFound(gr, "ns")}, wantCalls: 1, wantDropped: "rejected"},
		{name: "namespace terminating", errs: []error{terminating}, wantCalls: 1, wantDropped: "rejected"},
		{name: "invalid", errs: []error{apierrors.NewInvalid(schema.GroupKind{Kind: "Event"}, "e", nil)}, wantCalls: 1, wantDropped: "rejected"},
		{name: "forbidden", errs: []error{apierrors.NewForbidden(evGR, "e", errors.New("no"))}, wantCalls: 1, wantDropped: "rejected"},
		{name: "already exists is posted", errs: []error{apierrors.NewAlreadyExists(evGR, "e")}, wantCalls: 1},
		{name: "patch of an expired event creates it", count: 2, errs: []error{apierrors.NewNotFound(evGR, "e")}, wantCalls: 2},
		{name: "patch, then namespace gone", count: 2, errs: []error{apierrors.NewNotFound(evGR, "e"), apierrors.NewNotFound(gr, "ns")},
			wantCalls: 2, wantDropped: "rejected"},
		{name: "too many requests, then posted", errs: []error{apierrors.NewTooManyRequests("slow down", 1)}, wantCalls: 2},
		{name: "server error for good", errs: slices.Repeat([]error{internal}, 20), wantCalls: eventMaxTries, wantDropped: "retry_limit"},
		{name: "unreachable is held past the limit", errs: slices.Repeat([]error{refused}, eventMaxTries+3), wantCalls: eventMaxTries + 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := &Daemon{log: slog.New(slog.DiscardHandler), metrics: newMetrics(prometheus.NewRegistry(), newStore())}
			p := newEventPoster(s, fake.NewClientset(), newSharedCorrelator())
			p.retryBase, p.retryMax = time.Microsecond, time.Microsecond
			sink := &fakeSink{errs: tc.errs}
			p.sink = sink
			ev, err := apiEvent(&schemas.Event{Object: corev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: "web", UID: "u"},
				Type: "Normal", Reason: "Pulled", Time: t0}, "node-1")
			if err != nil {
				t.Fatal(err)
			}
			if tc.count > 0 {
				ev.Count = tc.count
			}
			if !p.deliver(t.Context(), &record.EventCorrelateResult{Event: ev, Patch: []byte(`{}`)}) {
				t.Fatal("deliver returned false with a live context")
			}
			if sink.calls != tc.wantCalls {
				t.Errorf("API calls = %d, want %d", sink.calls, tc.wantCalls)
			}
			posted := testutil.ToFloat64(s.metrics.eventsPosted)
			for _, reason := range []string{"rejected", "retry_limit"} {
				want := 0.0
				if reason == tc.wantDropped {
					want = 1
				}
				if got := testutil.ToFloat64(s.metrics.eventsDropped.WithLabelValues(reason)); got != want {
					t.Errorf("dropped{%s} = %v, want %v", reason, got, want)
				}
			}
			if want := map[bool]float64{true: 0, false: 1}[tc.wantDropped != ""]; posted != want {
				t.Errorf("posted = %v, want %v", posted, want)
			}
		})
	}
	// A context that ends while the API is away hands the event back.
	s := &Daemon{log: slog.New(slog.DiscardHandler), metrics: newMetrics(prometheus.NewRegistry(), newStore())}
	p := newEventPoster(s, fake.NewClientset(), newSharedCorrelator())
	p.sink = &fakeSink{errs: slices.Repeat([]error{refused}, 1000)}
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	ev, _ := apiEvent(&schemas.Event{Object: corev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: "web"}, Type: "Normal", Reason: "X", Time: t0}, "n")
	if p.deliver(ctx, &record.EventCorrelateResult{Event: ev}) {
		t.Error("deliver returned true for an event never posted")
	}
}

// TestPostersShareOneCorrelator: every producer's poster goes through one
// correlator, as every source of the kubelet's events goes through the one
// correlator client-go's (*eventBroadcasterImpl).StartRecordingToSink
// makes. Its caches are then bounded once per node, not once per producer
// (issue 37: nine correlators filling their 4096-key caches were the soak's
// status growth), and its decisions are the kubelet's: the spam filter's 25
// events per object count the events of every producer, and the same event
// from two producers is one event counted twice.
func TestPostersShareOneCorrelator(t *testing.T) {
	type send struct {
		producer int // index into the posters
		pod      string
		reason   string
	}
	repeat := func(n int, f func(i int) send) []send {
		var out []send
		for i := range n {
			out = append(out, f(i))
		}
		return out
	}
	tests := []struct {
		name      string
		sends     []send
		wantSkips int
		// wantLastCount is the count of the last event correlated.
		wantLastCount int32
	}{{
		name:          "one producer past the burst of one pod",
		sends:         repeat(30, func(i int) send { return send{0, "a", fmt.Sprint("R", i)} }),
		wantSkips:     5,
		wantLastCount: 1,
	}, {
		name:          "two producers share the burst of one pod",
		sends:         repeat(30, func(i int) send { return send{i % 2, "a", fmt.Sprint("R", i)} }),
		wantSkips:     5,
		wantLastCount: 1,
	}, {
		name:          "two producers, two pods, each within its burst",
		sends:         repeat(30, func(i int) send { return send{i % 2, []string{"a", "b"}[i%2], fmt.Sprint("R", i)} }),
		wantSkips:     0,
		wantLastCount: 1,
	}, {
		name:          "the same event from two producers is counted",
		sends:         []send{{0, "a", "Killing"}, {1, "a", "Killing"}},
		wantSkips:     0,
		wantLastCount: 2,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := &Daemon{log: slog.New(slog.DiscardHandler), metrics: newMetrics(prometheus.NewRegistry(), newStore())}
			posters := newEventPosters(s, fake.NewClientset())
			if len(posters) < 2 {
				t.Fatalf("%d producers, the test needs two", len(posters))
			}
			skips := 0
			var last *corev1.Event
			for i, snd := range tc.sends {
				p := posters[snd.producer]
				e, err := apiEvent(&schemas.Event{Object: corev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: snd.pod, UID: types.UID(snd.pod)},
					Type: "Normal", Reason: snd.reason, Message: "m", Time: t0.Add(time.Duration(i) * time.Second)}, "node-1")
				if err != nil {
					t.Fatal(err)
				}
				res := p.correlate(e)
				if res == nil {
					skips++
					continue
				}
				p.corr.updateState(res.Event)
				last = res.Event
			}
			if skips != tc.wantSkips {
				t.Errorf("spam filter skipped %d events, want %d", skips, tc.wantSkips)
			}
			if last == nil || last.Count != tc.wantLastCount {
				t.Errorf("last event %+v, want count %d", last, tc.wantLastCount)
			}
		})
	}
}
