package volumes

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func i32(v int32) *int32 { return &v }

// flatten renders a payload as path -> "mode:data" for comparisons.
func flatten(p map[string]FileProjection) map[string]string {
	out := map[string]string{}
	for k, v := range p {
		out[k] = fmt.Sprintf("%o:%s", v.Mode, v.Data)
	}
	return out
}

func TestConfigMapAndSecretPayloads(t *testing.T) {
	cm := &corev1.ConfigMap{Data: map[string]string{"a": "1", "b": "2"}, BinaryData: map[string][]byte{"bin": {0xff}}}
	secret := &corev1.Secret{Data: map[string][]byte{"user": []byte("u"), "pass": []byte("p")}}
	for _, tc := range []struct {
		name     string
		secret   bool
		items    []corev1.KeyToPath
		mode     *int32
		optional bool
		want     map[string]string
		errPart  string
	}{
		{name: "all keys, default mode", want: map[string]string{"a": "644:1", "b": "644:2", "bin": "644:\xff"}},
		{name: "all keys, defaultMode", mode: i32(0o400), want: map[string]string{"a": "400:1", "b": "400:2", "bin": "400:\xff"}},
		{name: "items to paths with their modes", mode: i32(0o440),
			items: []corev1.KeyToPath{{Key: "a", Path: "conf/a.txt"}, {Key: "bin", Path: "b", Mode: i32(0o600)}},
			want:  map[string]string{"conf/a.txt": "440:1", "b": "600:\xff"}},
		{name: "missing key", items: []corev1.KeyToPath{{Key: "nope", Path: "x"}},
			errPart: "configmap references non-existent config key: nope"},
		{name: "missing key, optional", optional: true, items: []corev1.KeyToPath{{Key: "nope", Path: "x"}, {Key: "a", Path: "a"}},
			want: map[string]string{"a": "644:1"}},
		{name: "secret, all keys", secret: true, want: map[string]string{"user": "644:u", "pass": "644:p"}},
		{name: "secret items", secret: true, items: []corev1.KeyToPath{{Key: "pass", Path: "p/w", Mode: i32(0o400)}},
			want: map[string]string{"p/w": "400:p"}},
		{name: "secret missing key", secret: true, items: []corev1.KeyToPath{{Key: "token", Path: "t"}},
			errPart: "references non-existent secret key: token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got map[string]FileProjection
			var err error
			if tc.secret {
				got, err = SecretPayload(tc.items, secret, tc.mode, tc.optional)
			} else {
				got, err = ConfigMapPayload(tc.items, cm, tc.mode, tc.optional)
			}
			if tc.errPart != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errPart) {
					t.Fatalf("err = %v, want %q", err, tc.errPart)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if f := flatten(got); !reflect.DeepEqual(f, tc.want) {
				t.Fatalf("payload %v, want %v", f, tc.want)
			}
		})
	}
}

func TestDownwardAPIPayload(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "prod", UID: "u-1",
			Labels:      map[string]string{"app": "web", "tier": "front"},
			Annotations: map[string]string{"note": `say "hi"`}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
		}}}},
	}
	node := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("1Gi")}
	field := func(path, fp string) corev1.DownwardAPIVolumeFile {
		return corev1.DownwardAPIVolumeFile{Path: path, FieldRef: &corev1.ObjectFieldSelector{FieldPath: fp}}
	}
	res := func(path, r, div string) corev1.DownwardAPIVolumeFile {
		f := corev1.DownwardAPIVolumeFile{Path: path, ResourceFieldRef: &corev1.ResourceFieldSelector{ContainerName: "c", Resource: r}}
		if div != "" {
			f.ResourceFieldRef.Divisor = resource.MustParse(div)
		}
		return f
	}
	for _, tc := range []struct {
		item    corev1.DownwardAPIVolumeFile
		want    string
		errPart string
	}{
		{field("labels", "metadata.labels"), "app=\"web\"\ntier=\"front\"", ""},
		{field("annotations", "metadata.annotations"), `note="say \"hi\""`, ""},
		{field("app", "metadata.labels['app']"), "web", ""},
		{field("n", "metadata.name"), "web", ""},
		{field("ns", "metadata.namespace"), "prod", ""},
		{field("uid", "metadata.uid"), "u-1", ""},
		{field("x", "spec.nodeName"), "", "unsupported fieldPath: spec.nodeName"},
		{field("x", "metadata.name['a']"), "", "does not support subscript"},
		{res("cpu", "requests.cpu", "1m"), "250", ""},
		{res("cpulimit", "limits.cpu", ""), "2", ""}, // node's
		{res("mem", "limits.memory", "1Mi"), "64", ""},
		{res("x", "limits.gpu", ""), "", "unsupported container resource"},
	} {
		t.Run(tc.item.Path+"="+tc.want, func(t *testing.T) {
			tc.item.Mode = i32(0o600)
			got, err := DownwardAPIPayload([]corev1.DownwardAPIVolumeFile{tc.item}, pod, node, nil)
			if tc.errPart != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errPart) {
					t.Fatalf("err = %v, want %q", err, tc.errPart)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if f := got[tc.item.Path]; string(f.Data) != tc.want || f.Mode != 0o600 {
				t.Fatalf("%s = %q (mode %o), want %q", tc.item.Path, f.Data, f.Mode, tc.want)
			}
		})
	}
}

func TestFsUserAndTmpfsSize(t *testing.T) {
	u := func(v int64) *int64 { return &v }
	withUsers := func(pod *int64, cs ...*int64) *corev1.Pod {
		p := &corev1.Pod{}
		if pod != nil {
			p.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: pod}
		}
		for _, c := range cs {
			cc := corev1.Container{}
			if c != nil {
				cc.SecurityContext = &corev1.SecurityContext{RunAsUser: c}
			}
			p.Spec.Containers = append(p.Spec.Containers, cc)
		}
		return p
	}
	for _, tc := range []struct {
		pod  *corev1.Pod
		want *int64
	}{
		{withUsers(u(1000), nil, nil), u(1000)},
		{withUsers(nil, u(5), u(5)), u(5)},
		{withUsers(nil, u(5), u(6)), nil},
		{withUsers(nil, u(5), nil), nil},
		{withUsers(u(7), u(5), nil), nil},
	} {
		got := fsUserOf(tc.pod)
		if (got == nil) != (tc.want == nil) || got != nil && *got != *tc.want {
			t.Errorf("fsUserOf = %v, want %v", got, tc.want)
		}
	}

	m := New(Options{NodeAllocatable: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}})
	limited := func(limits ...string) *corev1.Pod {
		p := &corev1.Pod{}
		for _, l := range limits {
			c := corev1.Container{}
			if l != "" {
				c.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(l)}
			}
			p.Spec.Containers = append(p.Spec.Containers, c)
		}
		return p
	}
	q := func(s string) *resource.Quantity { v := resource.MustParse(s); return &v }
	for _, tc := range []struct {
		name      string
		pod       *corev1.Pod
		sizeLimit *resource.Quantity
		want      string
	}{
		{"node memory", limited(""), nil, "1Gi"},
		{"pod limit", limited("100Mi", "28Mi"), nil, "128Mi"},
		{"a container without limit", limited("100Mi", ""), nil, "1Gi"},
		{"sizeLimit below pod limit", limited("100Mi"), q("10Mi"), "10Mi"},
		{"sizeLimit above pod limit", limited("100Mi"), q("2Gi"), "100Mi"},
	} {
		if got := m.plugins.tmpfsSize(tc.pod, tc.sizeLimit); got != q(tc.want).Value() {
			t.Errorf("%s: size %d, want %s", tc.name, got, tc.want)
		}
	}
}
