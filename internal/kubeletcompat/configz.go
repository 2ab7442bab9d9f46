package kubeletcompat

import (
	"reflect"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/nodelet/nodelet/internal/config"
)

// Configz is nodelet's configuration as the kubelet's /configz shows its
// own (cmd/kubelet/app/server.go initConfigz: a v1beta1
// KubeletConfiguration without type meta): the kubelet's defaults, with
// every honoured field set from the nodelet key it maps onto. A field is
// kept only if mapping it back (its Table setter) gives that key the value
// it has, so /configz never shows a value nodelet does not run with;
// unshown lists the fields left at the kubelet's default because nodelet's
// value has no exact KubeletConfiguration form (e.g. a taint that came
// from --cloud-provider). Refused fields are at the kubelet's default,
// which is what nodelet does.
func Configz(c *config.Config) (kc *kubeletv1beta1.KubeletConfiguration, unshown []string) {
	kc = &kubeletv1beta1.KubeletConfiguration{}
	setDefaults(kc, newGates())
	for _, f := range Table {
		if f.Class != Honoured || f.Key == "" {
			continue
		}
		want, ok := config.Value(c, f.Key)
		if !ok {
			unshown = append(unshown, f.Path)
			continue
		}
		trial := kc.DeepCopy()
		if f.get != nil {
			// Written by hand for this field: TestConfigzRoundTrips checks it.
			f.get(c, kc)
			continue
		}
		if !setPath(reflect.ValueOf(trial).Elem(), f.Path, reflect.ValueOf(want)) {
			unshown = append(unshown, f.Path)
			continue
		}
		back := config.Defaults()
		if err := f.set(trial, back); err != nil {
			unshown = append(unshown, f.Path)
			continue
		}
		if got, _ := config.Value(back, f.Key); !reflect.DeepEqual(got, want) && !(empty(reflect.ValueOf(got)) && empty(reflect.ValueOf(want))) {
			unshown = append(unshown, f.Path)
			continue
		}
		kc = trial
	}
	if len(kc.StaticPodURLHeader) > 0 {
		red := map[string][]string{}
		for k := range kc.StaticPodURLHeader {
			red[k] = []string{"[redacted]"}
		}
		kc.StaticPodURLHeader = red
	}
	return kc, unshown
}

// setPath sets the field at a table path of v (a KubeletConfiguration) to
// src converted to its type, allocating pointers on the way; false when
// there is no such field or no conversion.
func setPath(v reflect.Value, path string, src reflect.Value) bool {
	f, ok := walkField(v, path, true)
	if !ok {
		return false
	}
	out, ok := convert(src, f.Type())
	if ok {
		f.Set(out)
	}
	return ok
}

var (
	durationType     = reflect.TypeOf(time.Duration(0))
	metaDurationType = reflect.TypeOf(metav1.Duration{})
)

// convert is src as a value of type t: the same or a named form of it, a
// number of another width, a time.Duration as a metav1.Duration, any of
// these behind a pointer.
func convert(src reflect.Value, t reflect.Type) (reflect.Value, bool) {
	if t.Kind() == reflect.Pointer {
		e, ok := convert(src, t.Elem())
		if !ok {
			return reflect.Value{}, false
		}
		p := reflect.New(t.Elem())
		p.Elem().Set(e)
		return p, true
	}
	switch {
	case src.Type() == durationType && t == metaDurationType:
		return reflect.ValueOf(metav1.Duration{Duration: src.Interface().(time.Duration)}), true
	case src.Type() == durationType || t == metaDurationType:
		return reflect.Value{}, false
	case src.Kind() == t.Kind() && src.Type().ConvertibleTo(t):
		return src.Convert(t), true
	case isNumber(src.Kind()) && isNumber(t.Kind()):
		return src.Convert(t), true
	}
	return reflect.Value{}, false
}

func isNumber(k reflect.Kind) bool {
	switch k {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		return true
	}
	return false
}
