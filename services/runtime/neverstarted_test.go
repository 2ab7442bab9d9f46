package runtime

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/schemas"
)

// A pod whose deletion the runtime reads before its first sync (the API
// deleted it while the runtime was busy with others) ends Terminated with
// nothing made in CRI: nodelet-status finishes the API's deletion only
// on that. The soak (issue 37) left such a pod Terminating in the API for
// good, its Deployment scaled down 170 ms after it was bound. Once the
// sources drop it, its observed state goes.
func TestDeletedBeforeItStarted(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	pod := newPod("deleted-early", busybox("app", "exec sleep 3600"))
	now := metav1.Now()
	pod.DeletionTimestamp, pod.DeletionGracePeriodSeconds = &now, ptr.To[int64](30)
	h.run(pod)
	o := h.waitObserved(pod, time.Minute, "terminated", func(o *schemas.PodObserved) bool { return o.Terminated })
	if o.Sandbox != nil || len(o.Containers) > 0 && o.Containers[0].ContainerID != "" {
		t.Errorf("a pod deleted before it started: %s", describe(o))
	}
	if n := len(h.sandboxes(pod.UID)); n != 0 {
		t.Errorf("%d sandboxes made for a pod deleted before it started", n)
	}
	h.remove(pod)
	waitFor(t, time.Minute, "observed state deleted", func() (bool, string) { return h.obs.wasDeleted(pod.UID), "" })
}
