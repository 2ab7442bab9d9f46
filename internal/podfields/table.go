package podfields

import (
	"reflect"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
)

// Table is the ledger: every field the walk reaches, classified. It is
// built on first use (admission and the tests), not at start.
var Table = sync.OnceValue(func() []Entry {
	var out []Entry
	for _, part := range [][]Entry{podSpecEntries(), containerEntries(), volumeEntries()} {
		out = append(out, part...)
	}
	return append(out, ephemeralEntries(out)...)
})

func h(field, note string, tests ...string) Entry {
	return Entry{Field: field, Class: Honoured, Note: note, Tests: tests}
}

func r(field, why string) Entry { return Entry{Field: field, Class: Refused, Note: why} }

func n(field, who string) Entry { return Entry{Field: field, Class: NotNode, Note: who} }

// ephemeralForbidden are the fields of an ephemeral container that
// kube-apiserver refuses (validation's allowedEphemeralContainerFields:
// lifecycle, probes, resources and ports, and any field not listed).
var ephemeralForbidden = []string{"ports", "resources", "resizePolicy", "restartPolicy", "restartPolicyRules",
	"livenessProbe", "readinessProbe", "startupProbe", "lifecycle"}

// ephemeralEntries classifies EphemeralContainerCommon: the fields the
// API refuses for ephemeral containers are not the node's, the others are
// as the same field of Container (the runtime runs an ephemeral container
// as a Container, a conversion of the same fields).
func ephemeralEntries(table []Entry) []Entry {
	byField := map[string]Entry{}
	for _, e := range table {
		byField[e.Field] = e
	}
	var out []Entry
	t := reflect.TypeFor[corev1.EphemeralContainerCommon]()
	for i := 0; i < t.NumField(); i++ {
		name := jsonName(t.Field(i))
		field := "EphemeralContainerCommon." + name
		if slices.Contains(ephemeralForbidden, name) {
			out = append(out, n(field, "kube-apiserver: cannot be set for an ephemeral container"))
			continue
		}
		c, ok := byField["Container."+name]
		if !ok {
			continue // unclassified: the ledger test names it
		}
		c.Field = field
		if c.Class == Honoured {
			c.Note = joinNote("as in a container", c.Note)
			c.Tests = append(slices.Clone(c.Tests), "TestEphemeralContainerStartsInRunningPod")
		}
		out = append(out, c)
	}
	return out
}

func joinNote(a, b string) string {
	if b == "" {
		return a
	}
	return a + "; " + b
}
