// Package podfields is the node's ledger of the Pod API: every field of
// v1.PodSpec, v1.Container, v1.EphemeralContainer, v1.Volume and the
// structs under them, in the k8s.io/api version nodelet is built with, is
// either honoured (a named test shows it), refused (nodelet-admission
// refuses a pod that sets it, with a reason and message) or not the
// node's (the kubelet does not act on it either: the scheduler, the API
// server or a controller does). No field is silently dropped: the ledger
// test walks the types by reflection and fails for a field the table does
// not classify, so upgrading k8s.io/api fails until each new field is
// classified. docs/pod-fields.md is the table, rendered.
//
// Admission refuses through the table (FirstRefused), so a field marked
// refused cannot be accepted.
package podfields

//go:generate go run ./gen

import (
	"fmt"
	"reflect"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Class is what the node does with a field.
type Class int

const (
	// Honoured: the node acts on the field as the kubelet does; Tests
	// show it.
	Honoured Class = iota + 1
	// Refused: nodelet-admission refuses a pod that sets the field
	// (Reason, Message).
	Refused
	// NotNode: the kubelet does not act on the field either; Note names
	// who does. The walk does not enter it.
	NotNode
)

func (c Class) String() string {
	switch c {
	case Honoured:
		return "honoured"
	case Refused:
		return "refused"
	case NotNode:
		return "not the node's"
	}
	return fmt.Sprintf("Class(%d)", int(c))
}

// Entry classifies one field.
type Entry struct {
	// Field is the Go type's name and the field's JSON name:
	// "PodSpec.hostnameOverride". An embedded struct's fields are its
	// own type's ("VolumeSource.nfs").
	Field string
	Class Class
	// Tests show an honoured field (function names of tests in the
	// repository).
	Tests []string
	// Note says how an honoured field is honoured, why a refused one is
	// refused (part of the message the pod gets), or who acts on a field
	// that is not the node's.
	Note string
	// Message, for a field another admission handler refuses first, is
	// the message that handler gives; else RefusalMessage's.
	Message string
	// Unless, for a refused field, is the container runtime's feature
	// that makes it honoured (Tests show it): admission refuses the field
	// only on a node whose runtime lacks it (RuntimeFeatures).
	Unless RuntimeFeature
}

// RuntimeFeature is a capability of the node's container runtime that
// nodelet-runtime reports (schemas.RuntimeState).
type RuntimeFeature string

// ImageVolumes: the runtime mounts images as volumes (CRI Mount.image),
// schemas.RuntimeState.ImageVolumes.
const ImageVolumes RuntimeFeature = "ImageVolumes"

// RuntimeFeatures is what the node's runtime can do; nil when not known
// yet.
type RuntimeFeatures map[RuntimeFeature]bool

// Reason is the admission reason of a refused field: the kubelet's for a
// pod needing what the node lacks (lifecycle.PodFeatureUnsupported).
const Reason = "PodFeatureUnsupported"

// RefusalMessage is the message of a pod refused for the field at path.
func RefusalMessage(path string, e Entry) string {
	if e.Message != "" {
		return e.Message
	}
	return fmt.Sprintf("Pod requires node features that are not available: %s (%s)", path, e.Note)
}

// Roots are the types the ledger covers, as kube-apiserver serves them.
var Roots = []reflect.Type{
	reflect.TypeFor[corev1.PodSpec](),
	reflect.TypeFor[corev1.Container](),
	reflect.TypeFor[corev1.EphemeralContainer](),
	reflect.TypeFor[corev1.Volume](),
}

// leaf types are values, not structs to enter.
var leaf = map[reflect.Type]bool{
	reflect.TypeFor[resource.Quantity]():  true,
	reflect.TypeFor[intstr.IntOrString](): true,
	reflect.TypeFor[metav1.Time]():        true,
	reflect.TypeFor[metav1.Duration]():    true,
}

// index is the table by Field, built on first use.
var index = sync.OnceValue(func() map[string]Entry {
	out := map[string]Entry{}
	for _, e := range Table() {
		out[e.Field] = e
	}
	return out
})

// Lookup returns the entry of field ("PodSpec.volumes").
func Lookup(field string) (Entry, bool) {
	e, ok := index()[field]
	return e, ok
}

// Field is one field the walk reaches.
type Field struct {
	// Key is the ledger's name of the field: "PodSpec.volumes".
	Key string
	// Path is the first path to it from a pod: "spec.volumes[0].nfs".
	Path string
	// GoName is the Go field's name ("NFS").
	GoName string
	Type   reflect.StructField
}

// Fields lists, once each and in the order of the types, every field
// reachable from Roots, entering the structs under every field the table
// does not mark refused or not the node's (an unclassified field is
// entered too, so that its children are listed).
func Fields() []Field {
	var out []Field
	seen := map[reflect.Type]bool{}
	var walk func(t reflect.Type, path string)
	walk = func(t reflect.Type, path string) {
		if seen[t] {
			return
		}
		seen[t] = true
		type next struct {
			t    reflect.Type
			path string
		}
		var kids []next
		for i := 0; i < t.NumField(); i++ {
			sf := t.Field(i)
			if inline(sf) {
				kids = append(kids, next{sf.Type, path})
				continue
			}
			name := jsonName(sf)
			key := t.Name() + "." + name
			p := join(path, name)
			out = append(out, Field{Key: key, Path: p, GoName: sf.Name, Type: sf})
			if e, ok := Lookup(key); ok && e.Class != Honoured {
				continue
			}
			if st, sub := structUnder(sf.Type, p); st != nil {
				kids = append(kids, next{st, sub})
			}
		}
		for _, k := range kids {
			walk(k.t, k.path)
		}
	}
	for _, r := range Roots {
		walk(r, rootPath(r))
	}
	return out
}

// rootPath is where a root type sits in a pod.
func rootPath(t reflect.Type) string {
	switch t {
	case reflect.TypeFor[corev1.PodSpec]():
		return "spec"
	case reflect.TypeFor[corev1.Container]():
		return "spec.containers[0]"
	case reflect.TypeFor[corev1.EphemeralContainer]():
		return "spec.ephemeralContainers[0]"
	case reflect.TypeFor[corev1.Volume]():
		return "spec.volumes[0]"
	}
	return t.Name()
}

// structUnder is the struct type a field of type t holds (through
// pointers, slices and maps), with the path to its first element; nil
// for values.
func structUnder(t reflect.Type, path string) (reflect.Type, string) {
	for {
		switch t.Kind() {
		case reflect.Pointer:
			t = t.Elem()
		case reflect.Slice:
			if t.Elem().Kind() == reflect.Uint8 {
				return nil, ""
			}
			t, path = t.Elem(), path+"[0]"
		case reflect.Map:
			t, path = t.Elem(), path+"[key]"
		case reflect.Struct:
			if leaf[t] {
				return nil, ""
			}
			return t, path
		default:
			return nil, ""
		}
	}
}

// inline: an embedded struct whose fields JSON puts in its parent's (an
// embedded struct with a JSON name, as PersistentVolumeClaimTemplate's
// ObjectMeta, is a field).
func inline(sf reflect.StructField) bool {
	name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
	return sf.Anonymous && name == ""
}

func jsonName(sf reflect.StructField) string {
	name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
	if name == "" || name == "-" {
		return sf.Name
	}
	return name
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}
