package runtime

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/schemas"
)

// devicePlugins is what the runtime knows of nodelet-devices: the device
// plugin resources and every pod's allocation (the devices bucket), and
// how to call a plugin's PreStartContainer.
type devicePlugins struct {
	mu        sync.Mutex
	resources *schemas.DeviceResources
	pods      map[string]*schemas.PodDevices
	// preStart calls PreStartContainer on the plugin at endpoint; tests
	// replace it.
	preStart func(ctx context.Context, endpoint string, devs []string) error
}

func newDevicePlugins() *devicePlugins {
	return &devicePlugins{pods: map[string]*schemas.PodDevices{}, preStart: preStartContainer}
}

func (d *devicePlugins) onResources(u bus.Update[schemas.DeviceResources]) {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch u.Kind {
	case bus.Put:
		d.resources = u.Value
	case bus.Deleted, bus.Reset:
		d.resources = nil
	}
}

// onPod keeps a pod's allocation and returns the pod's UID, "" for none.
func (d *devicePlugins) onPod(u bus.Update[schemas.PodDevices]) string {
	uid := strings.TrimPrefix(u.Key, "pods.")
	d.mu.Lock()
	defer d.mu.Unlock()
	switch u.Kind {
	case bus.Put:
		d.pods[uid] = u.Value
	case bus.Deleted:
		delete(d.pods, uid)
	case bus.Reset:
		clear(d.pods)
		return ""
	default:
		return ""
	}
	return uid
}

// resource is the named device plugin resource, or nil.
func (d *devicePlugins) resource(name string) *schemas.DeviceResource {
	if d.resources == nil {
		return nil
	}
	for i := range d.resources.Resources {
		if d.resources.Resources[i].Name == name {
			return &d.resources.Resources[i]
		}
	}
	return nil
}

// deviceRunOptions is the kubelet's DeviceRunContainerOptions in CRI terms.
type deviceRunOptions struct {
	Envs        []*runtimeapi.KeyValue
	Mounts      []*runtimeapi.Mount
	Devices     []*runtimeapi.Device
	Annotations map[string]string
	CDIDevices  []*runtimeapi.CDIDevice
}

// runOptions is the kubelet's GetDeviceRunContainerOptions: for each
// device plugin resource in c's limits, PreStartContainer when the plugin
// asked for it (callPreStartContainerIfNeeded), then what the plugin
// answered at allocation, merged with the first answer winning
// (podDevices.deviceRunContainerOptions). A container whose devices are
// not allocated yet waits: nodelet-devices allocates before admission, so
// this is a restart race, and the pod's worker is woken when they come.
func (d *devicePlugins) runOptions(ctx context.Context, pod *corev1.Pod, c *corev1.Container) (*deviceRunOptions, error) {
	var allocs []schemas.ResourceAllocation
	names := make([]string, 0, len(c.Resources.Limits))
	for k, v := range c.Resources.Limits {
		if !v.IsZero() {
			names = append(names, string(k))
		}
	}
	slices.Sort(names)
	for _, name := range names {
		d.mu.Lock()
		r := d.resource(name)
		var alloc *schemas.ResourceAllocation
		rec := d.pods[string(pod.UID)]
		if rec != nil && rec.Error == "" {
			if cd := rec.Container(c.Name); cd != nil {
				for i := range cd.Resources {
					if cd.Resources[i].Resource == name {
						alloc = &cd.Resources[i]
					}
				}
			}
		}
		var endpoint string
		var preStart bool
		if r != nil {
			endpoint, preStart = r.Endpoint, r.PreStartRequired
		}
		d.mu.Unlock()
		switch {
		case r == nil && alloc == nil:
			continue // not a device plugin resource
		case rec != nil && rec.Error != "":
			return nil, fmt.Errorf("allocate failed due to %s", rec.Error)
		case alloc == nil:
			return nil, fmt.Errorf("no devices allocated yet for pod %s, container %s, resource %s (nodelet-devices)", pod.UID, c.Name, name)
		}
		if preStart {
			if endpoint == "" {
				return nil, fmt.Errorf("endpoint not found in cache for a registered resource: %s", name)
			}
			if err := d.preStart(ctx, endpoint, alloc.DeviceIDs); err != nil {
				return nil, fmt.Errorf("device plugin PreStartContainer rpc failed with err: %v", err)
			}
		}
		allocs = append(allocs, *alloc)
	}
	if len(allocs) == 0 {
		return nil, nil
	}
	return mergeDeviceOptions(allocs), nil
}

// mergeDeviceOptions is the kubelet's deviceRunContainerOptions: envs,
// device nodes, mounts (by container path), annotations and CDI devices of
// every resource, a later duplicate skipped.
func mergeDeviceOptions(allocs []schemas.ResourceAllocation) *deviceRunOptions {
	o := &deviceRunOptions{Annotations: map[string]string{}}
	envs, devs, mounts, cdi := map[string]bool{}, map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, a := range allocs {
		keys := make([]string, 0, len(a.Envs))
		for k := range a.Envs {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			if !envs[k] {
				envs[k] = true
				o.Envs = append(o.Envs, &runtimeapi.KeyValue{Key: k, Value: []byte(a.Envs[k])})
			}
		}
		for _, dv := range a.Devices {
			if !devs[dv.ContainerPath] {
				devs[dv.ContainerPath] = true
				o.Devices = append(o.Devices, &runtimeapi.Device{ContainerPath: dv.ContainerPath, HostPath: dv.HostPath, Permissions: dv.Permissions})
			}
		}
		for _, mt := range a.Mounts {
			if !mounts[mt.ContainerPath] {
				mounts[mt.ContainerPath] = true
				o.Mounts = append(o.Mounts, &runtimeapi.Mount{ContainerPath: mt.ContainerPath, HostPath: mt.HostPath, Readonly: mt.ReadOnly})
			}
		}
		for k, v := range a.Annotations {
			if _, ok := o.Annotations[k]; !ok {
				o.Annotations[k] = v
			}
		}
		for _, n := range a.CDIDevices {
			if !cdi[n] {
				cdi[n] = true
				o.CDIDevices = append(o.CDIDevices, &runtimeapi.CDIDevice{Name: n})
			}
		}
	}
	return o
}

// apply puts the options into the container's CRI config: the envs before
// the container's own (the kubelet's GenerateRunContainerOptions), the
// rest beside what the pod asks for.
func (o *deviceRunOptions) apply(cfg *runtimeapi.ContainerConfig) {
	if o == nil {
		return
	}
	cfg.Envs = append(slices.Clone(o.Envs), cfg.Envs...)
	cfg.Mounts = append(cfg.Mounts, o.Mounts...)
	cfg.Devices = append(cfg.Devices, o.Devices...)
	cfg.CDIDevices = append(cfg.CDIDevices, o.CDIDevices...)
	if len(o.Annotations) > 0 && cfg.Annotations == nil {
		cfg.Annotations = map[string]string{}
	}
	for k, v := range o.Annotations {
		if _, ok := cfg.Annotations[k]; !ok {
			cfg.Annotations[k] = v
		}
	}
}

// preStartContainer is the kubelet's endpoint.preStartContainer, with its
// timeout (KubeletPreStartContainerRPCTimeoutInSecs).
func preStartContainer(ctx context.Context, endpoint string, devs []string) error {
	conn, err := grpc.NewClient("unix://"+endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithAuthority("localhost"))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, pluginapi.KubeletPreStartContainerRPCTimeoutInSecs*time.Second)
	defer cancel()
	_, err = pluginapi.NewDevicePluginClient(conn).PreStartContainer(ctx, &pluginapi.PreStartContainerRequest{DevicesIds: devs})
	return err
}
