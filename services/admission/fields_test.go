package admission

import (
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/internal/podfields"
)

// Issue 32: every field the field ledger marks refused is refused here,
// with the reason and message docs/pod-fields.md gives: a pod that sets it
// (at the first place the ledger's walk finds it) fails admission; the
// same pod without it is admitted.
func TestLedgerRefusals(t *testing.T) {
	a := NewAdmitter(testNode(t), nil)
	if r := a.Admit(&Attributes{Pod: makePod("plain", 0)}); !r.Admit {
		t.Fatalf("a plain pod is refused: %+v", r)
	}
	n := 0
	for _, f := range podfields.Fields() {
		e, _ := podfields.Lookup(f.Key)
		if e.Class != podfields.Refused {
			continue
		}
		n++
		pod := makePod("p", 0)
		setPath(t, pod, f.Path)
		r := a.Admit(&Attributes{Pod: pod})
		want := podfields.RefusalMessage(f.Path, e)
		if r.Admit || r.Reason != podfields.Reason || r.Message != want {
			t.Errorf("%s set at %s: admit=%v reason %q message %q, want %s %q", f.Key, f.Path, r.Admit, r.Reason, r.Message, podfields.Reason, want)
		}
	}
	if n == 0 {
		t.Fatal("no refused field")
	}
}

// Pods with resource claims are admitted: nodelet-devices prepares the
// claims and the runtime creates no sandbox before (the kubelet admits
// them and prepares in SyncPod). A refused field is still named by its
// path.
func TestResourceClaimsAdmitted(t *testing.T) {
	a := NewAdmitter(testNode(t), nil)
	pod := makePod("gpu", 0)
	pod.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("gpu-template")}}
	pod.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpu"}}
	if r := a.Admit(&Attributes{Pod: pod}); !r.Admit {
		t.Fatalf("%+v", r)
	}
	vols := makePod("vols", 0)
	vols.Spec.Volumes = []corev1.Volume{{Name: "a", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: "b", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/tmp"}}},
		{Name: "c", VolumeSource: corev1.VolumeSource{NFS: &corev1.NFSVolumeSource{Server: "nfs", Path: "/"}}}}
	if r := a.Admit(&Attributes{Pod: vols}); r.Admit || !strings.HasPrefix(r.Message, "Pod requires node features that are not available: spec.volumes[2].nfs (") {
		t.Fatalf("nfs volume: %+v", r)
	}
	// Asking for nothing is not asking: a pointer to a zero scalar.
	zero := makePod("zero", 0)
	zero.Spec.Volumes = []corev1.Volume{{Name: "a", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Mode: nil}}}}
	zero.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "a", MountPath: "/a"}}
	if r := a.Admit(&Attributes{Pod: zero}); !r.Admit {
		t.Fatalf("%+v", r)
	}
}

var index = regexp.MustCompile(`^(.*)\[(\d+|key)\]$`)

// setPath sets the field at path ("spec.volumes[0].nfs") of pod to a
// value that asks for something, making what leads to it.
func setPath(t *testing.T, pod *corev1.Pod, path string) {
	t.Helper()
	v := reflect.ValueOf(pod).Elem()
	parts := strings.Split(path, ".")
	for i, part := range parts {
		name, idx := part, -1
		if m := index.FindStringSubmatch(part); m != nil {
			name = m[1]
			idx, _ = strconv.Atoi(m[2])
		}
		f, ok := fieldByJSON(v, name)
		if !ok {
			t.Fatalf("%s: no field %q in %s", path, name, v.Type())
		}
		v = f
		if idx >= 0 {
			for v.Kind() == reflect.Pointer {
				if v.IsNil() {
					v.Set(reflect.New(v.Type().Elem()))
				}
				v = v.Elem()
			}
			if v.Len() <= idx {
				v.Set(reflect.Append(v, reflect.New(v.Type().Elem()).Elem()))
			}
			v = v.Index(idx)
		}
		last := i == len(parts)-1
		if last {
			setSomething(t, v)
			return
		}
		for v.Kind() == reflect.Pointer {
			if v.IsNil() {
				v.Set(reflect.New(v.Type().Elem()))
			}
			v = v.Elem()
		}
	}
}

// fieldByJSON finds a field by its JSON name, through inlined structs.
func fieldByJSON(v reflect.Value, name string) (reflect.Value, bool) {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		sf := t.Field(i)
		tag, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
		if sf.Anonymous && tag == "" {
			if f, ok := fieldByJSON(v.Field(i), name); ok {
				return f, true
			}
			continue
		}
		if tag == name || (tag == "" && sf.Name == name) {
			return v.Field(i), true
		}
	}
	return reflect.Value{}, false
}

// setSomething gives v a value that asks for something.
func setSomething(t *testing.T, v reflect.Value) {
	t.Helper()
	switch v.Kind() {
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		if v.Elem().Kind() != reflect.Struct {
			setSomething(t, v.Elem())
		}
	case reflect.Slice:
		e := reflect.New(v.Type().Elem()).Elem()
		if e.Kind() != reflect.Struct {
			setSomething(t, e)
		}
		v.Set(reflect.Append(v, e))
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		setSomething(t, k)
		setSomething(t, e)
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.String:
		v.SetString("x")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(1)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(1)
	case reflect.Struct:
		// A value struct (a Quantity, ...): not among the refused fields.
		t.Fatalf("cannot set a %s", v.Type())
	default:
		t.Fatalf("cannot set a %s", fmt.Sprint(v.Kind()))
	}
}
