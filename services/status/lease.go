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
	rt := &renewTimes{}
	if l, err := kube.CoordinationV1().Leases(NodeLeaseNamespace).Get(ctx, s.nodeName, metav1.GetOptions{}); err == nil && l.Spec.RenewTime != nil {
		rt.last = l.Spec.RenewTime.Time // a restart after a step back
	}
	c := lease.NewController(s.clock, kube, s.nodeName, duration, func() {
		s.log.Warn("Node lease renewals are failing repeatedly", "node", s.nodeName)
	}, renew, s.nodeName, NodeLeaseNamespace, func(l *coordinationv1.Lease) error {
		l.Spec.RenewTime = &metav1.MicroTime{Time: rt.next(l.Spec.RenewTime.Time)}
		return s.setNodeOwner(l)
	})
	s.log.Info("Starting node lease controller", "node", s.nodeName, "renewInterval", renew)
	c.Run(ctx)
}

// renewTimes keeps the Lease's renewTime moving forward when the wall clock
// is stepped back. kube-controller-manager counts a renewal only when
// renewTime is after the one it saw last (tryUpdateNodeHealth in
// pkg/controller/nodelifecycle: savedLease.Spec.RenewTime.Before(observed)),
// so a node whose clock went back an hour would look dead for that hour:
// NotReady, tainted unreachable, its pods evicted. The kubelet's lease
// controller writes the clock as it reads it and has that flaw; here, until
// the clock passes the last renewal again, each renewal writes one
// microsecond (renewTime's precision) past it. The controller calls it from
// its one sync loop.
type renewTimes struct{ last time.Time }

func (r *renewTimes) next(now time.Time) time.Time {
	now = now.Truncate(time.Microsecond)
	if last := r.last.Truncate(time.Microsecond); !now.After(last) && !last.IsZero() {
		now = last.Add(time.Microsecond)
	}
	r.last = now
	return now
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
