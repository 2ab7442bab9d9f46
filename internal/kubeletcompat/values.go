package kubeletcompat

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
)

// The flag values the kubelet binds to KubeletConfiguration's pointer
// fields (its internal type has none; v1beta1 has many): each allocates on
// Set, so a flag not given leaves the field as the file and the defaults
// made it.

type boolPtr struct{ p **bool }

func (v boolPtr) Set(s string) error {
	b, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	*v.p = &b
	return nil
}
func (v boolPtr) String() string {
	if *v.p == nil {
		return "false"
	}
	return strconv.FormatBool(**v.p)
}
func (boolPtr) Type() string { return "bool" }

type int32Ptr struct{ p **int32 }

func (v int32Ptr) Set(s string) error {
	n, err := strconv.ParseInt(s, 0, 32)
	if err != nil {
		return err
	}
	n32 := int32(n)
	*v.p = &n32
	return nil
}
func (v int32Ptr) String() string {
	if *v.p == nil {
		return "0"
	}
	return strconv.Itoa(int(**v.p))
}
func (int32Ptr) Type() string { return "int32" }

type int64Ptr struct{ p **int64 }

func (v int64Ptr) Set(s string) error {
	n, err := strconv.ParseInt(s, 0, 64)
	if err != nil {
		return err
	}
	*v.p = &n
	return nil
}
func (v int64Ptr) String() string {
	if *v.p == nil {
		return "0"
	}
	return strconv.FormatInt(**v.p, 10)
}
func (int64Ptr) Type() string { return "int64" }

type stringPtr struct{ p **string }

func (v stringPtr) Set(s string) error { *v.p = &s; return nil }
func (v stringPtr) String() string {
	if *v.p == nil {
		return ""
	}
	return **v.p
}
func (stringPtr) Type() string { return "string" }

type durationPtr struct{ p **metav1.Duration }

func (v durationPtr) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*v.p = &metav1.Duration{Duration: d}
	return nil
}
func (v durationPtr) String() string {
	if *v.p == nil {
		return "0s"
	}
	return (*v.p).Duration.String()
}
func (durationPtr) Type() string { return "duration" }

// boolValue and int64Value bind plain fields through Var, so that every
// config flag goes through binder.v alike.
type boolValue struct{ p *bool }

func (v boolValue) Set(s string) error {
	b, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	*v.p = b
	return nil
}
func (v boolValue) String() string { return strconv.FormatBool(*v.p) }
func (boolValue) Type() string     { return "bool" }

type int64Value struct{ p *int64 }

func (v int64Value) Set(s string) error {
	n, err := strconv.ParseInt(s, 0, 64)
	if err != nil {
		return err
	}
	*v.p = n
	return nil
}
func (v int64Value) String() string { return strconv.FormatInt(*v.p, 10) }
func (int64Value) Type() string     { return "int64" }

// ipVar is the kubelet's utilflag.IPVar: an IP address or empty.
type ipVar struct{ p *string }

func (v ipVar) Set(s string) error {
	if s != "" {
		if _, err := netip.ParseAddr(strings.TrimSpace(s)); err != nil {
			return fmt.Errorf("%q is not a valid IP address", s)
		}
	}
	*v.p = s
	return nil
}
func (v ipVar) String() string { return *v.p }
func (ipVar) Type() string     { return "ip" }

// taintsVar is the kubelet's utilflag.RegisterWithTaintsVar:
// key=value:Effect or key:Effect, comma separated; each Set replaces.
type taintsVar struct{ p *[]corev1.Taint }

func (v taintsVar) Set(s string) error {
	var out []corev1.Taint
	for _, spec := range strings.Split(s, ",") {
		if spec = strings.TrimSpace(spec); spec == "" {
			continue
		}
		t, err := parseTaint(spec)
		if err != nil {
			return err
		}
		out = append(out, t)
	}
	*v.p = out
	return nil
}
func (v taintsVar) String() string {
	var parts []string
	for _, t := range *v.p {
		parts = append(parts, t.ToString())
	}
	return strings.Join(parts, ",")
}
func (taintsVar) Type() string { return "[]v1.Taint" }

func parseTaint(spec string) (corev1.Taint, error) {
	kv, effect, ok := strings.Cut(spec, ":")
	if !ok {
		return corev1.Taint{}, fmt.Errorf("invalid taint spec %q: no effect (key=value:Effect)", spec)
	}
	e := corev1.TaintEffect(effect)
	switch e {
	case corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
	default:
		return corev1.Taint{}, fmt.Errorf("invalid taint effect %q in %q: NoSchedule, PreferNoSchedule or NoExecute", effect, spec)
	}
	key, value, _ := strings.Cut(kv, "=")
	if key == "" {
		return corev1.Taint{}, fmt.Errorf("invalid taint spec %q: empty key", spec)
	}
	return corev1.Taint{Key: key, Value: value, Effect: e}, nil
}

// reservedMemoryVar is the kubelet's utilflag.ReservedMemoryVar:
// NUMA:resource=quantity,... ; repeated flags accumulate.
type reservedMemoryVar struct {
	p   *[]kubeletv1beta1.MemoryReservation
	set bool
}

func (v *reservedMemoryVar) Set(s string) error {
	if !v.set {
		*v.p = nil
		v.set = true
	}
	for _, numa := range strings.Split(s, ";") {
		node, list, ok := strings.Cut(strings.TrimSpace(numa), ":")
		if !ok {
			return fmt.Errorf("invalid reserved memory %q: NUMA:resource=quantity,...", numa)
		}
		n, err := strconv.ParseInt(node, 10, 32)
		if err != nil {
			return fmt.Errorf("invalid NUMA node %q: %w", node, err)
		}
		r := kubeletv1beta1.MemoryReservation{NumaNode: int32(n), Limits: corev1.ResourceList{}}
		for _, kv := range strings.Split(list, ",") {
			name, qty, ok := strings.Cut(kv, "=")
			if !ok {
				return fmt.Errorf("invalid reserved memory %q: resource=quantity", kv)
			}
			q, err := resource.ParseQuantity(qty)
			if err != nil {
				return fmt.Errorf("invalid quantity %q: %w", qty, err)
			}
			r.Limits[corev1.ResourceName(name)] = q
		}
		*v.p = append(*v.p, r)
	}
	return nil
}
func (v *reservedMemoryVar) String() string { return fmt.Sprint(*v.p) }
func (*reservedMemoryVar) Type() string     { return "reserved-memory" }

// versionValue is verflag's: --version, --version=true|false|raw.
type versionValue string

func (v *versionValue) Set(s string) error {
	if s == "raw" {
		*v = "raw"
		return nil
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		return fmt.Errorf("invalid value %q: true, false or raw", s)
	}
	*v = versionValue(strconv.FormatBool(b))
	return nil
}
func (v *versionValue) String() string { return string(*v) }
func (*versionValue) Type() string     { return "version" }
func (*versionValue) IsBoolFlag() bool { return true }
