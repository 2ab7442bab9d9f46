package runtime

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func TestDiskVolumes(t *testing.T) {
	state, host := t.TempDir(), t.TempDir()
	file := filepath.Join(host, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	hp := func(name, path string, typ corev1.HostPathType) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path, Type: &typ}}}
	}
	for _, tc := range []struct {
		name    string
		vol     corev1.Volume
		errPart string
	}{
		{"directory or create", hp("v", filepath.Join(host, "new", "dir"), corev1.HostPathDirectoryOrCreate), ""},
		{"file or create", hp("v", filepath.Join(host, "made", "f"), corev1.HostPathFileOrCreate), ""},
		{"directory exists", hp("v", host, corev1.HostPathDirectory), ""},
		{"file is not a directory", hp("v", file, corev1.HostPathDirectory), "is not a Directory"},
		{"missing file", hp("v", filepath.Join(host, "nope"), corev1.HostPathFile), "no such file"},
		{"unset type takes anything", hp("v", filepath.Join(host, "nope"), corev1.HostPathUnset), ""},
		{"emptyDir", corev1.Volume{Name: "v", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}, ""},
		{"unsupported", corev1.Volume{Name: "v", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{}}}, `volume "v": this volume type is not supported yet`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := newPod("p", busybox("a", ""))
			pod.Spec.Volumes = []corev1.Volume{tc.vol}
			d := NewDiskVolumes(state)
			paths, err := d.Setup(context.Background(), pod)
			if tc.errPart != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errPart) {
					t.Fatalf("err = %v, want %q", err, tc.errPart)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			p := paths["v"]
			if tc.vol.EmptyDir != nil {
				if p != filepath.Join(state, "pods", string(pod.UID), "volumes", "kubernetes.io~empty-dir", "v") {
					t.Fatalf("emptyDir path %s", p)
				}
				if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o777 {
					t.Fatalf("emptyDir: %v %v", fi, err)
				}
				if err := d.Teardown(context.Background(), string(pod.UID)); err != nil {
					t.Fatal(err)
				}
				if _, err := os.Stat(filepath.Join(state, "pods", string(pod.UID))); !os.IsNotExist(err) {
					t.Fatal("teardown left the pod dir")
				}
				return
			}
			if p != tc.vol.HostPath.Path {
				t.Fatalf("path %s", p)
			}
			if tc.vol.HostPath.Type != nil && *tc.vol.HostPath.Type != corev1.HostPathUnset {
				if _, err := os.Stat(p); err != nil {
					t.Fatalf("not created: %v", err)
				}
			}
		})
	}
}

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
