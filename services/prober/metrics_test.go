package prober

import (
	"testing"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/schemas"
)

// findMetric returns the series of family name whose labels include
// labels, from Gatherer.
func findMetric(t *testing.T, name string, labels map[string]string) (*dto.Metric, bool) {
	t.Helper()
	mfs, err := Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue next
				}
			}
			return m, true
		}
	}
	return nil, false
}

// probeCount is nodelet_prober_probe_total of one probe and result.
func probeCount(t *testing.T, uid, container, kind, result string) float64 {
	t.Helper()
	m, ok := findMetric(t, "nodelet_prober_probe_total", map[string]string{
		"pod_uid": uid, "container": container, "probe_type": kubeletProbeType(kind), "result": result})
	if !ok {
		return 0
	}
	return m.GetCounter().GetValue()
}

// Each executed probe counts once by result; successes are timed; a
// stopped worker's series vanish.
func TestMetrics(t *testing.T) {
	h := newHarness(t)
	pod := testPod("metrics-uid", corev1.Container{Name: "c", ReadinessProbe: execProbe(nil)})
	h.setPod(pod, observed("metrics-uid", running("c", "a", t0)))
	w := h.worker(pod, "c", schemas.ProbeReadiness)
	for _, out := range []outcome{outcomeSuccess, outcomeSuccess, outcomeFailure, outcomeUnknown} {
		h.runner.set(schemas.ProbeReadiness, out, "x", nil)
		w.doProbe()
	}
	// An erroring probe is thrown away: not counted.
	h.runner.set(schemas.ProbeReadiness, outcomeUnknown, "", errTest)
	w.doProbe()

	// unknown without an error is a failure, as in the kubelet.
	s := probeCount(t, "metrics-uid", "c", schemas.ProbeReadiness, metricResultSuccessful)
	f := probeCount(t, "metrics-uid", "c", schemas.ProbeReadiness, metricResultFailed)
	u := probeCount(t, "metrics-uid", "c", schemas.ProbeReadiness, metricResultUnknown)
	if s != 2 || f != 2 || u != 0 {
		t.Errorf("probe_total successful=%v failed=%v unknown=%v, want 2 2 0", s, f, u)
	}
	m, ok := findMetric(t, "nodelet_prober_probe_duration_seconds", map[string]string{
		"pod": "web-metrics-uid", "namespace": "default", "container": "c", "probe_type": "Readiness"})
	if !ok || m.GetHistogram().GetSampleCount() != 2 {
		t.Errorf("duration series = %v, want 2 samples (the successes)", m)
	}

	w.stop() // what the manager does when the pod goes
	if m, ok := findMetric(t, "nodelet_prober_probe_total", map[string]string{"pod_uid": "metrics-uid"}); ok {
		t.Errorf("series of a stopped worker left: %v", m)
	}
	if m, ok := findMetric(t, "nodelet_prober_probe_duration_seconds", map[string]string{"pod": "web-metrics-uid"}); ok {
		t.Errorf("duration series of a stopped worker left: %v", m)
	}
}

type testError string

func (e testError) Error() string { return string(e) }

const errTest = testError("runtime down")
