package status

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/nodelet/nodelet/schemas"
)

func (a *apiSync) remembers(uid types.UID) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, ok := a.latest[uid]
	return ok
}

// TestAPIForgetsPodsDeletedElsewhere: the last patch response kept for a
// pod is dropped once the pod leaves the API without nodelet deleting it
// (a force delete here; a finished Job's pods in the soak, whose deletion
// is immediate). It stayed for good when the delete reached the informer
// before the sync that follows nodelet's own patch: one pod object per
// such pod, nodelet-status's growth in the soak. The test stands in for
// that race by putting the response back after the pod ran.
func TestAPIForgetsPodsDeletedElsewhere(t *testing.T) {
	h := newHarness(t)
	h.runtimeReady()
	s := h.startAPI(nil)
	ns := cp.Namespace(t)
	admin := cp.AdminClient(t)
	created, err := admin.CoreV1().Pods(ns).Create(ctxT(t), apiPod(ns, "short", "", "app"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h.desire(created, schemas.SourceAPI)
	h.admit(created)
	h.observe(created, runningObserved(created, "10.88.0.21", 1))
	running := waitPod(t, admin, ns, "short", "Running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	// A response newer than anything the informer has, as a patch
	// answered after the informer's delete is: no sync's base() drops it.
	running.ResourceVersion = "999999999"
	s.api.mu.Lock()
	s.api.latest[created.UID] = running
	s.api.mu.Unlock()

	if err := admin.CoreV1().Pods(ns).Delete(ctxT(t), "short", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the pod object to go", func() bool {
		_, err := admin.CoreV1().Pods(ns).Get(ctxT(t), "short", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	waitFor(t, 30*time.Second, "status to forget the pod's last patch response", func() bool { return !s.api.remembers(created.UID) })

	// A delete the informer only learns of by relisting comes as a
	// tombstone.
	gone := running.DeepCopy()
	gone.UID = "tombstoned"
	s.api.mu.Lock()
	s.api.latest[gone.UID] = gone
	s.api.mu.Unlock()
	s.api.onDelete(cache.DeletedFinalStateUnknown{Key: ns + "/short", Obj: gone})
	if s.api.remembers(gone.UID) {
		t.Error("a tombstone's pod is remembered")
	}
}
