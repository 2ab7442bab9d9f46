package status

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	nodeutil "k8s.io/component-helpers/node/util"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/hostinfo"
	"github.com/nodelet/nodelet/schemas"
)

// nodeSync keeps the Node: registers it with the API server (when there is
// one), computes its status every nodeStatusUpdateFrequency and reports it
// when it changed or nodeStatusReportFrequency passed, and writes it to the
// node bucket in every mode.
type nodeSync struct {
	s    *Daemon
	kube kubernetes.Interface

	mu         sync.Mutex
	node       *corev1.Node
	uid        types.UID
	registered chan struct{}
	lastReport time.Time
	images     []corev1.ContainerImage
	imagesAt   time.Time
	criVersion string
}

func newNodeSync(s *Daemon, kube kubernetes.Interface) *nodeSync {
	return &nodeSync{s: s, kube: kube, registered: make(chan struct{})}
}

// nodeUID returns the registered Node's UID, once there is one.
func (n *nodeSync) nodeUID() (types.UID, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.uid, n.uid != ""
}

func (n *nodeSync) run(ctx context.Context) {
	s := n.s
	if n.kube != nil {
		n.register(ctx)
		if ctx.Err() != nil {
			return
		}
	} else {
		n.loadRecord(ctx)
		close(n.registered)
	}
	t := s.clock.NewTicker(s.cfg.Status.NodeStatusUpdateFrequency)
	defer t.Stop()
	for {
		if err := n.update(ctx); err != nil && ctx.Err() == nil {
			s.log.Error("Error updating node status, will retry", "node", s.nodeName, "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		case <-s.st.nodeWake:
		}
	}
}

// loadRecord starts standalone mode from the node last written, so that
// transition times survive a restart.
func (n *nodeSync) loadRecord(ctx context.Context) {
	rec, _, err := bus.Get[schemas.NodeRecord](ctx, n.s.bus, bus.BucketNode, bus.KeyNode)
	if err != nil {
		n.s.log.Warn("Cannot read the last node record", "err", err)
	}
	node := (*corev1.Node)(nil)
	if rec != nil && rec.Node != nil && rec.Node.Name == n.s.nodeName {
		node = rec.Node
	} else {
		node, _ = InitialNode(n.inputs(ctx))
	}
	n.mu.Lock()
	n.node = node
	n.mu.Unlock()
}

// register creates the Node, or reconciles an existing one, retrying with
// back-off like the kubelet's registerWithAPIServer.
func (n *nodeSync) register(ctx context.Context) {
	s := n.s
	delay := 100 * time.Millisecond
	for ctx.Err() == nil {
		node, err := n.tryRegister(ctx)
		if err == nil {
			n.mu.Lock()
			n.node, n.uid = node, node.UID
			n.mu.Unlock()
			close(n.registered)
			s.log.Info("Successfully registered node", "node", s.nodeName)
			return
		}
		s.log.Error("Unable to register node with API server", "node", s.nodeName, "err", err)
		select {
		case <-ctx.Done():
		case <-s.clock.After(delay):
		}
		if delay *= 2; delay > 7*time.Second {
			delay = 7 * time.Second
		}
	}
}

func (n *nodeSync) tryRegister(ctx context.Context) (*corev1.Node, error) {
	initial, err := InitialNode(n.inputs(ctx))
	if err != nil {
		return nil, err
	}
	created, err := n.kube.CoreV1().Nodes().Create(ctx, initial, metav1.CreateOptions{})
	if err == nil {
		return created, nil
	}
	if !apierrors.IsAlreadyExists(err) && !apierrors.IsForbidden(err) {
		return nil, err
	}
	existing, err := n.kube.CoreV1().Nodes().Get(ctx, n.s.nodeName, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get existing node: %w", err)
	}
	original := existing.DeepCopy()
	if reconcileExistingNode(initial, existing) {
		if existing, _, err = nodeutil.PatchNodeStatus(n.kube.CoreV1(), types.NodeName(n.s.nodeName), original, existing); err != nil {
			return nil, err
		}
	}
	n.s.log.Info("Node was previously registered", "node", n.s.nodeName)
	return existing, nil
}

// inputs gathers what the node status is computed from.
func (n *nodeSync) inputs(ctx context.Context) NodeInputs {
	s := n.s
	in := NodeInputs{
		Name: s.nodeName, Hostname: s.hostname, Addresses: s.hostIPs, Config: s.cfg,
		KernelVersion: hostinfo.KernelVersion(), OSImage: hostinfo.OSImage(), Now: s.clock.Now(),
	}
	in.Machine, in.MachineErr = s.machineInfo()
	if fs, err := s.machine.DirFs(s.cfg.Node.StateDir); err == nil {
		in.RootFs = &fs
	} else {
		s.log.Warn("Cannot measure the node filesystem", "path", s.cfg.Node.StateDir, "err", err)
	}
	s.st.mu.Lock()
	in.Runtime, in.Pressure, in.VolumesInUse, in.Devices = s.st.runtime, s.st.pressure, s.st.volumesInUse, s.st.devices
	s.st.mu.Unlock()
	if in.Runtime != nil && in.Runtime.RuntimeName != "" && in.Runtime.RuntimeVersion != "" {
		in.RuntimeVersion = in.Runtime.RuntimeName + "://" + in.Runtime.RuntimeVersion
	} else {
		in.RuntimeVersion = n.runtimeVersion(ctx)
	}
	in.Images = n.nodeImages(ctx)
	return in
}

func (n *nodeSync) runtimeVersion(ctx context.Context) string {
	n.mu.Lock()
	v := n.criVersion
	n.mu.Unlock()
	if v != "" || n.s.cri == nil {
		return v
	}
	resp, err := criCall(ctx, n.s.metrics, "version", func(ctx context.Context) (*runtimeapi.VersionResponse, error) {
		return n.s.cri.Runtime.Version(ctx, "v1")
	})
	if err != nil {
		n.s.log.Warn("Cannot get the container runtime version", "err", err)
		return ""
	}
	v = resp.RuntimeName + "://" + resp.RuntimeVersion
	n.mu.Lock()
	n.criVersion = v
	n.mu.Unlock()
	return v
}

// nodeImages lists the runtime's images, at most every 30 s.
func (n *nodeSync) nodeImages(ctx context.Context) []corev1.ContainerImage {
	n.mu.Lock()
	cached, at := n.images, n.imagesAt
	n.mu.Unlock()
	if n.s.cri == nil || (cached != nil && n.s.clock.Since(at) < 30*time.Second) {
		return cached
	}
	images, err := criCall(ctx, n.s.metrics, "list_images", func(ctx context.Context) ([]*runtimeapi.Image, error) {
		return n.s.cri.Image.ListImages(ctx, nil)
	})
	if err != nil {
		n.s.log.Warn("Cannot list images", "err", err)
		return cached
	}
	var infos []imageInfo
	for _, im := range images {
		infos = append(infos, imageInfo{digests: im.RepoDigests, tags: im.RepoTags, size: int64(im.GetSize())})
	}
	out := imagesForNode(infos)
	n.mu.Lock()
	n.images, n.imagesAt = out, n.s.clock.Now()
	n.mu.Unlock()
	return out
}

// update computes the node status and reports it when it changed or when
// nodeStatusReportFrequency passed since the last report.
func (n *nodeSync) update(ctx context.Context) error {
	s := n.s
	in := n.inputs(ctx)
	var original *corev1.Node
	if n.kube != nil {
		var err error
		original, err = n.kube.CoreV1().Nodes().Get(ctx, s.nodeName, metav1.GetOptions{ResourceVersion: "0"})
		if apierrors.IsNotFound(err) {
			// Someone deleted the Node: register it again.
			s.log.Warn("Node was deleted from the API server, registering again", "node", s.nodeName)
			node, err := n.tryRegister(ctx)
			if err != nil {
				return err
			}
			n.mu.Lock()
			n.uid = node.UID
			n.mu.Unlock()
			original = node
		} else if err != nil {
			return fmt.Errorf("get node %s: %w", s.nodeName, err)
		}
	} else {
		n.mu.Lock()
		original = n.node.DeepCopy()
		n.mu.Unlock()
		switch rs := in.Runtime; {
		case rs != nil && len(rs.PodCIDRs) > 0:
			original.Spec.PodCIDRs = rs.PodCIDRs
		case rs != nil && rs.PodCIDR != "":
			original.Spec.PodCIDRs = []string{rs.PodCIDR}
		case original.Spec.PodCIDR == "":
			original.Spec.PodCIDRs = []string{s.cfg.Node.PodCIDR}
		default:
			original.Spec.PodCIDRs = []string{original.Spec.PodCIDR}
		}
		original.Spec.PodCIDR = original.Spec.PodCIDRs[0]
	}
	node := original.DeepCopy()
	events, err := SetNodeStatus(node, in)
	if err != nil {
		return fmt.Errorf("node status: %w", err)
	}
	n.mu.Lock()
	due := n.lastReport.IsZero() || s.clock.Since(n.lastReport) >= s.cfg.Status.NodeStatusReportFrequency
	n.mu.Unlock()
	if !nodeStatusHasChanged(&original.Status, &node.Status) && !due {
		return nil
	}
	if n.kube != nil {
		updated, _, err := nodeutil.PatchNodeStatus(n.kube.CoreV1(), types.NodeName(s.nodeName), original, node)
		if err != nil {
			return err
		}
		node = updated
	}
	n.mu.Lock()
	n.node, n.lastReport = node, s.clock.Now()
	n.mu.Unlock()
	if _, _, err := s.nodeW.Put(ctx, bus.KeyNode, &schemas.NodeRecord{Node: node}); err != nil {
		s.log.Warn("Cannot write the node record", "err", err)
	}
	for _, e := range events {
		s.emitNodeEvent(e.Type, e.Reason, e.Message)
	}
	return nil
}

// currentNode returns the node as last reported.
func (n *nodeSync) currentNode() *corev1.Node {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.node == nil {
		return nil
	}
	return n.node.DeepCopy()
}

// nodeRef is the node in bus events. Its UID stays empty so the event goes
// on nodelet.v1.events.status.node; the API event gets the kubelet's
// UID (the node name) when it is posted.
func nodeRef(name string) corev1.ObjectReference {
	return corev1.ObjectReference{Kind: "Node", Name: name}
}

// emitNodeEvent puts a node event on the bus; in API mode the events
// consumer posts it like every other component's.
func (s *Daemon) emitNodeEvent(typ, reason, msg string) {
	s.bus.Emit(schemas.Event{Object: nodeRef(s.nodeName), Type: typ, Reason: reason, Message: msg, Time: s.clock.Now().UTC()})
}
