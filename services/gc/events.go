package gc

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/schemas"
)

// eventRecorder emits gc's events on the bus (nodelet-status posts them to
// the API): the kubelet's record.EventRecorder as gc's parts use it.
type eventRecorder struct {
	bus      *bus.Conn
	nodeName string
	clock    clock.Clock
}

// nodeEvents is what a part needs to record an event about the node.
type nodeEvents interface {
	nodeEvent(typ, reason, message string)
}

// podEvents is what a part needs to record an event about a pod too.
type podEvents interface {
	nodeEvents
	podEvent(pod *corev1.Pod, typ, reason, message string)
}

// nodeEvent emits an event about the node.
func (r *eventRecorder) nodeEvent(typ, reason, message string) {
	r.bus.Emit(schemas.Event{
		Object: corev1.ObjectReference{Kind: "Node", Name: r.nodeName},
		Type:   typ, Reason: reason, Message: message, Time: r.clock.Now().UTC(),
	})
}

// podEvent emits an event about a pod.
func (r *eventRecorder) podEvent(pod *corev1.Pod, typ, reason, message string) {
	r.bus.Emit(schemas.Event{
		Object: corev1.ObjectReference{Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, APIVersion: "v1"},
		Type:   typ, Reason: reason, Message: message, Time: r.clock.Now().UTC(),
	})
}

var _ podEvents = (*eventRecorder)(nil)
