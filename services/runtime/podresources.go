package runtime

import (
	"context"
	"log/slog"

	corev1 "k8s.io/api/core/v1"
	internalapi "k8s.io/cri-api/pkg/apis"

	"github.com/nodelet/nodelet/internal/cgroups"
	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/schemas"
)

// podResources is what the kubelet's container manager keeps of the pods'
// resources: the pod and QoS cgroups (cm's pod container manager and QoS
// container manager, podcgroup.go) and each pod's allocated resources and
// resize progress (the allocation manager and the status manager's resize
// conditions, resize.go, resizerestart.go). It owns that state; the sync
// steps admitResize and syncResize drive it for one pod.
type podResources struct {
	cfg      *config.Config
	log      *slog.Logger
	rs       internalapi.RuntimeService
	capacity nodeCapacity
	event    func(pod *corev1.Pod, c *corev1.Container, kind, typ, reason, msg string)
	store    podRecords
	observed observedPods
	view     podViewer

	// cgroups is the pod cgroup hierarchy; it only names cgroups until
	// setupCgroups has checked the driver and made the node's.
	cgroups *cgroups.Pods
	// resize holds each pod's allocated resources and resize progress.
	resize resizeState
}

// podRecords are the pods the node should run (store).
type podRecords interface {
	uids() []string
	get(uid string) *podRecord
	sourcesReady() bool
}

// observedPods is what the runtime last published of each pod
// (observedWriter).
type observedPods interface {
	get(uid string) *schemas.PodObserved
}

// podViewer is CRI's view of one pod (criView).
type podViewer interface {
	pod(ctx context.Context, uid string) (*podRuntime, error)
}

var (
	_ podRecords   = (*store)(nil)
	_ observedPods = (*observedWriter)(nil)
	_ podViewer    = (*criView)(nil)
)
