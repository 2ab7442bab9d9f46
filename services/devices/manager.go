package devices

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/nodelet/nodelet/internal/podutil"
	"github.com/nodelet/nodelet/schemas"
)

// endpointStopGracePeriod is the kubelet's: a resource whose last plugin
// went keeps its capacity (allocatable 0) this long, then reports 0
// (devicemanager types.go).
const endpointStopGracePeriod = 5 * time.Minute

// plugin is what the manager needs of a connected device plugin: the
// kubelet's endpoint (devicemanager/endpoint.go).
type plugin interface {
	socketPath() string
	options() *pluginapi.DevicePluginOptions
	getPreferredAllocation(ctx context.Context, available, mustInclude []string, size int) (*pluginapi.PreferredAllocationResponse, error)
	allocate(ctx context.Context, devs []string) (*pluginapi.AllocateResponse, error)
}

// manager is the kubelet's devicemanager.ManagerImpl: the registered
// resources and their devices, and every pod's allocation. It keeps no
// state the devices bucket does not hold (the bucket is its checkpoint).
type manager struct {
	log *slog.Logger
	now func() time.Time

	mu sync.Mutex
	// endpoints is the primary plugin of each resource, endpointStore
	// every plugin connected for it (resource → socket → plugin).
	endpoints     map[string]plugin
	endpointStore map[string]map[string]plugin
	stoppedAt     map[string]time.Time
	removed       sets.Set[string]
	healthy       map[string]sets.Set[string]
	unhealthy     map[string]sets.Set[string]
	// pods are the allocations, failed ones included (they hold nothing).
	pods map[string]*schemas.PodDevices
	// changed is signalled when the resources changed.
	changed chan struct{}
}

func newManager(log *slog.Logger) *manager {
	return &manager{
		log: log, now: time.Now,
		endpoints: map[string]plugin{}, endpointStore: map[string]map[string]plugin{},
		stoppedAt: map[string]time.Time{}, removed: sets.New[string](),
		healthy: map[string]sets.Set[string]{}, unhealthy: map[string]sets.Set[string]{},
		pods:    map[string]*schemas.PodDevices{},
		changed: make(chan struct{}, 1),
	}
}

func (m *manager) signal() {
	select {
	case m.changed <- struct{}{}:
	default:
	}
}

// restore loads what the bucket held: the kubelet's readCheckpoint. A
// resource registered before keeps an empty device set, so its capacity
// stays 0 until its plugin registers again, and it is still a device
// plugin resource (a pod asking for it is refused, not started without).
func (m *manager) restore(res *schemas.DeviceResources, pods []*schemas.PodDevices) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if res != nil {
		for _, r := range res.Resources {
			m.healthy[r.Name], m.unhealthy[r.Name] = sets.New[string](), sets.New[string]()
			if r.Removed {
				m.removed.Insert(r.Name)
			}
			at := m.now()
			if r.StoppedAt != nil {
				at = *r.StoppedAt
			}
			m.stoppedAt[r.Name] = at
		}
	}
	for _, p := range pods {
		m.pods[p.UID] = p
	}
}

// pluginConnected is the kubelet's PluginConnected.
func (m *manager) pluginConnected(resource string, p plugin) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.endpointStore[resource] == nil {
		m.endpointStore[resource] = map[string]plugin{}
	}
	if _, ok := m.endpointStore[resource][p.socketPath()]; ok {
		return fmt.Errorf("device plugin already connected: %s", p.socketPath())
	}
	m.endpointStore[resource][p.socketPath()] = p
	m.endpoints[resource] = p
	delete(m.stoppedAt, resource)
	m.removed.Delete(resource)
	if m.healthy[resource] == nil {
		m.healthy[resource], m.unhealthy[resource] = sets.New[string](), sets.New[string]()
	}
	m.log.Info("Device plugin connected", "resourceName", resource, "endpoint", p.socketPath())
	m.signal()
	return nil
}

// pluginDisconnected is the kubelet's PluginDisconnected: when the last
// plugin of a resource goes, every device of it is unhealthy (allocatable
// 0) and its grace period starts.
func (m *manager) pluginDisconnected(resource, socket string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	eps, ok := m.endpointStore[resource]
	if !ok {
		return
	}
	if _, ok := eps[socket]; !ok {
		return
	}
	delete(eps, socket)
	if len(eps) == 0 {
		delete(m.endpointStore, resource)
		delete(m.endpoints, resource)
		m.stoppedAt[resource] = m.now()
		// markResourceUnhealthy
		if m.unhealthy[resource] == nil {
			m.unhealthy[resource] = sets.New[string]()
		}
		m.unhealthy[resource] = m.unhealthy[resource].Union(m.healthy[resource])
		m.healthy[resource] = sets.New[string]()
		m.log.Info("Last device plugin for this resource disconnected", "resource", resource)
	} else {
		for _, p := range eps {
			m.endpoints[resource] = p
			break
		}
	}
	m.signal()
}

// listAndWatchReceived is the kubelet's genericDeviceUpdateCallback.
func (m *manager) listAndWatchReceived(resource string, devs []*pluginapi.Device) {
	m.mu.Lock()
	defer m.mu.Unlock()
	healthy, unhealthy := sets.New[string](), sets.New[string]()
	for _, d := range devs {
		if d.Health == pluginapi.Healthy {
			healthy.Insert(d.ID)
		} else {
			unhealthy.Insert(d.ID)
		}
	}
	m.healthy[resource], m.unhealthy[resource] = healthy, unhealthy
	m.log.Info("Processed device updates for resource", "resourceName", resource, "totalCount", len(devs), "healthyCount", healthy.Len())
	m.signal()
}

// resources is what the bucket's "resources" key says: the state behind
// the kubelet's GetCapacity. A resource whose last plugin went more than
// endpointStopGracePeriod ago is Removed (capacity 0), as GetCapacity's
// deletedResources.
func (m *manager) resources() *schemas.DeviceResources {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := &schemas.DeviceResources{Resources: []schemas.DeviceResource{}}
	names := sets.KeySet(m.healthy).Union(sets.KeySet(m.unhealthy))
	for _, name := range sets.List(names) {
		r := schemas.DeviceResource{Name: name, Healthy: sets.List(m.healthy[name]), Unhealthy: sets.List(m.unhealthy[name])}
		if p, ok := m.endpoints[name]; ok {
			r.Endpoint = p.socketPath()
			if o := p.options(); o != nil {
				r.PreStartRequired, r.GetPreferredAllocationAvailable = o.PreStartRequired, o.GetPreferredAllocationAvailable
			}
		}
		if at, ok := m.stoppedAt[name]; ok {
			t := at.UTC()
			r.StoppedAt = &t
			if m.now().Sub(at) > endpointStopGracePeriod {
				m.removed.Insert(name)
			}
		}
		r.Removed = m.removed.Has(name)
		out.Resources = append(out.Resources, r)
	}
	return out
}

// nextGraceEnd is when the next stopped resource's grace period ends, or
// zero.
func (m *manager) nextGraceEnd() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	var next time.Time
	for name, at := range m.stoppedAt {
		end := at.Add(endpointStopGracePeriod)
		if !m.removed.Has(name) && (next.IsZero() || end.Before(next)) {
			next = end
		}
	}
	return next
}

// isDevicePluginResource is the kubelet's: registered now, or registered
// before and still allocated.
func (m *manager) isDevicePluginResource(resource string) bool {
	if _, ok := m.healthy[resource]; ok {
		return true
	}
	return m.allocated()[resource].Len() > 0
}

// allocated is every device held by a pod: the kubelet's allocatedDevices
// (podDevices.devices()). Callers hold mu.
func (m *manager) allocated() map[string]sets.Set[string] {
	out := map[string]sets.Set[string]{}
	for _, p := range m.pods {
		if p.Error != "" {
			continue
		}
		for _, c := range p.Containers {
			for _, r := range c.Resources {
				if out[r.Resource] == nil {
					out[r.Resource] = sets.New[string]()
				}
				out[r.Resource].Insert(r.DeviceIDs...)
			}
		}
	}
	return out
}

// allocation is a pod's record, nil when none.
func (m *manager) allocation(uid string) *schemas.PodDevices {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.pods[uid]
}

// allocations are the pods' records, by UID.
func (m *manager) allocations() []*schemas.PodDevices {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*schemas.PodDevices, 0, len(m.pods))
	for _, p := range m.pods {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].UID < out[j].UID })
	return out
}

// free forgets a pod's allocation: the kubelet's UpdateAllocatedDevices
// for a pod no longer active.
func (m *manager) free(uid string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.pods[uid]
	delete(m.pods, uid)
	return ok
}

// wantsDevices says whether a pod must have a record before admission
// decides it: one of its containers asks for an extended resource.
func wantsDevices(pod *corev1.Pod) bool {
	for _, c := range podContainers(pod) {
		for name, q := range c.Resources.Limits {
			if podutil.IsExtendedResourceName(name) && !q.IsZero() {
				return true
			}
		}
	}
	return false
}

// podContainers are the init containers, then the app containers: the
// order the kubelet's admit handler allocates in.
func podContainers(pod *corev1.Pod) []corev1.Container {
	return append(slices.Clone(pod.Spec.InitContainers), pod.Spec.Containers...)
}

// allocatePod is the kubelet's admit-time Allocate over every container of
// pod (allocateContainerResources, with devicesToReuse: the devices of an
// init container that is not restartable go to the containers after it).
// It returns the pod's record; a failure is recorded with its error and
// holds no device.
func (m *manager) allocatePod(ctx context.Context, pod *corev1.Pod) *schemas.PodDevices {
	rec := &schemas.PodDevices{UID: string(pod.UID), Namespace: pod.Namespace, Name: pod.Name, AllocatedAt: m.now().UTC()}
	reuse := map[string]sets.Set[string]{}
	for _, c := range podContainers(pod) {
		cd, err := m.allocateContainer(ctx, pod, rec, &c, reuse)
		if err != nil {
			rec.Error, rec.Containers = err.Error(), nil
			m.log.Info("Failed to allocate devices", "pod", pod.Namespace+"/"+pod.Name, "podUID", pod.UID, "containerName", c.Name, "err", err)
			break
		}
		if len(cd.Resources) > 0 {
			rec.Containers = append(rec.Containers, cd)
		}
		init := slices.ContainsFunc(pod.Spec.InitContainers, func(i corev1.Container) bool { return i.Name == c.Name })
		restartable := c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
		for _, r := range cd.Resources {
			if reuse[r.Resource] == nil {
				reuse[r.Resource] = sets.New[string]()
			}
			if init && !restartable {
				reuse[r.Resource].Insert(r.DeviceIDs...)
			} else {
				reuse[r.Resource].Delete(r.DeviceIDs...)
			}
		}
	}
	m.mu.Lock()
	m.pods[rec.UID] = rec
	m.mu.Unlock()
	return rec
}

// allocateContainer is the kubelet's allocateContainerResources for one
// container: each device plugin resource in its limits (extended
// resources cannot be overcommitted, so requests equal limits).
func (m *manager) allocateContainer(ctx context.Context, pod *corev1.Pod, rec *schemas.PodDevices, c *corev1.Container, reuse map[string]sets.Set[string]) (schemas.ContainerDevices, error) {
	cd := schemas.ContainerDevices{Name: c.Name}
	names := make([]string, 0, len(c.Resources.Limits))
	for k := range c.Resources.Limits {
		names = append(names, string(k))
	}
	sort.Strings(names)
	for _, resource := range names {
		q := c.Resources.Limits[corev1.ResourceName(resource)]
		needed := int(q.Value())
		m.mu.Lock()
		isDP := m.isDevicePluginResource(resource)
		m.mu.Unlock()
		// A resource the scheduler's DRA claim serves is not a device
		// plugin's, whatever its name (allocateContainerResources).
		if !isDP || needed == 0 || podutil.IsDRAExtendedResource(pod, c.Name, resource) {
			continue
		}
		devs, err := m.devicesToAllocate(ctx, resource, needed, held(rec, resource), reuse[resource])
		if err != nil {
			return cd, err
		}
		m.mu.Lock()
		p, ok := m.endpoints[resource]
		m.mu.Unlock()
		if !ok {
			return cd, fmt.Errorf("unknown Device Plugin %s", resource)
		}
		ids := sets.List(devs)
		m.log.Info("Making allocation request for device plugin", "devices", ids, "resourceName", resource, "pod", pod.Namespace+"/"+pod.Name, "containerName", c.Name)
		resp, err := p.allocate(ctx, ids)
		if err != nil {
			return cd, err
		}
		if len(resp.ContainerResponses) == 0 {
			return cd, fmt.Errorf("no containers return in allocation response %v", resp)
		}
		cd.Resources = append(cd.Resources, fromResponse(resource, ids, resp.ContainerResponses[0]))
	}
	return cd, nil
}

// devicesToAllocate is the kubelet's: the devices to ask the plugin for,
// reusable ones first, then its preferred ones among the free healthy
// devices, then any. The errors are the kubelet's words.
// held are the devices the pod being allocated took so far; reusable
// are those of them its init containers are done with.
func (m *manager) devicesToAllocate(ctx context.Context, resource string, needed int, held, reusable sets.Set[string]) (sets.Set[string], error) {
	m.mu.Lock()
	healthy, registered := m.healthy[resource]
	if !registered {
		m.mu.Unlock()
		return nil, fmt.Errorf("cannot allocate unregistered device %s", resource)
	}
	if healthy.Len() == 0 {
		m.mu.Unlock()
		return nil, fmt.Errorf("no healthy devices present; cannot allocate unhealthy devices %s", resource)
	}
	allocated := sets.New[string]()
	take := func(from sets.Set[string]) bool {
		for _, d := range sets.List(from.Difference(allocated)) {
			allocated.Insert(d)
			if allocated.Len() == needed {
				return true
			}
		}
		return false
	}
	if take(reusable.Intersection(healthy)) {
		m.mu.Unlock()
		return allocated, nil
	}
	inUse := held.Union(m.allocated()[resource])
	available := healthy.Difference(inUse).Difference(allocated)
	if available.Len() < needed-allocated.Len() {
		m.mu.Unlock()
		return nil, fmt.Errorf("requested number of devices unavailable for %s. Requested: %d, Available: %d", resource, needed-allocated.Len(), available.Len())
	}
	p, ok := m.endpoints[resource]
	m.mu.Unlock()
	if ok && p.options() != nil && p.options().GetPreferredAllocationAvailable {
		resp, err := p.getPreferredAllocation(ctx, sets.List(available.Union(allocated)), sets.List(allocated), needed)
		if err != nil {
			return nil, fmt.Errorf("device plugin GetPreferredAllocation rpc failed with err: %v", err)
		}
		if resp != nil && len(resp.ContainerResponses) > 0 {
			if take(sets.New(resp.ContainerResponses[0].DeviceIDs...).Intersection(available)) {
				return allocated, nil
			}
		}
	}
	if take(available) {
		return allocated, nil
	}
	return nil, fmt.Errorf("unexpectedly allocated less resources than required. Requested: %d, Got: %d", needed, allocated.Len())
}

// held are the devices of resource rec's containers hold.
func held(rec *schemas.PodDevices, resource string) sets.Set[string] {
	out := sets.New[string]()
	for _, c := range rec.Containers {
		for _, r := range c.Resources {
			if r.Resource == resource {
				out.Insert(r.DeviceIDs...)
			}
		}
	}
	return out
}

// fromResponse keeps a ContainerAllocateResponse as the bucket holds it.
func fromResponse(resource string, ids []string, r *pluginapi.ContainerAllocateResponse) schemas.ResourceAllocation {
	a := schemas.ResourceAllocation{Resource: resource, DeviceIDs: ids, Envs: r.Envs, Annotations: r.Annotations}
	for _, mt := range r.Mounts {
		a.Mounts = append(a.Mounts, schemas.DeviceMount{ContainerPath: mt.ContainerPath, HostPath: mt.HostPath, ReadOnly: mt.ReadOnly})
	}
	for _, d := range r.Devices {
		a.Devices = append(a.Devices, schemas.DeviceSpec{ContainerPath: d.ContainerPath, HostPath: d.HostPath, Permissions: d.Permissions})
	}
	for _, c := range r.CdiDevices {
		a.CDIDevices = append(a.CDIDevices, c.Name)
	}
	return a
}
