package status

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/bus/bustest"
	"github.com/nodelet/nodelet/internal/testenv/eventually"
	"github.com/nodelet/nodelet/schemas"
)

// The copy metrics read status's copies on a real bus, as status's own
// credential: a series per producer, and the runtime's events copied
// (lag 0, its source heard from within the health check's 10 seconds)
// once they are in the copy.
func TestEventCopyMetrics(t *testing.T) {
	b := bustest.Start(t)
	st, rt := b.Connect(bus.Status), b.Connect(bus.Runtime)
	reg := prometheus.NewRegistry()
	reg.MustRegister(newEventCopyCollector(st.JS))
	for i := range 3 {
		rt.Emit(schemas.Event{Object: corev1.ObjectReference{Kind: "Pod", UID: "uid-r"}, Type: "Normal", Reason: "Copied", Message: string(rune('a' + i))})
	}
	if err := rt.FlushEvents(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	gauges := func() (lag, active map[string]float64) {
		lag, active = map[string]float64{}, map[string]float64{}
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fams {
			for _, m := range f.GetMetric() {
				p := m.GetLabel()[0].GetValue()
				switch f.GetName() {
				case "nodelet_status_event_copy_lag_messages":
					lag[p] = m.GetGauge().GetValue()
				case "nodelet_status_event_copy_last_active_seconds":
					active[p] = m.GetGauge().GetValue()
				}
			}
		}
		return lag, active
	}
	eventually.True(t, 30*time.Second, "the runtime's three events in status's copy", func() bool {
		s, err := st.JS.Stream(ctxT(t), bus.StatusEventsStream(bus.Runtime))
		return err == nil && s.CachedInfo().State.Msgs == 3
	})
	lag, active := gauges()
	for _, p := range bus.EventProducers {
		if _, ok := lag[p]; !ok {
			t.Errorf("no copy lag for producer %s (have %v)", p, lag)
		}
	}
	if lag[bus.Runtime] != 0 || active[bus.Runtime] < 0 || active[bus.Runtime] > 10 {
		t.Errorf("runtime's copy: lag %v, last active %vs ago; want 0 and within 10s", lag[bus.Runtime], active[bus.Runtime])
	}
}
