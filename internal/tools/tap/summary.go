package tap

import (
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/schemas"
)

// Summarize says in one line what a message carries.
func Summarize(env *schemas.Envelope) string {
	switch env.Schema {
	case schemas.Heartbeat{}.SchemaName():
		var v schemas.Heartbeat
		if schemas.DecodeInto(mustEnv(env), &v) == nil {
			s := fmt.Sprintf("%s pid=%d up=%s", v.Component, v.PID, readyWord(v.Ready))
			if v.Message != "" {
				s += " " + v.Message
			}
			return s
		}
	case schemas.PodDesired{}.SchemaName():
		var v schemas.PodDesired
		if schemas.DecodeInto(mustEnv(env), &v) == nil && v.Pod != nil {
			s := fmt.Sprintf("pod=%s/%s uid=%s source=%s", v.Pod.Namespace, v.Pod.Name, v.Pod.UID, v.Source)
			if v.Pod.DeletionTimestamp != nil {
				s += " deleting"
			}
			return s
		}
	case schemas.AdmissionVerdict{}.SchemaName():
		var v schemas.AdmissionVerdict
		if schemas.DecodeInto(mustEnv(env), &v) == nil {
			if v.Admitted {
				return fmt.Sprintf("pod=%s/%s admitted", v.Namespace, v.Name)
			}
			return fmt.Sprintf("pod=%s/%s rejected %s: %s", v.Namespace, v.Name, v.Reason, v.Message)
		}
	case schemas.PodObserved{}.SchemaName():
		var v schemas.PodObserved
		if schemas.DecodeInto(mustEnv(env), &v) == nil {
			var parts []string
			if v.Sandbox != nil {
				parts = append(parts, fmt.Sprintf("sandbox=%.12s ready=%v ips=%s", v.Sandbox.ID, v.Sandbox.Ready, strings.Join(v.Sandbox.IPs, ",")))
			}
			for _, c := range append(append(append([]schemas.ContainerObserved{}, v.InitContainers...), v.Containers...), v.EphemeralContainers...) {
				parts = append(parts, c.Name+"="+stateWord(c.State))
			}
			if v.Reason != "" {
				parts = append(parts, "reason="+v.Reason)
			}
			if v.Terminated {
				parts = append(parts, "terminated")
			} else if v.Terminating {
				parts = append(parts, "terminating")
			}
			return fmt.Sprintf("pod=%s/%s %s", v.Namespace, v.Name, strings.Join(parts, " "))
		}
	case schemas.ProbeResult{}.SchemaName():
		var v schemas.ProbeResult
		if schemas.DecodeInto(mustEnv(env), &v) == nil {
			s := fmt.Sprintf("pod=%s/%s container=%s %s=%s", v.Namespace, v.Name, v.Container, v.Probe, v.Result)
			if v.Message != "" {
				s += " " + v.Message
			}
			return s
		}
	case schemas.PodStatusRecord{}.SchemaName():
		var v schemas.PodStatusRecord
		if schemas.DecodeInto(mustEnv(env), &v) == nil {
			s := fmt.Sprintf("pod=%s/%s phase=%s", v.Namespace, v.Name, v.Status.Phase)
			for _, c := range v.Status.Conditions {
				if c.Type == corev1.PodReady {
					s += " ready=" + string(c.Status)
				}
			}
			if v.Status.PodIP != "" {
				s += " ip=" + v.Status.PodIP
			}
			if v.Status.Reason != "" {
				s += " reason=" + v.Status.Reason
			}
			return s
		}
	case schemas.Event{}.SchemaName():
		var v schemas.Event
		if schemas.DecodeInto(mustEnv(env), &v) == nil {
			obj := v.Object.Name
			if v.Object.Namespace != "" {
				obj = v.Object.Namespace + "/" + obj
			}
			return fmt.Sprintf("%s %s %s %s: %s", strings.ToLower(v.Object.Kind), obj, v.Type, v.Reason, v.Message)
		}
	case schemas.SourcesReady{}.SchemaName():
		var v schemas.SourcesReady
		if schemas.DecodeInto(mustEnv(env), &v) == nil {
			return fmt.Sprintf("ready=%s of %s all=%v", strings.Join(v.Ready, ","), strings.Join(v.Configured, ","), v.AllReady)
		}
	case schemas.PodVolumeStats{}.SchemaName():
		var v schemas.PodVolumeStats
		if schemas.DecodeInto(mustEnv(env), &v) == nil {
			n := 0
			for _, vols := range v.Pods {
				n += len(vols)
			}
			return fmt.Sprintf("%d volumes of %d pods measured", n, len(v.Pods))
		}
	case schemas.VolumesInUse{}.SchemaName():
		var v schemas.VolumesInUse
		if schemas.DecodeInto(mustEnv(env), &v) == nil {
			return fmt.Sprintf("in use: %s", strings.Join(v.Names, ","))
		}
	case schemas.RuntimeState{}.SchemaName():
		var v schemas.RuntimeState
		if schemas.DecodeInto(mustEnv(env), &v) == nil {
			s := fmt.Sprintf("runtimeReady=%v networkReady=%v", v.RuntimeReady, v.NetworkReady)
			if v.Message != "" {
				s += " " + v.Reason + ": " + v.Message
			}
			return s
		}
	case schemas.NodePressure{}.SchemaName():
		var v schemas.NodePressure
		if schemas.DecodeInto(mustEnv(env), &v) == nil {
			var parts []string
			for _, c := range v.Conditions {
				parts = append(parts, fmt.Sprintf("%s=%s", c.Type, c.Status))
			}
			return strings.Join(parts, " ")
		}
	case schemas.PodEviction{}.SchemaName():
		var v schemas.PodEviction
		if schemas.DecodeInto(mustEnv(env), &v) == nil {
			return fmt.Sprintf("pod=%s/%s %s: %s", v.Namespace, v.Name, v.Reason, v.Message)
		}
	}
	return fmt.Sprintf("%d bytes", len(env.Data))
}

func mustEnv(env *schemas.Envelope) []byte {
	b, _ := jsonMarshal(env)
	return b
}

func readyWord(b bool) string {
	if b {
		return "ready"
	}
	return "not-ready"
}

func stateWord(s corev1.ContainerState) string {
	switch {
	case s.Running != nil:
		return "running"
	case s.Terminated != nil:
		return fmt.Sprintf("exited(%d,%s)", s.Terminated.ExitCode, s.Terminated.Reason)
	case s.Waiting != nil:
		return "waiting(" + s.Waiting.Reason + ")"
	}
	return "unknown"
}

var jsonMarshal = func(v any) ([]byte, error) { return json.Marshal(v) }

// LevelWarning marks a line an operator should look at.
const LevelWarning = "warning"

// Warning tells whether a message reports trouble: a Warning event, a
// rejection or eviction, a failed probe, a container that failed or waits
// on an error or back-off, a daemon or runtime that is not ready, node
// pressure, a failed pod.
func Warning(env *schemas.Envelope) bool {
	b := mustEnv(env)
	switch env.Schema {
	case schemas.Event{}.SchemaName():
		var v schemas.Event
		return schemas.DecodeInto(b, &v) == nil && v.Type == corev1.EventTypeWarning
	case schemas.AdmissionVerdict{}.SchemaName():
		var v schemas.AdmissionVerdict
		return schemas.DecodeInto(b, &v) == nil && !v.Admitted
	case schemas.Heartbeat{}.SchemaName():
		var v schemas.Heartbeat
		return schemas.DecodeInto(b, &v) == nil && !v.Ready
	case schemas.ProbeResult{}.SchemaName():
		var v schemas.ProbeResult
		return schemas.DecodeInto(b, &v) == nil && v.Result == schemas.ProbeFailure
	case schemas.PodEviction{}.SchemaName():
		return true
	case schemas.RuntimeState{}.SchemaName():
		var v schemas.RuntimeState
		return schemas.DecodeInto(b, &v) == nil && (!v.RuntimeReady || !v.NetworkReady)
	case schemas.NodePressure{}.SchemaName():
		var v schemas.NodePressure
		if schemas.DecodeInto(b, &v) != nil {
			return false
		}
		for _, c := range v.Conditions {
			if c.Status == corev1.ConditionTrue {
				return true
			}
		}
	case schemas.PodStatusRecord{}.SchemaName():
		var v schemas.PodStatusRecord
		return schemas.DecodeInto(b, &v) == nil && v.Status.Phase == corev1.PodFailed
	case schemas.PodObserved{}.SchemaName():
		var v schemas.PodObserved
		if schemas.DecodeInto(b, &v) != nil {
			return false
		}
		if v.Reason != "" {
			return true
		}
		for _, c := range append(append([]schemas.ContainerObserved{}, v.InitContainers...), v.Containers...) {
			if ContainerTrouble(c.State) {
				return true
			}
		}
	}
	return false
}

// ContainerTrouble tells whether a container state is an error: it exited
// non-zero, or waits for another reason than being created.
func ContainerTrouble(s corev1.ContainerState) bool {
	switch {
	case s.Terminated != nil:
		return s.Terminated.ExitCode != 0
	case s.Waiting != nil:
		return s.Waiting.Reason != "" && s.Waiting.Reason != "ContainerCreating" && s.Waiting.Reason != "PodInitializing"
	}
	return false
}
