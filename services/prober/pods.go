package prober

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/podutil"
	"github.com/nodelet/nodelet/schemas"
)

// probeContainers lists the containers that may have probes: app
// containers and sidecars (init containers with restartPolicy Always).
func probeContainers(pod *corev1.Pod) []*corev1.Container {
	var out []*corev1.Container
	for i := range pod.Spec.Containers {
		out = append(out, &pod.Spec.Containers[i])
	}
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		if podutil.IsRestartableInit(c) {
			out = append(out, c)
		}
	}
	return out
}

func probeKinds(c *corev1.Container) []string {
	var kinds []string
	if c.StartupProbe != nil {
		kinds = append(kinds, schemas.ProbeStartup)
	}
	if c.ReadinessProbe != nil {
		kinds = append(kinds, schemas.ProbeReadiness)
	}
	if c.LivenessProbe != nil {
		kinds = append(kinds, schemas.ProbeLiveness)
	}
	return kinds
}

func allObserved(o *schemas.PodObserved) []schemas.ContainerObserved {
	if o == nil {
		return nil
	}
	return append(append([]schemas.ContainerObserved(nil), o.Containers...), o.InitContainers...)
}

// findObserved finds a container by name among app containers first, then
// init containers and sidecars, as the kubelet's worker looks it up.
func findObserved(o *schemas.PodObserved, name string) *schemas.ContainerObserved {
	if o == nil {
		return nil
	}
	for i := range o.Containers {
		if o.Containers[i].Name == name {
			return &o.Containers[i]
		}
	}
	for i := range o.InitContainers {
		if o.InitContainers[i].Name == name {
			return &o.InitContainers[i]
		}
	}
	return nil
}

// finished: the container exited and will not be started again, so its
// probes end (the kubelet's worker stops there).
func finished(pod *corev1.Pod, c *corev1.Container, oc *schemas.ContainerObserved) bool {
	t := oc.State.Terminated
	if t == nil || podutil.IsRestartableInit(c) {
		return false
	}
	return !podutil.ContainerShouldRestart(c, &pod.Spec, t.ExitCode)
}

func contains[T comparable](s []T, v T) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
