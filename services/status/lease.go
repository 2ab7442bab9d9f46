package status

import (
	"context"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/component-helpers/apimachinery/lease"
)

// NodeLeaseNamespace holds every node's Lease.
const NodeLeaseNamespace = corev1.NamespaceNodeLease

// runLease keeps the node's Lease with component-helpers' lease controller,
// as the kubelet does: renewed every quarter of nodeLeaseDurationSeconds,
// owned by the Node so it goes when the Node goes. It starts once the Node
// is registered and runs until ctx ends. The Lease is not deleted on stop:
// a stopped nodelet-status is a node whose heartbeat stopped.
func (s *Daemon) runLease(ctx context.Context, kube kubernetes.Interface) {
	select {
	case <-ctx.Done():
		return
	case <-s.node.registered:
	}
	duration := int32(s.cfg.Status.NodeLeaseDurationSeconds)
	renew := time.Duration(float64(duration)*0.25*1000) * time.Millisecond
	c := lease.NewController(s.clock, kube, s.nodeName, duration, func() {
		s.log.Warn("Node lease renewals are failing repeatedly", "node", s.nodeName)
	}, renew, s.nodeName, NodeLeaseNamespace, s.setNodeOwner)
	s.log.Info("Starting node lease controller", "node", s.nodeName, "renewInterval", renew)
	c.Run(ctx)
}

// setNodeOwner makes the Node the Lease's owner (the kubelet's
// setNodeOwnerFunc).
func (s *Daemon) setNodeOwner(l *coordinationv1.Lease) error {
	if len(l.OwnerReferences) > 0 {
		return nil
	}
	uid, ok := s.node.nodeUID()
	if !ok {
		return nil
	}
	l.OwnerReferences = []metav1.OwnerReference{{
		APIVersion: corev1.SchemeGroupVersion.String(),
		Kind:       "Node",
		Name:       s.nodeName,
		UID:        uid,
	}}
	return nil
}
