package explain

import (
	"fmt"
	"regexp"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/tools/tap"
	"github.com/nodelet/nodelet/schemas"
)

type change struct {
	text    string
	warning bool
}

// observedChanges says what changed between two observed states of a pod:
// the sandbox, the pod-level wait, and each container's starts, exits
// (with exit codes, from the state or the last termination, each told
// once) and waits.
func observedChanges(prev, cur *schemas.PodObserved, reported map[string]bool) []change {
	var out []change
	add := func(warning bool, format string, args ...any) {
		out = append(out, change{text: fmt.Sprintf(format, args...), warning: warning})
	}
	if prev == nil {
		prev = &schemas.PodObserved{}
	}
	if sb := cur.Sandbox; sb != nil {
		if prev.Sandbox == nil || prev.Sandbox.ID != sb.ID {
			add(false, "sandbox %.12s created (attempt %d)", sb.ID, sb.Attempt)
		}
		if sb.Ready && (prev.Sandbox == nil || prev.Sandbox.ID != sb.ID || !prev.Sandbox.Ready) {
			add(false, "sandbox ready, IPs %s", strings.Join(sb.IPs, ","))
		}
		if !sb.Ready && prev.Sandbox != nil && prev.Sandbox.ID == sb.ID && prev.Sandbox.Ready {
			add(true, "sandbox %.12s no longer ready", sb.ID)
		}
	}
	if cur.Reason != "" && (cur.Reason != prev.Reason || cur.Message != prev.Message) {
		add(true, "pod waits: %s", reasonText(cur.Reason, cur.Message))
	}
	before := map[string]schemas.ContainerObserved{}
	for _, c := range allContainers(prev) {
		before[c.Name] = c
	}
	for _, c := range allContainers(cur) {
		p, seen := before[c.Name]
		name := c.Name
		if c.Kind == schemas.ContainerKindInit || c.Kind == schemas.ContainerKindSidecar || c.Kind == schemas.ContainerKindEphemeral {
			name += " (" + c.Kind + ")"
		}
		// An exit first: it happened before the container waits or runs again.
		for _, t := range []*corev1.ContainerStateTerminated{c.LastTerminationState.Terminated, c.State.Terminated} {
			if t == nil {
				continue
			}
			id := c.Name + "/" + t.ContainerID + "/" + t.FinishedAt.UTC().String()
			if reported[id] {
				continue
			}
			reported[id] = true
			text := fmt.Sprintf("container %s exited with code %d", name, t.ExitCode)
			if t.Reason != "" {
				text += " (" + t.Reason + ")"
			}
			if t.Message != "" {
				text += ": " + t.Message
			}
			add(t.ExitCode != 0, "%s", text)
		}
		s := c.State
		switch {
		case s.Running != nil:
			if !seen || p.State.Running == nil || p.ContainerID != c.ContainerID {
				text := fmt.Sprintf("container %s running", name)
				if c.RestartCount > 0 {
					text += fmt.Sprintf(" (restart %d)", c.RestartCount)
				}
				add(false, "%s", text)
			}
		case s.Waiting != nil:
			if !seen || p.State.Waiting == nil || p.State.Waiting.Reason != s.Waiting.Reason || p.State.Waiting.Message != s.Waiting.Message {
				text := fmt.Sprintf("container %s waiting: %s", name, reasonText(s.Waiting.Reason, s.Waiting.Message))
				if c.RestartCount > 0 {
					text += fmt.Sprintf(" (restarts %d)", c.RestartCount)
				}
				add(tap.ContainerTrouble(s), "%s", text)
			}
		}
	}
	switch {
	case cur.Finished && !prev.Finished && !prev.Terminated:
		add(false, "terminated: every container and the sandbox are stopped; volumes unmounted, cgroup removed")
	case cur.Finished && !prev.Finished:
		add(false, "finished: volumes unmounted, cgroup removed")
	case cur.Terminated && !prev.Terminated:
		add(false, "terminated: every container and the sandbox are stopped")
	case cur.Terminating && !prev.Terminating:
		add(false, "terminating")
	}
	return out
}

// backOffRe finds the delay in the runtime's CrashLoopBackOff message,
// "back-off 40s restarting failed container=app pod=...".
var backOffRe = regexp.MustCompile(`back-off (\S+)`)

// containerNow says in one phrase where a container is, and whether that
// is trouble: "app in CrashLoopBackOff: restarted 4 times, last exit code 1
// (Error), back-off 40s".
func containerNow(c schemas.ContainerObserved) (string, bool) {
	last := ""
	if t := c.LastTerminationState.Terminated; t != nil {
		last = fmt.Sprintf(", last exit code %d", t.ExitCode)
		if t.Reason != "" {
			last += " (" + t.Reason + ")"
		}
	}
	restarts := fmt.Sprintf("restarted %d times", c.RestartCount)
	if c.RestartCount == 1 {
		restarts = "restarted once"
	}
	s := c.State
	switch {
	case s.Waiting != nil && s.Waiting.Reason == "CrashLoopBackOff":
		text := fmt.Sprintf("container %s in CrashLoopBackOff: %s%s", c.Name, restarts, last)
		if m := backOffRe.FindStringSubmatch(s.Waiting.Message); m != nil {
			text += ", back-off " + m[1]
		}
		return text, true
	case s.Waiting != nil && tap.ContainerTrouble(s):
		return fmt.Sprintf("container %s waiting: %s", c.Name, reasonText(s.Waiting.Reason, s.Waiting.Message)), true
	case s.Waiting != nil:
		return fmt.Sprintf("container %s %s", c.Name, s.Waiting.Reason), false
	case s.Terminated != nil:
		text := fmt.Sprintf("container %s exited with code %d", c.Name, s.Terminated.ExitCode)
		if s.Terminated.Reason != "" {
			text += " (" + s.Terminated.Reason + ")"
		}
		return text, s.Terminated.ExitCode != 0
	case s.Running != nil && c.RestartCount > 0:
		return fmt.Sprintf("container %s running, %s%s", c.Name, restarts, last), true
	case s.Running != nil:
		return fmt.Sprintf("container %s running", c.Name), false
	}
	return fmt.Sprintf("container %s in an unknown state", c.Name), true
}

// allContainers lists every container of o: init containers and sidecars,
// app containers, then ephemeral containers.
func allContainers(o *schemas.PodObserved) []schemas.ContainerObserved {
	out := append(append([]schemas.ContainerObserved{}, o.InitContainers...), o.Containers...)
	return append(out, o.EphemeralContainers...)
}
