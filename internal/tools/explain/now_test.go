package explain

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/schemas"
)

// TestNow walks the pipeline: the last line names the first stage that has
// not let the pod through, and why.
func TestNow(t *testing.T) {
	d := desired("u", "default", "web", "")
	deleting := desired("u", "default", "web", "")
	deleting.Pod.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	admitted := &schemas.AdmissionVerdict{Admitted: true}
	sb := &schemas.SandboxObserved{ID: "sb", Ready: true}
	app := func(s corev1.ContainerState) []schemas.ContainerObserved {
		return []schemas.ContainerObserved{{Name: "app", Kind: schemas.ContainerKindApp, State: s}}
	}
	run := corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	readyStatus := &schemas.PodStatusRecord{Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.88.0.9",
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}}
	for _, tc := range []struct {
		name       string
		st         state
		stage      string
		wantPhrase string
	}{
		{"no verdict", state{desired: &d}, "admission", "waiting for admission"},
		{"rejected", state{desired: &d, verdict: &schemas.AdmissionVerdict{Reason: "NodeAffinity", Message: "Predicate NodeAffinity failed"}},
			"admission", "rejected by admission: NodeAffinity: Predicate NodeAffinity failed"},
		{"not observed", state{desired: &d, verdict: admitted}, "runtime", "has not reported it yet"},
		{"network", state{desired: &d, verdict: admitted, observed: &schemas.PodObserved{Reason: "NetworkNotReady", Message: "network is not ready"}},
			"runtime", "waiting: NetworkNotReady: network is not ready"},
		{"no sandbox", state{desired: &d, verdict: admitted, observed: &schemas.PodObserved{}}, "runtime", "no sandbox yet"},
		{"image", state{desired: &d, verdict: admitted, observed: &schemas.PodObserved{Sandbox: sb,
			Containers: app(corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: "Back-off pulling image \"x\""}})}},
			"runtime", "starting; container app waiting: ImagePullBackOff: Back-off pulling image"},
		{"creating", state{desired: &d, verdict: admitted, observed: &schemas.PodObserved{Sandbox: sb,
			Containers: app(corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}})}},
			"runtime", "starting; container app ContainerCreating"},
		{"probe", state{desired: &d, verdict: admitted, observed: &schemas.PodObserved{Sandbox: sb, Containers: app(run)},
			probes: map[string]*schemas.ProbeResult{"app.readiness": {Container: "app", Probe: "readiness", Result: schemas.ProbeFailure, Message: "HTTP probe failed with statuscode: 503"}}},
			"prober", "running; container app readiness probe failing: HTTP probe failed with statuscode: 503"},
		{"no status", state{desired: &d, verdict: admitted, observed: &schemas.PodObserved{Sandbox: sb, Containers: app(run)}},
			"status", "no status written yet"},
		{"ready", state{desired: &d, verdict: admitted, observed: &schemas.PodObserved{Sandbox: sb, Containers: app(run)}, status: readyStatus},
			"status", "running and ready (status: phase Running, Ready=True, IP 10.88.0.9)"},
		{"finished", state{desired: &d, verdict: admitted, observed: &schemas.PodObserved{Sandbox: sb, Terminated: true},
			status: &schemas.PodStatusRecord{Status: corev1.PodStatus{Phase: corev1.PodSucceeded}}},
			"runtime", "finished: every container and the sandbox are stopped (last status: phase Succeeded)"},
		{"deleting", state{desired: &deleting, verdict: admitted, observed: &schemas.PodObserved{Sandbox: sb, Terminating: true}},
			"runtime", "being deleted"},
		{"deleted, stopped", state{desired: &deleting, verdict: admitted, observed: &schemas.PodObserved{Sandbox: sb, Terminated: true}},
			"runtime", "deleted; stopped, the runtime is unmounting its volumes"},
		{"deleted, finished", state{desired: &deleting, verdict: admitted, observed: &schemas.PodObserved{Sandbox: sb, Terminated: true, Finished: true}},
			"status", "deleted; stopped, waiting for the source to let go"},
		{"evicted", state{desired: &d, verdict: admitted, eviction: &schemas.PodEviction{Reason: "Evicted", Message: "The node was low on resource: memory."}},
			"gc", "evicted by gc: Evicted: The node was low on resource: memory."},
		{"removed, still stopping", state{desiredDeleted: &record{}, observed: &schemas.PodObserved{Sandbox: sb}},
			"runtime", "removed from the desired pods; the runtime is stopping it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.st.probes == nil {
				tc.st.probes = map[string]*schemas.ProbeResult{}
			}
			stage, why := tc.st.now()
			if stage != tc.stage || !strings.Contains(why, tc.wantPhrase) {
				t.Errorf("now = %s: %q, want %s: %q", stage, why, tc.stage, tc.wantPhrase)
			}
		})
	}
}
