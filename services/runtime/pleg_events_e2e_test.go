package runtime

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/internal/testenv"
	"github.com/nodelet/nodelet/schemas"
)

// A container's exit reaches the observed pod through the runtime's event
// stream, not the relist: with the relist and both pod resyncs at two
// minutes or more, the exit shows within seconds — on containerd 2.x through CRI's
// GetContainerEvents (the kubelet's evented PLEG), on 1.6 through
// containerd's task events. Without the stream this test waits for the
// relist and fails.
func TestExitSeenThroughTheEventStream(t *testing.T) {
	for _, tc := range []struct {
		name  string
		major int
	}{
		{"containerd 1.6 task events", 1},
		{"containerd 2.x CRI container events", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ho := harnessOptions{configure: func(c *config.Config) {
				c.Runtime.RelistPeriod = 2 * time.Minute
				c.Runtime.SyncFrequency = 2 * time.Minute
			}, options: func(o *Options) { o.ResyncPeriod = 10 * time.Minute }}
			if tc.major == 2 {
				ho.containerd = testenv.NewContainerd(t, testenv.ContainerdOptions{Major: 2})
			} else {
				ho.containerd = testenv.NewContainerd(t, testenv.ContainerdOptions{Major: 1})
			}
			h := newHarness(t, ho)
			pod := newPod("exits", busybox("app", "sleep 3; exit 3"))
			pod.Spec.RestartPolicy = corev1.RestartPolicyNever
			h.run(pod)
			h.waitObserved(pod, time.Minute, "running", func(o *schemas.PodObserved) bool { return running(o, "app") })
			o := h.waitObserved(pod, 30*time.Second, "the exit, long before any relist or resync", func(o *schemas.PodObserved) bool {
				c := container(o, "app")
				return c != nil && c.State.Terminated != nil
			})
			if term := container(o, "app").State.Terminated; term.ExitCode != 3 {
				t.Fatalf("terminated %+v, want exit code 3", term)
			}
			// The kubelet's evented PLEG families count the stream on 2.x
			// (one connection, no error, every event's age); 1.6 is never
			// asked for it.
			fams := gatherFamilies(t, h.m.Gatherer())
			conns := fams["kubelet_evented_pleg_connection_success_count"].GetMetric()[0].GetCounter().GetValue()
			errs := fams["kubelet_evented_pleg_connection_error_count"].GetMetric()[0].GetCounter().GetValue()
			ages := fams["kubelet_evented_pleg_connection_latency_seconds"].GetMetric()[0].GetHistogram().GetSampleCount()
			if tc.major == 2 && (conns != 1 || errs != 0 || ages < 2) {
				t.Errorf("on 2.x: %v connections, %v errors, %d events' latencies; want 1, 0 and the container's events", conns, errs, ages)
			}
			if tc.major == 1 && (conns != 0 || errs != 0 || ages != 0) {
				t.Errorf("on 1.6: %v connections, %v errors, %d events' latencies; want none", conns, errs, ages)
			}
		})
	}
}
