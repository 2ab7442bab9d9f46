package devices

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/nodelet/nodelet/bus/bustest"
	"github.com/nodelet/nodelet/schemas"
)

const res = "example.com/resource"

// pluginDir is a short temp dir: a unix socket path must stay under 108
// bytes.
func pluginDir(t *testing.T) string {
	d, err := os.MkdirTemp("", "dp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return filepath.Join(d, "device-plugins")
}

// registration runs the manager and its Registration service in dir.
func registration(t *testing.T, dir string) (*manager, *registrar) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	m := newManager(bustest.Logger())
	r := newRegistrar(ctx, dir, m, bustest.Logger())
	if err := r.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); r.stop() })
	return m, r
}

func devPod(uid string, containers ...corev1.Container) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p-" + uid, Namespace: "default", UID: types.UID(uid)},
		Spec: corev1.PodSpec{Containers: containers}}
}

func wants(name string, n int64) corev1.Container {
	q := *resource.NewQuantity(n, resource.DecimalSI)
	return corev1.Container{Name: name, Resources: corev1.ResourceRequirements{
		Limits: corev1.ResourceList{res: q}, Requests: corev1.ResourceList{res: q}}}
}

func idsOf(rec *schemas.PodDevices, container string) []string {
	c := rec.Container(container)
	if c == nil || len(c.Resources) == 0 {
		return nil
	}
	return c.Resources[0].DeviceIDs
}

func TestRegisterRefusals(t *testing.T) {
	dir := pluginDir(t)
	registration(t, dir)
	for _, tc := range []struct {
		name, resource, version, endpoint, want string
	}{
		{"old version", res, "v1alpha", "", `requested API version "v1alpha" is not supported by kubelet. Supported version is ["v1beta1"]`},
		{"native resource", "cpu", pluginapi.Version, "", `the ResourceName "cpu" is invalid`},
		{"kubernetes.io domain", "kubernetes.io/gpu", pluginapi.Version, "", `the ResourceName "kubernetes.io/gpu" is invalid`},
		{"endpoint outside the directory", res, pluginapi.Version, "../x.sock", `endpoint "../x.sock" must be a socket's file name in`},
		{"nobody serving", res, pluginapi.Version, "nobody.sock", "failed to get device plugin options"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newFakePlugin(t, dir, tc.resource)
			if tc.endpoint != "" {
				p.endpoint = tc.endpoint
			} else {
				p.serve()
			}
			err := p.register(tc.version)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Register = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestAllocate(t *testing.T) {
	for _, tc := range []struct {
		name      string
		healthy   []string
		unhealthy []string
		// held are taken by an earlier pod.
		held      int
		preferred []string
		pod       *corev1.Pod
		// want: container → devices; wantErr: the record's error.
		want    map[string][]string
		wantErr string
	}{
		{name: "two of two", healthy: []string{"Dev-1", "Dev-2"}, pod: devPod("a", wants("c", 2)),
			want: map[string][]string{"c": {"Dev-1", "Dev-2"}}},
		{name: "three of two", healthy: []string{"Dev-1", "Dev-2"}, pod: devPod("a", wants("c", 3)),
			wantErr: "requested number of devices unavailable for example.com/resource. Requested: 3, Available: 2"},
		{name: "taken by another pod", healthy: []string{"Dev-1", "Dev-2"}, held: 2, pod: devPod("b", wants("c", 1)),
			wantErr: "requested number of devices unavailable for example.com/resource. Requested: 1, Available: 0"},
		{name: "only unhealthy devices", unhealthy: []string{"Dev-1"}, pod: devPod("a", wants("c", 1)),
			wantErr: "no healthy devices present; cannot allocate unhealthy devices example.com/resource"},
		{name: "unhealthy left out", healthy: []string{"Dev-2"}, unhealthy: []string{"Dev-1"}, pod: devPod("a", wants("c", 1)),
			want: map[string][]string{"c": {"Dev-2"}}},
		{name: "the plugin's preference", healthy: []string{"Dev-1", "Dev-2", "Dev-3"}, preferred: []string{"Dev-3"},
			pod: devPod("a", wants("c", 1)), want: map[string][]string{"c": {"Dev-3"}}},
		{name: "two containers", healthy: []string{"Dev-1", "Dev-2", "Dev-3"}, pod: devPod("a", wants("c1", 1), wants("c2", 2)),
			want: map[string][]string{"c1": {"Dev-1"}, "c2": {"Dev-2", "Dev-3"}}},
		{name: "an init container's devices reused", healthy: []string{"Dev-1", "Dev-2"},
			pod: func() *corev1.Pod {
				p := devPod("a", wants("app", 1))
				p.Spec.InitContainers = []corev1.Container{wants("init", 2)}
				return p
			}(),
			want: map[string][]string{"init": {"Dev-1", "Dev-2"}, "app": {"Dev-1"}}},
		{name: "no device resource", healthy: []string{"Dev-1"}, pod: devPod("a", corev1.Container{Name: "c"}),
			want: map[string][]string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := pluginDir(t)
			m, _ := registration(t, dir)
			p := newFakePlugin(t, dir, res, tc.healthy...)
			for _, id := range tc.unhealthy {
				p.devs = append(p.devs, &pluginapi.Device{ID: id, Health: pluginapi.Unhealthy})
			}
			if tc.preferred != nil {
				p.preferredAvailable = true
				p.preferred = func([]string, int) []string { return tc.preferred }
			}
			p.start()
			waitDevices(t, m, len(tc.healthy)+len(tc.unhealthy))
			if tc.held > 0 {
				if rec := m.allocatePod(context.Background(), devPod("first", wants("c", int64(tc.held)))); rec.Error != "" {
					t.Fatal(rec.Error)
				}
			}
			rec := m.allocatePod(context.Background(), tc.pod)
			if rec.Error != tc.wantErr {
				t.Fatalf("error = %q, want %q", rec.Error, tc.wantErr)
			}
			if tc.wantErr != "" {
				if len(rec.Containers) != 0 {
					t.Errorf("a failed allocation holds %v", rec.Containers)
				}
				return
			}
			for c, want := range tc.want {
				if got := idsOf(rec, c); !slices.Equal(got, want) {
					t.Errorf("container %s got %v, want %v", c, got, want)
				}
			}
			if len(rec.Containers) != len(tc.want) {
				t.Errorf("containers = %+v, want %d", rec.Containers, len(tc.want))
			}
			for _, c := range rec.Containers {
				a := c.Resources[0]
				if a.Envs["FAKE_DEVICES"] == "" || len(a.Mounts) != len(a.DeviceIDs) || len(a.Devices) != len(a.DeviceIDs) ||
					len(a.CDIDevices) != len(a.DeviceIDs) || a.Annotations["fake.example.com/devices"] == "" {
					t.Errorf("container %s: the plugin's answer is not kept whole: %+v", c.Name, a)
				}
			}
		})
	}
}

// waitDevices waits until the plugin's ListAndWatch answer is in.
func waitDevices(t *testing.T, m *manager, n int) {
	t.Helper()
	for {
		r := m.resources()
		for _, x := range r.Resources {
			if len(x.Healthy)+len(x.Unhealthy) == n && x.Endpoint != "" {
				return
			}
		}
		select {
		case <-m.changed:
		case <-time.After(30 * time.Second):
			t.Fatalf("the plugin's devices never came: %+v", r)
		}
	}
}
