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
		})
	}
}
