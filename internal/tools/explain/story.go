package explain

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/schemas"
)

// state is the latest value of each of the pod's keys, for the last line.
type state struct {
	desired        *schemas.PodDesired
	desiredRecord  *record
	desiredDeleted *record
	verdict        *schemas.AdmissionVerdict
	observed       *schemas.PodObserved
	observedGone   bool
	probes         map[string]*schemas.ProbeResult
	status         *schemas.PodStatusRecord
	eviction       *schemas.PodEviction
}

// build turns the records into entries and the last line.
func (s *Story) build(recs []record) {
	sort.SliceStable(recs, func(i, j int) bool { return recs[i].time.Before(recs[j].time) })
	st := &state{probes: map[string]*schemas.ProbeResult{}}
	counts := map[string]int{}
	var prevObserved *schemas.PodObserved
	prevStatus := ""
	var prevVerdict *schemas.AdmissionVerdict
	var prevDesired *schemas.PodDesired
	reported := map[string]bool{} // container terminations already told
	add := func(r record, stage, text string, warning bool) {
		s.Entries = append(s.Entries, Entry{Time: r.time, Stage: stage, Text: text, Warning: warning})
	}
	for i := range recs {
		r := recs[i]
		if r.bucket != "" {
			counts[r.bucket+"/"+r.key]++
		}
		switch r.bucket {
		case "":
			var ev schemas.Event
			if r.env == nil || schemas.DecodeInto(r.raw, &ev) != nil {
				continue
			}
			if !ev.Time.IsZero() {
				r.time = ev.Time
			}
			s.setName(ev.Object.Namespace, ev.Object.Name)
			stage := ev.Component
			if stage == "" {
				stage = r.env.Producer
			}
			text := ev.Reason + ": " + ev.Message
			if c := containerOf(ev.Object.FieldPath); c != "" {
				text = "container " + c + ": " + text
			}
			add(r, stage, "event "+text, ev.Type == corev1.EventTypeWarning)
		case bus.BucketDesired:
			if r.deleted {
				st.desired, st.desiredDeleted = nil, &recs[i]
				add(r, bus.Sources, "removed from the desired pods: no source has it any more", false)
				continue
			}
			var v schemas.PodDesired
			if schemas.DecodeInto(r.raw, &v) != nil || v.Pod == nil {
				continue
			}
			s.setName(v.Pod.Namespace, v.Pod.Name)
			add(r, bus.Sources, desiredText(prevDesired, &v), false)
			prevDesired, st.desired, st.desiredRecord, st.desiredDeleted = &v, &v, &recs[i], nil
		case bus.BucketAdmission:
			if r.deleted {
				st.verdict = nil
				add(r, bus.Admission, "verdict withdrawn (the pod left the desired pods)", false)
				continue
			}
			var v schemas.AdmissionVerdict
			if schemas.DecodeInto(r.raw, &v) != nil {
				continue
			}
			s.setName(v.Namespace, v.Name)
			st.verdict = &v
			if prevVerdict != nil && prevVerdict.Admitted == v.Admitted && prevVerdict.Reason == v.Reason && prevVerdict.Message == v.Message {
				continue
			}
			prevVerdict = &v
			if v.Admitted {
				add(r, bus.Admission, "admitted", false)
			} else {
				add(r, bus.Admission, "rejected: "+reasonText(v.Reason, v.Message), true)
			}
		case bus.BucketObserved:
			if r.deleted {
				st.observed, st.observedGone, prevObserved = nil, true, nil
				add(r, bus.Runtime, "forgotten: the runtime removed the pod's sandbox and containers", false)
				continue
			}
			var v schemas.PodObserved
			if schemas.DecodeInto(r.raw, &v) != nil {
				continue
			}
			s.setName(v.Namespace, v.Name)
			for _, ch := range observedChanges(prevObserved, &v, reported) {
				add(r, bus.Runtime, ch.text, ch.warning)
			}
			prevObserved, st.observed, st.observedGone = &v, &v, false
		case bus.BucketProbes:
			_, probe, _ := strings.Cut(r.key, ".")
			if r.deleted {
				delete(st.probes, probe)
				continue
			}
			var v schemas.ProbeResult
			if schemas.DecodeInto(r.raw, &v) != nil {
				continue
			}
			st.probes[probe] = &v
			text := fmt.Sprintf("container %s %s probe: %s", v.Container, v.Probe, v.Result)
			if v.Message != "" {
				text += ": " + v.Message
			}
			add(r, bus.Prober, text, v.Result == schemas.ProbeFailure)
		case bus.BucketStatus:
			if r.deleted {
				st.status = nil
				continue
			}
			var v schemas.PodStatusRecord
			if schemas.DecodeInto(r.raw, &v) != nil {
				continue
			}
			s.setName(v.Namespace, v.Name)
			st.status = &v
			if text := statusText(&v.Status); text != prevStatus {
				prevStatus = text
				add(r, bus.Status, "status "+text, v.Status.Phase == corev1.PodFailed)
			}
		case bus.BucketEvictions:
			if r.deleted {
				st.eviction = nil
				continue
			}
			var v schemas.PodEviction
			if schemas.DecodeInto(r.raw, &v) != nil {
				continue
			}
			st.eviction = &v
			add(r, bus.GC, "evicted: "+reasonText(v.Reason, v.Message), true)
		}
	}
	sort.SliceStable(s.Entries, func(i, j int) bool { return s.Entries[i].Time.Before(s.Entries[j].Time) })
	for _, b := range bus.Buckets {
		for key, n := range counts {
			if strings.HasPrefix(key, b.Name+"/") && n >= int(b.History) && b.History > 1 {
				s.Truncated = append(s.Truncated, strings.TrimPrefix(b.Name, "nodelet_v1_"))
				break
			}
		}
	}
	s.NowStage, s.Now = st.now()
}

func (s *Story) setName(ns, name string) {
	if name != "" && s.Name == "" {
		s.Namespace, s.Name = ns, name
	}
}

// containerOf reads the container name from an event's field path,
// spec.containers{app} or spec.initContainers{init}.
func containerOf(fieldPath string) string {
	_, rest, ok := strings.Cut(fieldPath, "{")
	if !ok {
		return ""
	}
	return strings.TrimSuffix(rest, "}")
}

func reasonText(reason, message string) string {
	switch {
	case reason == "":
		return message
	case message == "":
		return reason
	}
	return reason + ": " + message
}

func desiredText(prev, cur *schemas.PodDesired) string {
	p := cur.Pod
	switch {
	case prev == nil:
		var names []string
		for _, c := range p.Spec.InitContainers {
			names = append(names, c.Name+" (init)")
		}
		for _, c := range p.Spec.Containers {
			names = append(names, c.Name)
		}
		return fmt.Sprintf("desired, from the %s source; containers %s", cur.Source, strings.Join(names, ", "))
	case p.DeletionTimestamp != nil && prev.Pod.DeletionTimestamp == nil:
		grace := int64(0)
		if p.DeletionGracePeriodSeconds != nil {
			grace = *p.DeletionGracePeriodSeconds
		}
		return fmt.Sprintf("deletion requested (grace period %ds)", grace)
	case !reflect.DeepEqual(asJSON(prev.Pod.Spec), asJSON(p.Spec)):
		return "spec changed"
	}
	return "updated (metadata only)"
}

func asJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func statusText(s *corev1.PodStatus) string {
	parts := []string{"phase " + string(s.Phase)}
	for _, c := range s.Conditions {
		if c.Type == corev1.PodReady {
			parts = append(parts, "Ready="+string(c.Status))
		}
	}
	if s.PodIP != "" {
		parts = append(parts, "IP "+s.PodIP)
	}
	if s.Reason != "" {
		parts = append(parts, reasonText(s.Reason, s.Message))
	}
	return strings.Join(parts, ", ")
}
