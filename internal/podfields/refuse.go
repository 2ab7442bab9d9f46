package podfields

import (
	"fmt"
	"reflect"

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
// hostProcess: false, asks for nothing), or a non-zero value. It does not
// enter fields that are not the node's.
func FirstRefused(pod *corev1.Pod) (Refusal, bool) {
	return firstRefused(reflect.ValueOf(&pod.Spec).Elem(), "spec")
}

func firstRefused(v reflect.Value, path string) (Refusal, bool) {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		sf, fv := t.Field(i), v.Field(i)
		if inline(sf) {
			if r, ok := firstRefused(fv, path); ok {
				return r, true
			}
			continue
		}
		p := join(path, jsonName(sf))
		e, _ := Lookup(t.Name() + "." + jsonName(sf))
		switch e.Class {
		case Refused:
			if isSet(fv) {
				return Refusal{Path: p, Entry: e}, true
			}
			continue
		case NotNode:
			continue
		}
		if r, ok := refusedUnder(fv, p); ok {
			return r, true
		}
	}
	return Refusal{}, false
}

// refusedUnder enters the struct values v holds.
func refusedUnder(v reflect.Value, path string) (Refusal, bool) {
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return Refusal{}, false
		}
		return refusedUnder(v.Elem(), path)
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return Refusal{}, false
		}
		for i := 0; i < v.Len(); i++ {
			if r, ok := refusedUnder(v.Index(i), fmt.Sprintf("%s[%d]", path, i)); ok {
				return r, true
			}
		}
	case reflect.Map:
		if k := v.Type().Elem().Kind(); k != reflect.Struct && k != reflect.Pointer && k != reflect.Slice {
			return Refusal{}, false
		}
		iter := v.MapRange()
		for iter.Next() {
			if r, ok := refusedUnder(iter.Value(), fmt.Sprintf("%s[%v]", path, iter.Key())); ok {
				return r, true
			}
		}
	case reflect.Struct:
		if leaf[v.Type()] {
			return Refusal{}, false
		}
		return firstRefused(v, path)
	}
	return Refusal{}, false
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
