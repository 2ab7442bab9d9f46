package explain

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/schemas"
)

// now names the stage that holds the pod and why, walking the pipeline in
// order (sources, admission, runtime, prober, status) and stopping at the
// first stage that has not let it through. GC's eviction overrides all.
func (st *state) now() (string, string) {
	if e := st.eviction; e != nil {
		return bus.GC, "evicted by gc: " + reasonText(e.Reason, e.Message)
	}
	if st.desired == nil {
		switch {
		case st.desiredDeleted != nil && st.observed != nil && !st.observed.Terminated:
			return bus.Runtime, "removed from the desired pods; the runtime is stopping it"
		case st.desiredDeleted != nil:
			return bus.Sources, "gone: removed from the desired pods at " +
				st.desiredDeleted.time.Local().Format("15:04:05") + phaseSuffix(st.status)
		}
		return bus.Sources, "not among the desired pods (the bus no longer holds its desired state)" + phaseSuffix(st.status)
	}
	since := ""
	if st.desiredRecord != nil {
		since = " since " + st.desiredRecord.time.Local().Format("15:04:05")
	}
	if st.verdict == nil {
		return bus.Admission, "desired" + since + ", waiting for admission"
	}
	if !st.verdict.Admitted {
		return bus.Admission, "rejected by admission: " + reasonText(st.verdict.Reason, st.verdict.Message)
	}
	o := st.observed
	if st.desired.Pod.DeletionTimestamp != nil {
		if o != nil && o.Finished {
			return bus.Status, "deleted; stopped, waiting for the source to let go" + phaseSuffix(st.status)
		}
		if o != nil && o.Terminated {
			return bus.Runtime, "deleted; stopped, the runtime is unmounting its volumes" + phaseSuffix(st.status)
		}
		return bus.Runtime, "being deleted; the runtime is stopping it"
	}
	if o == nil {
		return bus.Runtime, "admitted; the runtime has not reported it yet"
	}
	if o.Terminated {
		return bus.Runtime, "finished: every container and the sandbox are stopped" + phaseSuffix(st.status)
	}
	if o.Reason != "" {
		return bus.Runtime, "waiting: " + reasonText(o.Reason, o.Message)
	}
	if o.Sandbox == nil {
		return bus.Runtime, "admitted; no sandbox yet"
	}
	var trouble, fine []string
	running, started := 0, false
	all := append(append([]schemas.ContainerObserved{}, o.InitContainers...), o.Containers...)
	for _, c := range all {
		text, bad := containerNow(c)
		if bad {
			trouble = append(trouble, text)
		} else {
			fine = append(fine, text)
		}
		if c.State.Running != nil {
			running++
		}
		if c.RestartCount > 0 || c.LastTerminationState.Terminated != nil {
			started = true
		}
	}
	// A pod whose containers ran is running (phase Running) even while one
	// waits to restart, as the kubelet reports it.
	lead := "starting"
	if running > 0 || started {
		lead = "running"
	}
	if len(trouble) > 0 {
		return bus.Runtime, lead + "; " + strings.Join(trouble, "; ")
	}
	if running < len(o.Containers) {
		return bus.Runtime, lead + "; " + strings.Join(fine, "; ")
	}
	if failing := st.failingProbes(); len(failing) > 0 {
		return bus.Prober, "running; " + strings.Join(failing, "; ")
	}
	if st.status == nil {
		return bus.Status, "running; no status written yet"
	}
	ready := "not ready"
	for _, c := range st.status.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			ready = "ready"
		}
	}
	return bus.Status, fmt.Sprintf("running and %s (status: %s)", ready, statusText(&st.status.Status))
}

func (st *state) failingProbes() []string {
	var keys []string
	for k, p := range st.probes {
		if p.Result == schemas.ProbeFailure {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var out []string
	for _, k := range keys {
		p := st.probes[k]
		text := fmt.Sprintf("container %s %s probe failing", p.Container, p.Probe)
		if p.Message != "" {
			text += ": " + p.Message
		}
		out = append(out, text)
	}
	return out
}

func phaseSuffix(s *schemas.PodStatusRecord) string {
	if s == nil || s.Status.Phase == "" {
		return ""
	}
	return " (last status: phase " + string(s.Status.Phase) + ")"
}
