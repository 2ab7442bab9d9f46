package status

import (
	"fmt"
	goruntime "runtime"
	"sort"
	"strings"
	"time"

	cadvisorapi "github.com/google/cadvisor/lib/model"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/internal/hostinfo"
	"github.com/nodelet/nodelet/internal/nodestatus"
	"github.com/nodelet/nodelet/internal/version"
	"github.com/nodelet/nodelet/schemas"
)

// The kubelet's node event reasons.
const (
	EventStarting                = "Starting"
	EventNodeReady               = "NodeReady"
	EventNodeNotReady            = "NodeNotReady"
	EventNodeRebooted            = "Rebooted"
	maxNamesPerImageInNodeStatus = 5
	nodeStatusMaxImages          = 50
)

// NodeInputs is everything the Node object is computed from.
type NodeInputs struct {
	Name      string
	Hostname  string
	Addresses []string
	Config    *config.Config
	// Machine is cAdvisor's MachineInfo; MachineErr says why it is missing.
	Machine    *cadvisorapi.MachineInfo
	MachineErr error
	// RootFs is the filesystem of node.stateDir (ephemeral-storage).
	RootFs         *hostinfo.FsStats
	Runtime        *schemas.RuntimeState
	RuntimeVersion string // e.g. containerd://1.6.20; "" = unknown
	Pressure       *schemas.NodePressure
	// VolumesInUse is the runtime's record of mounted attachable volumes.
	VolumesInUse *schemas.VolumesInUse
	// Devices is nodelet-devices' device plugin resources.
	Devices       *schemas.DeviceResources
	Images        []corev1.ContainerImage
	KernelVersion string
	OSImage       string
	Now           time.Time
}

// annotationControllerManagedAttach is the kubelet's
// ControllerManagedAttachAnnotation: the attach-detach controller of
// kube-controller-manager attaches and detaches this node's volumes
// (creates their VolumeAttachments); the node only waits for them.
const annotationControllerManagedAttach = "volumes.kubernetes.io/controller-managed-attach-detach"

// InitialNode is the node as first registered: name, the kubelet's default
// labels plus node.labels, node.taints, and the controller-managed
// attach-detach annotation (the kubelet's enableControllerAttachDetach,
// always on: nodelet never attaches volumes itself).
func InitialNode(in NodeInputs) (*corev1.Node, error) {
	node := &corev1.Node{
		TypeMeta: metav1.TypeMeta{Kind: "Node", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        in.Name,
			Annotations: map[string]string{annotationControllerManagedAttach: "true"},
			Labels: map[string]string{
				corev1.LabelHostname:      in.Hostname,
				corev1.LabelOSStable:      goruntime.GOOS,
				corev1.LabelArchStable:    goruntime.GOARCH,
				"beta.kubernetes.io/os":   goruntime.GOOS,
				"beta.kubernetes.io/arch": goruntime.GOARCH,
			},
		},
	}
	for k, v := range in.Config.Node.Labels {
		node.Labels[k] = v
	}
	for _, t := range in.Config.Node.Taints {
		node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: t.Key, Value: t.Value, Effect: corev1.TaintEffect(t.Effect)})
	}
	return node, nil
}

// defaultLabels are the labels the node agent owns on an existing node.
var defaultLabels = []string{corev1.LabelHostname, corev1.LabelOSStable, corev1.LabelArchStable, "beta.kubernetes.io/os", "beta.kubernetes.io/arch"}

// reconcileExistingNode is the kubelet's updateDefaultLabels: an existing
// Node gets the default labels (and the attach-detach annotation) back. It reports whether node changed.
func reconcileExistingNode(initial, existing *corev1.Node) bool {
	changed := false
	// The kubelet's reconcileCMADAnnotationWithExistingNode.
	if existing.Annotations[annotationControllerManagedAttach] != "true" {
		if existing.Annotations == nil {
			existing.Annotations = map[string]string{}
		}
		existing.Annotations[annotationControllerManagedAttach] = "true"
		changed = true
	}
	if existing.Labels == nil {
		existing.Labels = map[string]string{}
	}
	for _, l := range defaultLabels {
		v, ok := initial.Labels[l]
		if ok && existing.Labels[l] != v {
			existing.Labels[l] = v
			changed = true
		}
	}
	return changed
}

// nodeEvent is an event the status computation asks to record on the node.
type nodeEvent struct{ Type, Reason, Message string }

// SetNodeStatus runs the kubelet's node status setters on node: addresses,
// capacity and allocatable, node info, images, and the conditions. It
// returns the events the kubelet would record for condition transitions,
// or an error when allocatable cannot be computed (a bad reservation).
func SetNodeStatus(node *corev1.Node, in NodeInputs) ([]nodeEvent, error) {
	var events []nodeEvent
	now := metav1.NewTime(in.Now)
	// The kubelet's setVolumesInUse (nodestatus.VolumesInUse): what the
	// runtime mounts, or is about to, stays attached.
	node.Status.VolumesInUse = nil
	if in.VolumesInUse != nil {
		for _, n := range in.VolumesInUse.Names {
			node.Status.VolumesInUse = append(node.Status.VolumesInUse, corev1.UniqueVolumeName(n))
		}
	}
	record := func(typ, reason string) {
		events = append(events, nodeEvent{typ, reason, nodestatus.StatusMessage(in.Name, reason)})
	}

	// Addresses.
	node.Status.Addresses = nil
	for _, a := range in.Addresses {
		node.Status.Addresses = append(node.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: a})
	}
	node.Status.Addresses = append(node.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeHostName, Address: in.Hostname})
	// The kubelet's nodestatus.DaemonEndpoints: where kube-apiserver dials
	// the kubelet API (nodelet-server, server.port).
	node.Status.DaemonEndpoints = corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: int32(in.Config.Server.Port)}}

	// Capacity, from cAdvisor's MachineInfo; allocatable from it
	// (nodestatus, which nodelet-admission decides on too).
	if node.Status.Capacity == nil {
		node.Status.Capacity = corev1.ResourceList{}
	}
	for k, v := range nodestatus.MachineCapacity(in.Machine, in.RootFs) {
		node.Status.Capacity[k] = v
	}
	if info := in.Machine; info != nil {
		node.Status.NodeInfo.MachineID = info.MachineID
		node.Status.NodeInfo.SystemUUID = info.SystemUUID
		if node.Status.NodeInfo.BootID != "" && node.Status.NodeInfo.BootID != info.BootID {
			events = append(events, nodeEvent{corev1.EventTypeWarning, EventNodeRebooted,
				fmt.Sprintf("Node %s has been rebooted, boot id: %s", in.Name, info.BootID)})
		}
		node.Status.NodeInfo.BootID = info.BootID
		if info.SwapCapacity != 0 {
			sc := int64(info.SwapCapacity)
			node.Status.NodeInfo.Swap = &corev1.NodeSwapStatus{Capacity: &sc}
		}
	}
	// The device plugin resources (the kubelet's GetCapacity): capacity
	// before the reservations are taken, allocatable after, as the
	// kubelet's MachineInfo setter applies them.
	devCapacity, devAllocatable := nodestatus.DevicePluginResources(in.Devices)
	for k, v := range devCapacity {
		node.Status.Capacity[k] = v
	}
	capacity, allocatable, err := nodestatus.Resources(in.Config, node.Status.Capacity)
	if err != nil {
		return nil, err
	}
	for k, v := range devAllocatable {
		allocatable[k] = v
	}
	node.Status.Capacity, node.Status.Allocatable = capacity, allocatable

	// Node info.
	node.Status.NodeInfo.KernelVersion = in.KernelVersion
	node.Status.NodeInfo.OSImage = in.OSImage
	node.Status.NodeInfo.ContainerRuntimeVersion = in.RuntimeVersion
	if in.RuntimeVersion == "" {
		node.Status.NodeInfo.ContainerRuntimeVersion = "Unknown"
	}
	node.Status.NodeInfo.KubeletVersion = version.Kubelet()
	node.Status.NodeInfo.KubeProxyVersion = ""
	node.Status.NodeInfo.OperatingSystem = goruntime.GOOS
	node.Status.NodeInfo.Architecture = goruntime.GOARCH
	if in.Images != nil {
		node.Status.Images = in.Images
	}

	// Pressure conditions come from nodelet-gc; Ready last, as the kubelet does.
	for _, p := range nodestatus.PressureConditions {
		cond := p.Condition(false)
		if in.Pressure != nil {
			for _, c := range in.Pressure.Conditions {
				if c.Type == p.Type {
					cond.Status = c.Status
					cond.Reason, cond.Message = c.Reason, c.Message
					if cond.Reason == "" && c.Status == corev1.ConditionTrue {
						cond = p.Condition(true)
					}
				}
			}
		}
		if setNodeCondition(node, cond, now) {
			record(corev1.EventTypeNormal, p.Event(cond.Status))
		}
	}
	ready := readyCondition(node, in)
	if setNodeCondition(node, ready, now) {
		if ready.Status == corev1.ConditionTrue {
			record(corev1.EventTypeNormal, EventNodeReady)
		} else {
			record(corev1.EventTypeNormal, EventNodeNotReady)
		}
	}
	return events, nil
}

// readyCondition is the kubelet's Ready setter over the runtime's report.
func readyCondition(node *corev1.Node, in NodeInputs) corev1.NodeCondition {
	var errs []string
	switch rs := in.Runtime; {
	case rs == nil:
		errs = append(errs, "container runtime status check may not have completed yet")
	default:
		if !rs.RuntimeReady {
			errs = append(errs, fmt.Sprintf("container runtime not ready: RuntimeReady=false reason:%s message:%s", rs.Reason, rs.Message))
		}
		if !rs.NetworkReady {
			errs = append(errs, fmt.Sprintf("container runtime network not ready: NetworkReady=false reason:%s message:%s", rs.Reason, rs.Message))
		}
	}
	if in.Pressure != nil && in.Pressure.ShuttingDown {
		// The kubelet's nodeShutdownManagerErrorsFunc (ShutdownStatus),
		// after the runtime errors, before missing capacity.
		errs = append(errs, "node is shutting down")
	}
	var missing []string
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourcePods, corev1.ResourceEphemeralStorage} {
		if _, ok := node.Status.Capacity[r]; !ok {
			missing = append(missing, string(r))
		}
	}
	if len(missing) > 0 {
		errs = append(errs, "missing node capacity for resources: "+strings.Join(missing, ", "))
	}
	if in.MachineErr != nil {
		errs = append(errs, in.MachineErr.Error())
	}
	if len(errs) > 0 {
		msg := strings.Join(errs, ", ")
		if len(errs) > 1 {
			msg = "[" + msg + "]"
		}
		return corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: "KubeletNotReady", Message: msg}
	}
	return corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", Message: "kubelet is posting ready status"}
}

// setNodeCondition puts c on node with a fresh heartbeat, keeping the
// transition time while the status stays. It reports a transition.
func setNodeCondition(node *corev1.Node, c corev1.NodeCondition, now metav1.Time) bool {
	c.LastHeartbeatTime = now
	for i := range node.Status.Conditions {
		old := &node.Status.Conditions[i]
		if old.Type != c.Type {
			continue
		}
		transition := old.Status != c.Status
		c.LastTransitionTime = old.LastTransitionTime
		if transition || c.LastTransitionTime.IsZero() {
			c.LastTransitionTime = now
		}
		*old = c
		return transition
	}
	c.LastTransitionTime = now
	node.Status.Conditions = append(node.Status.Conditions, c)
	return true
}

// nodeStatusHasChanged compares two statuses ignoring heartbeat times.
func nodeStatusHasChanged(a, b *corev1.NodeStatus) bool {
	ac, bc := a.DeepCopy(), b.DeepCopy()
	for _, s := range []*corev1.NodeStatus{ac, bc} {
		for i := range s.Conditions {
			s.Conditions[i].LastHeartbeatTime = metav1.Time{}
		}
		sort.SliceStable(s.Conditions, func(i, j int) bool { return s.Conditions[i].Type < s.Conditions[j].Type })
	}
	return !apiequality.Semantic.DeepEqual(ac, bc)
}

// imagesForNode turns the runtime's images into the node's image list:
// biggest first, at most 50, at most 5 names each.
func imagesForNode(images []imageInfo) []corev1.ContainerImage {
	sort.SliceStable(images, func(i, j int) bool { return images[i].size > images[j].size })
	if len(images) > nodeStatusMaxImages {
		images = images[:nodeStatusMaxImages]
	}
	out := []corev1.ContainerImage{}
	for _, im := range images {
		names := append(append([]string{}, im.digests...), im.tags...)
		if len(names) > maxNamesPerImageInNodeStatus {
			names = names[:maxNamesPerImageInNodeStatus]
		}
		out = append(out, corev1.ContainerImage{Names: names, SizeBytes: im.size})
	}
	return out
}

type imageInfo struct {
	digests, tags []string
	size          int64
}
