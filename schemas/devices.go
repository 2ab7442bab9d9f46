package schemas

import "time"

// DeviceResources is every device plugin resource nodelet-devices knows:
// the devices bucket, key "resources", written by nodelet-devices. It is
// the kubelet's devicemanager state that node status and admission read
// (healthyDevices, unhealthyDevices, the endpoints and their options).
type DeviceResources struct {
	Resources []DeviceResource `json:"resources"`
}

func (DeviceResources) SchemaName() string { return "nodelet.v1.DeviceResources" }

// DeviceResource is one extended resource served by a device plugin.
type DeviceResource struct {
	// Name is the extended resource, e.g. example.com/gpu.
	Name string `json:"name"`
	// Endpoint is the plugin's socket; "" while no plugin is connected
	// (after a restart, until it registers again, or once it went).
	Endpoint string `json:"endpoint,omitempty"`
	// PreStartRequired and GetPreferredAllocationAvailable are the
	// plugin's DevicePluginOptions.
	PreStartRequired                bool `json:"preStartRequired,omitempty"`
	GetPreferredAllocationAvailable bool `json:"getPreferredAllocationAvailable,omitempty"`
	// Healthy and Unhealthy are the device IDs of its last ListAndWatch
	// answer; every device is unhealthy once its plugin is gone.
	Healthy   []string `json:"healthy,omitempty"`
	Unhealthy []string `json:"unhealthy,omitempty"`
	// StoppedAt is when its last plugin went; Removed is set once the
	// kubelet's grace (5 minutes) has passed since: the node then reports
	// a capacity of 0 (the kubelet's GetCapacity deletedResources).
	StoppedAt *time.Time `json:"stoppedAt,omitempty"`
	Removed   bool       `json:"removed,omitempty"`
}

// PodDevices is what nodelet-devices allocated to one pod: the devices
// bucket, key "pods.<pod UID>", written by nodelet-devices once per pod
// before nodelet-admission decides it (the kubelet allocates in an admit
// handler), and deleted when the pod is gone or refused.
type PodDevices struct {
	UID       string `json:"uid"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Error is why allocation failed, in the kubelet's words; admission
	// then refuses the pod with UnexpectedAdmissionError ("Allocate failed
	// due to <Error>, which is unexpected").
	Error       string             `json:"error,omitempty"`
	Containers  []ContainerDevices `json:"containers,omitempty"`
	AllocatedAt time.Time          `json:"allocatedAt"`
}

func (PodDevices) SchemaName() string { return "nodelet.v1.PodDevices" }

// Container is the named container's allocation, or nil.
func (p *PodDevices) Container(name string) *ContainerDevices {
	for i := range p.Containers {
		if p.Containers[i].Name == name {
			return &p.Containers[i]
		}
	}
	return nil
}

// ContainerDevices is one container's devices, resource by resource.
type ContainerDevices struct {
	Name      string               `json:"name"`
	Resources []ResourceAllocation `json:"resources"`
}

// ResourceAllocation is the devices of one resource given to a container
// and the plugin's ContainerAllocateResponse for them: what goes into the
// container's CRI config (the kubelet's DeviceRunContainerOptions).
type ResourceAllocation struct {
	Resource    string            `json:"resource"`
	DeviceIDs   []string          `json:"deviceIDs"`
	Envs        map[string]string `json:"envs,omitempty"`
	Mounts      []DeviceMount     `json:"mounts,omitempty"`
	Devices     []DeviceSpec      `json:"devices,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
	CDIDevices  []string          `json:"cdiDevices,omitempty"`
}

// DeviceMount is a plugin's Mount.
type DeviceMount struct {
	ContainerPath string `json:"containerPath"`
	HostPath      string `json:"hostPath"`
	ReadOnly      bool   `json:"readOnly,omitempty"`
}

// DeviceSpec is a plugin's DeviceSpec: a host device node in the container.
type DeviceSpec struct {
	ContainerPath string `json:"containerPath"`
	HostPath      string `json:"hostPath"`
	Permissions   string `json:"permissions,omitempty"`
}

// PodClaims is the Dynamic Resource Allocation state of one pod with
// spec.resourceClaims: the devices bucket, key "claims.<pod UID>", written
// by nodelet-devices after the pod is admitted and deleted once the pod is
// gone and its claims are unprepared. It is the kubelet's DRA checkpoint
// (pkg/kubelet/cm/dra/state, ClaimInfoState) seen from the pod: a claim
// shared by pods appears in each pod's record, prepared once.
type PodClaims struct {
	UID       string `json:"uid"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Prepared is set once every claim of the pod is prepared; only then
	// does nodelet-runtime create the pod's sandbox (the kubelet prepares
	// right before createPodSandbox).
	Prepared bool `json:"prepared,omitempty"`
	// Error is why the claims are not prepared (yet), in the kubelet's
	// words: nodelet-runtime emits it as the FailedPrepareDynamicResources
	// event, "Failed to prepare dynamic resources: <Error>".
	Error  string          `json:"error,omitempty"`
	Claims []PreparedClaim `json:"claims,omitempty"`
	// UpdatedAt is when the record last changed.
	UpdatedAt time.Time `json:"updatedAt"`
}

func (PodClaims) SchemaName() string { return "nodelet.v1.PodClaims" }

// ClaimNamed is the ResourceClaim called name (that of the scheduler's
// claim for extended resources, which has no pod claim name), or nil.
func (p *PodClaims) ClaimNamed(name string) *PreparedClaim {
	for i := range p.Claims {
		if p.Claims[i].Name == name {
			return &p.Claims[i]
		}
	}
	return nil
}

// Claim is the claim the pod names podClaim (spec.resourceClaims[].name),
// or nil.
func (p *PodClaims) Claim(podClaim string) *PreparedClaim {
	for i := range p.Claims {
		if p.Claims[i].PodClaimName == podClaim {
			return &p.Claims[i]
		}
	}
	return nil
}

// PreparedClaim is one ResourceClaim of the pod (the kubelet's ClaimInfo).
type PreparedClaim struct {
	// PodClaimName is the pod's name for it (spec.resourceClaims[].name,
	// what containers' resources.claims name).
	PodClaimName string `json:"podClaimName"`
	// Name and UID are the ResourceClaim's (in the pod's namespace).
	Name string `json:"name"`
	UID  string `json:"uid"`
	// Drivers are the drivers the allocation names, sorted: each is told
	// NodePrepareResources and, when the last pod using the claim is gone,
	// NodeUnprepareResources.
	Drivers []string `json:"drivers"`
	// Prepared is set once every driver prepared the claim.
	Prepared bool `json:"prepared,omitempty"`
	// Devices are what the drivers answered (the kubelet's DriverState).
	Devices []PreparedDevice `json:"devices,omitempty"`
}

// CDIDevices is the kubelet's cdiDevicesAsList: the CDI device IDs of the
// devices for request, every device's when request is "" or a device
// names no request.
func (c *PreparedClaim) CDIDevices(request string) []string {
	var out []string
	for _, d := range c.Devices {
		match := request == "" || len(d.Requests) == 0
		for _, r := range d.Requests {
			match = match || r == request
		}
		if match {
			out = append(out, d.CDIDeviceIDs...)
		}
	}
	return out
}

// PreparedDevice is one device a driver prepared (drapb.Device).
type PreparedDevice struct {
	Driver       string   `json:"driver"`
	Pool         string   `json:"pool"`
	Device       string   `json:"device"`
	ShareID      string   `json:"shareID,omitempty"`
	Requests     []string `json:"requests,omitempty"`
	CDIDeviceIDs []string `json:"cdiDeviceIDs,omitempty"`
}

// DRAHealth is the health of the DRA drivers' devices as their
// DRAResourceHealth services (NodeWatchResources) report it: the devices
// bucket, key "drahealth", written by nodelet-devices, read by
// nodelet-status for the containers' allocatedResourcesStatus (the
// kubelet's healthInfoCache, feature ResourceHealthStatus).
type DRAHealth struct {
	// Devices are sorted by driver, pool and device. A device a driver
	// never reported, or whose driver's stream ended, is absent: its
	// health is Unknown.
	Devices []DRADeviceHealth `json:"devices"`
}

func (DRAHealth) SchemaName() string { return "nodelet.v1.DRAHealth" }

// DRADeviceHealth is one device's health.
type DRADeviceHealth struct {
	Driver string `json:"driver"`
	Pool   string `json:"pool"`
	Device string `json:"device"`
	// Health is Healthy, Unhealthy or Unknown (corev1.ResourceHealthStatus).
	// It is Unknown once the driver has not reported the device for its
	// timeout (the kubelet's getHealthInfo), nodelet-devices rewriting
	// the record then.
	Health string `json:"health"`
	// Message is the driver's, cut to the API's 1024 bytes.
	Message string `json:"message,omitempty"`
	// LastUpdated is when nodelet-devices last received the device's
	// report; Timeout how long the report holds (the driver's
	// health_check_timeout_seconds, else the kubelet's 30 seconds).
	LastUpdated time.Time     `json:"lastUpdated"`
	Timeout     time.Duration `json:"timeout"`
}

// Device is the health of a driver's device, nil when not reported.
func (h *DRAHealth) Device(driver, pool, device string) *DRADeviceHealth {
	if h == nil {
		return nil
	}
	for i := range h.Devices {
		if d := &h.Devices[i]; d.Driver == driver && d.Pool == pool && d.Device == device {
			return d
		}
	}
	return nil
}
