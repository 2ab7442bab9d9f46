package status

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
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
