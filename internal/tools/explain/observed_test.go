package explain

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/schemas"
)

// The story tells an ephemeral container's start and exit, marked as such.
func TestObservedChangesEphemeral(t *testing.T) {
	eph := func(st corev1.ContainerState) *schemas.PodObserved {
		return &schemas.PodObserved{EphemeralContainers: []schemas.ContainerObserved{{
			Name: "debugger", Kind: schemas.ContainerKindEphemeral, ContainerID: "containerd://d1", State: st}}}
	}
	running := eph(corev1.ContainerState{Running: &corev1.ContainerStateRunning{}})
	exited := eph(corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 3, ContainerID: "containerd://d1"}})
	var texts []string
	reported := map[string]bool{}
	for _, c := range append(observedChanges(&schemas.PodObserved{}, running, reported), observedChanges(running, exited, reported)...) {
		texts = append(texts, c.text)
	}
	got := strings.Join(texts, "; ")
	if !strings.Contains(got, "debugger (ephemeral)") || !strings.Contains(got, "exited with code 3") {
		t.Fatalf("story: %s", got)
	}
}

// The story tells the pod's end in the runtime's steps: killed, stopped,
// finished (its volumes unmounted, its cgroup removed), or the last two
// at once.
func TestObservedChangesPodEnd(t *testing.T) {
	terminating := &schemas.PodObserved{Terminating: true}
	terminated := &schemas.PodObserved{Terminated: true}
	finished := &schemas.PodObserved{Terminated: true, Finished: true}
	for _, tc := range []struct {
		name      string
		prev, cur *schemas.PodObserved
		want      string
	}{
		{"killing", &schemas.PodObserved{}, terminating, "terminating"},
		{"stopped", terminating, terminated, "terminated: every container and the sandbox are stopped"},
		{"finished", terminated, finished, "finished: volumes unmounted, cgroup removed"},
		{"both at once", terminating, finished, "terminated: every container and the sandbox are stopped; volumes unmounted, cgroup removed"},
		{"no change", finished, finished, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var texts []string
			for _, c := range observedChanges(tc.prev, tc.cur, map[string]bool{}) {
				texts = append(texts, c.text)
			}
			if got := strings.Join(texts, "; "); got != tc.want {
				t.Fatalf("story %q, want %q", got, tc.want)
			}
		})
	}
}
