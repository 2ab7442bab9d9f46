// Package admission is nodelet-admission: the kubelet's canAdmitPod as a
// daemon. It decides, one pod at a time and in order of arrival, whether
// each desired pod may run on this node, and writes one verdict per pod
// into the admission bucket. The runtime acts only on admitted pods; status
// turns a rejection into a Failed pod with the verdict's reason.
//
// # Inputs and output
//
// It watches the desired pods (nodelet_v1_pods_desired), the runtime's
// observed pods (to know which admitted pods no longer hold resources) and
// the node's pressure conditions from nodelet-gc. The node itself is built
// from the configuration and from cAdvisor's view of the machine (see
// NodeFromConfig). Verdicts go to nodelet_v1_pods_admission, key = pod
// UID, through a bus.Writer; each rejection also goes on the events stream
// as a Warning event with the verdict's reason and message.
//
// # The rules, as the kubelet's
//
// Handlers run in the kubelet's order and the first refusal decides:
//
//   - node pressure and shutdown (the eviction manager's and the node
//     shutdown manager's admit handlers): while nodelet-gc handles a node
//     shutdown every pod is refused (NodeShutdown, "Pod was rejected as the
//     node is shutting down."); under
//     MemoryPressure alone only BestEffort pods are refused, unless they
//     tolerate the memory-pressure taint; under any other pressure
//     (DiskPressure, PIDPressure) every pod is. Reason Evicted, message
//     "The node had condition: [MemoryPressure]. " (the kubelet's wording,
//     trailing space included).
//   - the sysctl allowlist: the kubelet's safe sysctls, and the unsafe ones
//     listed in admission.allowedUnsafeSysctls (SysctlForbidden).
//   - the predicate handler: the pod's kubernetes.io/os label and OS field
//     (PodOSSelectorNodeLabelDoesNotMatch, PodOSNotSupported),
//     SupplementalGroupsPolicy=Strict, then pod count, cpu, memory,
//     ephemeral-storage and scalar resources against allocatable
//     (OutOfpods, OutOfcpu, ..., OutOf<resource>, message "Node didn't have
//     enough resource: cpu, requested: 4000, used: 1500, capacity: 2000"),
//     node selector and required node affinity (NodeAffinity), spec.nodeName
//     (NodeName), host ports (NodePorts), and NoExecute taints
//     (TaintToleration, message "Predicate TaintToleration failed: node(s)
//     had taints that the pod didn't tolerate"). Only the first failure is
//     reported, resources first, as the kubelet does.
//   - AppArmor: a pod asking for a profile other than unconfined (field or
//     the legacy annotation) on a kernel without AppArmor (AppArmor,
//     "Cannot enforce AppArmor: AppArmor is not enabled on the host").
//   - declared node features (PodFeatureUnsupported).
//   - CSI attach limits (with node.kubeconfig): a pod whose CSI volumes
//     (inline, or the CSI PVs behind its bound claims) would take a driver
//     past the allocatable count in the node's CSINode (max_volumes_per_node
//     from the driver's NodeGetInfo), counting the unique volumes of the
//     pods holding resources, is refused with reason
//     VolumeAttachmentLimitExceeded (the kubelet's; the scheduler's
//     NodeVolumeLimits filter does the same count).
//
// Like the kubelet, admission checks only NoExecute taints, not NoSchedule:
// NoSchedule keeps the scheduler away, and a pod bound to this node (or a
// static pod, whose taints are not checked at all) got here on purpose.
//
// Critical pods, which for the kubelet are static pods, mirror pods and
// pods of priority 2000000000 (system-cluster-critical) and above, are
// never refused for node pressure. When resources are short they preempt
// other pods as the kubelet's CriticalPodAdmissionHandler does
// (preemption.go): the victims' verdicts turn to Preempting (the runtime
// kills them as an eviction, status fails them with DisruptionTarget), or,
// when no set of pods would free enough, the critical pod is refused with
// UnexpectedAdmissionError.
//
// # Order, updates, removals, restarts
//
// Pods without a verdict are decided oldest first (creation time, then
// UID; a burst that arrives together is one batch, as the kubelet's
// HandlePodAdditions sorts each batch) against the admitted pods that still
// hold resources: those not terminated by the runtime's report, or still
// being killed. An update of a decided pod passes through: its verdict is
// kept as it was, DesiredRevision included (the revision the decision was
// made on), so the writer writes nothing and the verdict never flips. A pod
// removed from the desired bucket loses its verdict and frees its
// resources.
//
// Verdicts are facts. On start the stored verdicts are loaded before any
// decision; only pods without one are decided, once the desired, observed
// and pressure buckets are all loaded. A restart therefore writes nothing
// for pods already decided, and the order in which desired pods are
// replayed cannot turn an admitted pod into a rejected one. Verdicts of
// pods removed while admission was down are deleted at start. If the bus's
// store is wiped under a running admission, it writes every verdict it
// holds again and keeps them while sources put their pods back; a verdict
// whose pod never comes back is deleted at the next start.
package admission

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/daemon"
	"github.com/nodelet/nodelet/internal/nodestatus"
)

// Options are what nodelet-admission runs with. Run builds them from the
// daemon's environment; tests build them directly.
type Options struct {
	daemon.Deps
	// Capacity reports the machine's resources; nil reads them with
	// cAdvisor (MachineCapacity on node.stateDir).
	Capacity Capacity
	// Clock stamps verdicts and events; nil is the real clock.
	Clock clock.PassiveClock
	// Volumes reads CSI attach limits and pods' CSI volumes; nil reads
	// them from the API server when node.kubeconfig is set (else no
	// attach limit is checked).
	Volumes VolumeSource
	// NodeClient reads the node's Node object, whose labels and taints
	// admission follows; nil makes one from node.kubeconfig when it is set
	// (else the configured labels and taints are the node's).
	NodeClient kubernetes.Interface
}

// Run is nodelet-admission under the daemon frame.
func Run(ctx context.Context, env *daemon.Env) error {
	d, err := New(Options{Deps: env.Deps()})
	if err != nil {
		return err
	}
	return d.Run(ctx)
}

// Daemon is nodelet-admission: the node as admission sees it and the
// controller that decides.
type Daemon struct {
	o    Options
	c    *controller
	node *corev1.Node // as configured
}

// New reads the node's capacity, builds the node admission decides on and
// checks admission's settings.
func New(o Options) (*Daemon, error) {
	cfg := o.Config
	capSource := o.Capacity
	if capSource == nil {
		capSource = MachineCapacity{Dir: cfg.Node.StateDir}
	}
	capacity, err := capSource.Capacity()
	var fsErr *nodestatus.FsError
	switch {
	case errors.As(err, &fsErr):
		o.Log.Warn("Node has no ephemeral-storage capacity: pods that request it will be refused", "err", err)
	case err != nil:
		return nil, fmt.Errorf("node capacity: %w", err)
	}
	node, err := NodeFromConfig(cfg, capacity)
	if err != nil {
		return nil, err
	}
	o.Log.Info("Admitting pods to node", "node", node.Name,
		"allocatable", formatResources(node.Status.Allocatable), "taints", len(node.Spec.Taints), "disabled", cfg.Admission.Disabled)
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Health == nil {
		o.Health = func(bool, string) {}
	}
	sysctls, err := NewSysctlHandler(cfg.Admission.AllowedUnsafeSysctls, "")
	if err != nil {
		return nil, fmt.Errorf("admission.allowedUnsafeSysctls: %w", err)
	}
	return &Daemon{o: o, node: node, c: newController(o.Log, o.Bus, o.Health, o.Clock, node, sysctls, cfg.Admission.Disabled)}, nil
}

// Run decides until ctx is done.
func (d *Daemon) Run(ctx context.Context) error {
	vols := d.o.Volumes
	var apiVols *APIVolumes
	if vols == nil && d.o.Config.NodeKubeconfig() != "" {
		// The node's CSI attach limits, read with the one client below.
		apiVols = &APIVolumes{NodeName: d.o.Config.Node.Name}
		vols = apiVols
	}
	if vols != nil {
		d.c.admitter.handlers = append(d.c.admitter.handlers, &VolumeLimitsHandler{Source: vols, Log: d.o.Log})
	}
	if d.o.NodeClient != nil || d.o.Config.NodeKubeconfig() != "" {
		go func() {
			client := d.o.NodeClient
			if client == nil {
				if client = nodeClient(ctx, d.o.Config, d.o.Log); client == nil {
					return
				}
			}
			if apiVols != nil {
				apiVols.setClient(client)
			}
			followAPINode(ctx, client, d.node, d.c.admitter.SetNode, d.o.Log)
		}()
	}
	return d.c.run(ctx)
}

// formatResources renders rl as "cpu=2,memory=4Gi,...", sorted by name.
func formatResources(rl corev1.ResourceList) string {
	parts := make([]string, 0, len(rl))
	for name, q := range rl {
		parts = append(parts, string(name)+"="+q.String())
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}
