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
