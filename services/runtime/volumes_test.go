package runtime

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/config"
)

func TestResolvePort(t *testing.T) {
	c := &corev1.Container{Name: "web", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}}
	for _, tc := range []struct {
		port intstr.IntOrString
		want int
		err  bool
	}{
		{intstr.FromInt32(80), 80, false},
		{intstr.FromString("http"), 8080, false},
		{intstr.FromString("9090"), 9090, false},
		{intstr.FromString("grpc"), 0, true},
		{intstr.FromInt32(0), 0, true},
	} {
		got, err := resolvePort(tc.port, c)
		if got != tc.want || (err != nil) != tc.err {
			t.Errorf("%v: %d %v", tc.port.String(), got, err)
		}
	}
}

func TestMountPropagation(t *testing.T) {
	mode := func(m corev1.MountPropagationMode) *corev1.MountPropagationMode { return &m }
	for _, tc := range []struct {
		in   *corev1.MountPropagationMode
		want runtimeapi.MountPropagation
		err  bool
	}{
		{nil, runtimeapi.MountPropagation_PROPAGATION_PRIVATE, false},
		{mode(corev1.MountPropagationNone), runtimeapi.MountPropagation_PROPAGATION_PRIVATE, false},
		{mode(corev1.MountPropagationHostToContainer), runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER, false},
		{mode(corev1.MountPropagationBidirectional), runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL, false},
		{mode("Sideways"), 0, true},
	} {
		got, err := mountPropagation(tc.in)
		if got != tc.want || (err != nil) != tc.err {
			t.Errorf("%v: %v %v", tc.in, got, err)
		}
	}
}

func TestExpandSubPathExpr(t *testing.T) {
	env := map[string]string{"POD": "web-0", "EMPTY": ""}
	for _, tc := range []struct {
		expr, want, errPart string
	}{
		{"logs/$(POD)", "logs/web-0", ""},
		{"$(POD)/$$(POD)", "web-0/$(POD)", ""},
		{"$(NOPE)/$(EMPTY)", "", "missing value for EMPTY, NOPE"},
	} {
		got, err := expandSubPathExpr(tc.expr, env)
		if got != tc.want || (tc.errPart == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.errPart) {
			t.Errorf("%q: %q %v", tc.expr, got, err)
		}
	}
}

// configMap, secret, downwardAPI and projected volumes are mounted
// read-only whatever the volumeMount says; others as it says.
func TestContainerMountsReadOnly(t *testing.T) {
	m := &Daemon{cfg: config.Defaults(), log: slog.New(slog.DiscardHandler)}
	pod := newPod("ro", busybox("c", ""))
	pod.Spec.Volumes = []corev1.Volume{
		{Name: "cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{}}},
		{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: "ro-scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
	}
	c := &pod.Spec.Containers[0]
	c.VolumeMounts = []corev1.VolumeMount{{Name: "cfg", MountPath: "/cfg"}, {Name: "scratch", MountPath: "/s"}, {Name: "ro-scratch", MountPath: "/r", ReadOnly: true}}
	mounts, err := m.containerMounts(context.Background(), pod, c, map[string]string{"cfg": "/h/cfg", "scratch": "/h/s", "ro-scratch": "/h/r"}, nil, nil, "", "")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, mt := range mounts {
		got[mt.ContainerPath] = mt.Readonly
	}
	if !got["/cfg"] || got["/s"] || !got["/r"] {
		t.Fatalf("read-only: %v", got)
	}
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "missing", MountPath: "/m"})
	if _, err := m.containerMounts(context.Background(), pod, c, map[string]string{"cfg": "/h/cfg", "scratch": "/h/s", "ro-scratch": "/h/r"}, nil, nil, "", ""); err == nil ||
		err.Error() != `cannot find volume "missing" to mount into container "c"` {
		t.Fatalf("missing volume: %v", err)
	}
}
