package podutil

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/schemas"
)

func TestStaticMirrorCriticalPods(t *testing.T) {
	prio := func(p int32) *int32 { return &p }
	pod := func(ann map[string]string, priority *int32) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", Annotations: ann},
			Spec: corev1.PodSpec{Priority: priority}}
	}
	for _, tc := range []struct {
		name                     string
		pod                      *corev1.Pod
		static, mirror, critical bool
	}{
		{"nil pod", nil, false, false, false},
		{"API pod", pod(nil, nil), false, false, false},
		{"config.source api", pod(map[string]string{AnnotationConfigSource: "api"}, nil), false, false, false},
		{"config.source file", pod(map[string]string{AnnotationConfigSource: "file"}, nil), true, false, true},
		{"config.source http", pod(map[string]string{AnnotationConfigSource: "http"}, nil), true, false, true},
		{"mirror pod", pod(map[string]string{AnnotationConfigMirror: "abc"}, nil), false, true, true},
		{"system-cluster-critical", pod(nil, prio(2000000000)), false, false, true},
		{"system-node-critical", pod(nil, prio(2000001000)), false, false, true},
		{"just below critical", pod(nil, prio(1999999999)), false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := IsStaticPod(tc.pod); got != tc.static {
				t.Errorf("IsStaticPod = %v, want %v", got, tc.static)
			}
			if got := IsMirrorPod(tc.pod); got != tc.mirror {
				t.Errorf("IsMirrorPod = %v, want %v", got, tc.mirror)
			}
			if got := IsCriticalPod(tc.pod); got != tc.critical {
				t.Errorf("IsCriticalPod = %v, want %v", got, tc.critical)
			}
		})
	}
}

func TestIsStaticDesired(t *testing.T) {
	withSource := func(src string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{AnnotationConfigSource: src}}}
	}
	for _, tc := range []struct {
		name string
		d    *schemas.PodDesired
		want bool
	}{
		{"nil", nil, false},
		{"no pod", &schemas.PodDesired{Source: schemas.SourceFile}, false},
		{"file source, no annotation", &schemas.PodDesired{Pod: &corev1.Pod{}, Source: schemas.SourceFile}, true},
		{"http source, no annotation", &schemas.PodDesired{Pod: &corev1.Pod{}, Source: schemas.SourceHTTP}, true},
		{"api source, no annotation", &schemas.PodDesired{Pod: &corev1.Pod{}, Source: schemas.SourceAPI}, false},
		{"annotation wins over source", &schemas.PodDesired{Pod: withSource("api"), Source: schemas.SourceFile}, false},
		{"annotation file", &schemas.PodDesired{Pod: withSource("file"), Source: schemas.SourceAPI}, true},
	} {
		if got := IsStaticDesired(tc.d); got != tc.want {
			t.Errorf("%s: IsStaticDesired = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestPodRef(t *testing.T) {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "etcd-n1"}}
	if got := PodRef(p); got != "kube-system/etcd-n1" {
		t.Errorf("PodRef = %q", got)
	}
	if got := Ref("default", "web"); got != "default/web" {
		t.Errorf("Ref = %q", got)
	}
}
