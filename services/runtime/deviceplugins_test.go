package runtime

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/schemas"
)

const dpRes = "example.com/dev"

func withDevices(n string) func(*corev1.Container) {
	return func(c *corev1.Container) {
		c.Resources.Limits = corev1.ResourceList{dpRes: resource.MustParse(n)}
		c.Resources.Requests = corev1.ResourceList{dpRes: resource.MustParse(n)}
	}
}

// TestDeviceRunOptions: what nodelet-devices allocated reaches the CRI
// container config (the kubelet's GetDeviceRunContainerOptions and
// deviceRunContainerOptions), PreStartContainer is called when the plugin
// asks for it, and a container without its devices is not created.
func TestDeviceRunOptions(t *testing.T) {
	alloc := schemas.ResourceAllocation{Resource: dpRes, DeviceIDs: []string{"D1", "D2"},
		Envs:        map[string]string{"DEVS": "D1,D2"},
		Mounts:      []schemas.DeviceMount{{ContainerPath: "/info", HostPath: "/tmp/info", ReadOnly: true}},
		Devices:     []schemas.DeviceSpec{{ContainerPath: "/dev/d1", HostPath: "/dev/null", Permissions: "rw"}},
		Annotations: map[string]string{"dev.example.com/ids": "D1,D2"},
		CDIDevices:  []string{"example.com/dev=D1"}}
	for _, tc := range []struct {
		name      string
		res       *schemas.DeviceResource
		rec       *schemas.PodDevices
		limit     string
		preStart  error
		wantErr   string
		wantCalls int
		wantDevs  bool
	}{
		{name: "no device asked", res: &schemas.DeviceResource{Name: dpRes}},
		{name: "allocated", res: &schemas.DeviceResource{Name: dpRes, Endpoint: "/p.sock"}, limit: "2",
			rec: &schemas.PodDevices{Containers: []schemas.ContainerDevices{{Name: "app", Resources: []schemas.ResourceAllocation{alloc}}}}, wantDevs: true},
		{name: "PreStartContainer", res: &schemas.DeviceResource{Name: dpRes, Endpoint: "/p.sock", PreStartRequired: true}, limit: "2",
			rec: &schemas.PodDevices{Containers: []schemas.ContainerDevices{{Name: "app", Resources: []schemas.ResourceAllocation{alloc}}}}, wantDevs: true, wantCalls: 1},
		{name: "PreStartContainer fails", res: &schemas.DeviceResource{Name: dpRes, Endpoint: "/p.sock", PreStartRequired: true}, limit: "2",
			rec:      &schemas.PodDevices{Containers: []schemas.ContainerDevices{{Name: "app", Resources: []schemas.ResourceAllocation{alloc}}}},
			preStart: errors.New("boom"), wantCalls: 1, wantErr: "device plugin PreStartContainer rpc failed with err: boom"},
		{name: "plugin gone, PreStart required", res: &schemas.DeviceResource{Name: dpRes, PreStartRequired: true}, limit: "2",
			rec:     &schemas.PodDevices{Containers: []schemas.ContainerDevices{{Name: "app", Resources: []schemas.ResourceAllocation{alloc}}}},
			wantErr: "endpoint not found in cache for a registered resource: example.com/dev"},
		{name: "not allocated yet", res: &schemas.DeviceResource{Name: dpRes, Endpoint: "/p.sock"}, limit: "1",
			wantErr: "no devices allocated yet for pod"},
		{name: "allocation failed", res: &schemas.DeviceResource{Name: dpRes, Endpoint: "/p.sock"}, limit: "1",
			rec: &schemas.PodDevices{Error: "requested number of devices unavailable"}, wantErr: "allocate failed due to requested number of devices unavailable"},
		{name: "a cluster-level resource", limit: "1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := testManager(t)
			pod := newPod("web", busybox("app", ""))
			if tc.limit != "" {
				withDevices(tc.limit)(&pod.Spec.Containers[0])
			}
			d := m.store.devices
			var calls [][]string
			d.preStart = func(_ context.Context, ep string, devs []string) error {
				calls = append(calls, devs)
				return tc.preStart
			}
			if tc.res != nil {
				d.onResources(bus.Update[schemas.DeviceResources]{Kind: bus.Put, Value: &schemas.DeviceResources{Resources: []schemas.DeviceResource{*tc.res}}})
			}
			if tc.rec != nil {
				tc.rec.UID = string(pod.UID)
				d.onPod(bus.Update[schemas.PodDevices]{Kind: bus.Put, Key: "pods." + string(pod.UID), Value: tc.rec})
			}
			cfg, err := m.containerConfig(context.Background(), pod, &pod.Spec.Containers[0], containerInputs{})
			if len(calls) != tc.wantCalls {
				t.Errorf("PreStartContainer calls %v, want %d", calls, tc.wantCalls)
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			hasEnv := slices.ContainsFunc(cfg.Envs, func(kv *runtimeapi.KeyValue) bool { return kv.Key == "DEVS" && string(kv.Value) == "D1,D2" })
			hasMount := slices.ContainsFunc(cfg.Mounts, func(mt *runtimeapi.Mount) bool { return mt.ContainerPath == "/info" && mt.Readonly })
			hasDev := slices.ContainsFunc(cfg.Devices, func(dv *runtimeapi.Device) bool { return dv.ContainerPath == "/dev/d1" && dv.Permissions == "rw" })
			hasCDI := len(cfg.CDIDevices) == 1 && cfg.CDIDevices[0].Name == "example.com/dev=D1"
			hasAnn := cfg.Annotations["dev.example.com/ids"] == "D1,D2"
			if got := hasEnv && hasMount && hasDev && hasCDI && hasAnn; got != tc.wantDevs {
				t.Fatalf("devices in the config = env %v mount %v device %v cdi %v annotation %v, want %v", hasEnv, hasMount, hasDev, hasCDI, hasAnn, tc.wantDevs)
			}
			if tc.wantCalls > 0 && !slices.Equal(calls[0], []string{"D1", "D2"}) {
				t.Errorf("PreStartContainer devices %v", calls[0])
			}
		})
	}
}
