package podfields

import (
	"reflect"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
)

// Refusal is a refused field a pod sets.
type Refusal struct {
	// Path is where: "spec.volumes[2].nfs".
	Path  string
	Entry Entry
}

// Message is the admission message of the refusal.
func (r Refusal) Message() string { return RefusalMessage(r.Path, r.Entry) }

// FirstRefused finds the first field of the pod's spec, in the order of
// the types, that the ledger refuses and the pod sets: a pointer, slice
// or map that holds something (a pointer to a zero scalar, such as
// hostProcess: false, asks for nothing), or a non-zero value. It enters
// only fields whose values can hold a refused field, and names the path
// only when it finds one (admission runs it on every pod).
//
// A field refused unless the runtime has a feature (Entry.Unless) is
// passed over when features has it; with features nil (the runtime's are
// not known yet) it is refused, and the caller can tell it by Unless.
func FirstRefused(pod *corev1.Pod, features RuntimeFeatures) (Refusal, bool) {
	w := walker{path: []step{{name: "spec", idx: -1}}, features: features}
	if e, ok := w.inStruct(reflect.ValueOf(&pod.Spec).Elem()); ok {
		return Refusal{Path: w.String(), Entry: e}, true
	}
	return Refusal{}, false
}

// step is one element of a path: a field's JSON name, or an index.
type step struct {
	name string
	idx  int // -1: none; else name is "" and this is [idx]
	key  string
}

type walker struct {
	path     []step
	features RuntimeFeatures
}

func (w *walker) String() string {
	var b strings.Builder
	for i, s := range w.path {
		switch {
		case s.name != "":
			if i > 0 {
				b.WriteByte('.')
			}
			b.WriteString(s.name)
		case s.idx >= 0:
			b.WriteString("[" + strconv.Itoa(s.idx) + "]")
		default:
			b.WriteString("[" + s.key + "]")
		}
	}
	return b.String()
}

func (w *walker) inStruct(v reflect.Value) (Entry, bool) {
	for _, f := range planOf(v.Type()) {
		fv := v.Field(f.index)
		if f.inline {
			if e, ok := w.inStruct(fv); ok {
				return e, true
			}
			continue
		}
		if f.entry.Class == Refused {
			if isSet(fv) && !(f.entry.Unless != "" && w.features[f.entry.Unless]) {
				w.path = append(w.path, step{name: f.name, idx: -1})
				return f.entry, true
			}
			continue
		}
		if !f.reach {
			continue
		}
		w.path = append(w.path, step{name: f.name, idx: -1})
		if e, ok := w.under(fv); ok {
			return e, true
		}
		w.path = w.path[:len(w.path)-1]
	}
	return Entry{}, false
}

// under enters the struct values v holds.
func (w *walker) under(v reflect.Value) (Entry, bool) {
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return Entry{}, false
		}
		return w.under(v.Elem())
	case reflect.Slice:
		for i := 0; i < v.Len(); i++ {
			w.path = append(w.path, step{idx: i})
			if e, ok := w.under(v.Index(i)); ok {
				return e, true
			}
			w.path = w.path[:len(w.path)-1]
		}
	case reflect.Map:
		iter := v.MapRange()
		for iter.Next() {
			w.path = append(w.path, step{idx: -1, key: iter.Key().String()})
			if e, ok := w.under(iter.Value()); ok {
				return e, true
			}
			w.path = w.path[:len(w.path)-1]
		}
	case reflect.Struct:
		return w.inStruct(v)
	}
	return Entry{}, false
}

// fieldPlan is what the walk does with one field of a struct type: a plan
// lists only refused fields and those that can hold one.
type fieldPlan struct {
	index  int
	name   string
	inline bool
	entry  Entry
	// reach: the field's values can hold a refused field.
	reach bool
}

var plans sync.Map // reflect.Type -> []fieldPlan

// planOf is t's fields as the refusal walk sees them, made once per type.
func planOf(t reflect.Type) []fieldPlan {
	if p, ok := plans.Load(t); ok {
		return p.([]fieldPlan)
	}
	p := makePlan(t, map[reflect.Type]bool{})
	plans.Store(t, p)
	return p
}

func makePlan(t reflect.Type, visiting map[reflect.Type]bool) []fieldPlan {
	visiting[t] = true
	defer delete(visiting, t)
	out := make([]fieldPlan, 0, t.NumField())
	for i := 0; i < t.NumField(); i++ {
		sf := t.Field(i)
		f := fieldPlan{index: i, name: jsonName(sf), inline: inline(sf)}
		if !f.inline {
			f.entry, _ = Lookup(t.Name() + "." + f.name)
		}
		if st, _ := structUnder(sf.Type, ""); st != nil && f.entry.Class != Refused && f.entry.Class != NotNode {
			f.reach = reaches(st, visiting)
		}
		if f.entry.Class != Refused && !f.reach {
			continue // nothing to look at
		}
		out = append(out, f)
	}
	return out
}

// reaches: a value of struct type t can hold a refused field.
func reaches(t reflect.Type, visiting map[reflect.Type]bool) bool {
	if visiting[t] {
		return false
	}
	for _, f := range makePlan(t, visiting) {
		if f.entry.Class == Refused || f.reach {
			return true
		}
	}
	return false
}

// isSet: v asks for something.
func isSet(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return false
		}
		if v.Elem().Kind() == reflect.Struct {
			return true
		}
		return isSet(v.Elem())
	case reflect.Slice, reflect.Map:
		return v.Len() > 0
	}
	return !v.IsZero()
}
