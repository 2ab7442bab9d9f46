package admission

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/component-helpers/storage/ephemeral"
)

// ReasonVolumeAttachmentLimitExceeded is the kubelet's
// VolumeAttachmentLimitExceededReason.
const ReasonVolumeAttachmentLimitExceeded = "VolumeAttachmentLimitExceeded"

// VolumeSource tells admission about CSI volumes: each driver's attach
// limit on this node and the CSI volumes a pod uses.
type VolumeSource interface {
	// Limits is each driver's limit on the node (CSINode allocatable
	// count); a driver without one is absent.
	Limits(ctx context.Context) (map[string]int64, error)
	// CSIVolumes maps each CSI volume the pod uses to its driver, by a
	// key unique on the node (driver/handle). Claims not bound yet are
	// left out.
	CSIVolumes(ctx context.Context, pod *corev1.Pod) (map[string]string, error)
}

// VolumeLimitsHandler refuses a pod whose CSI volumes would take a driver
// past its attach limit (the scheduler's NodeVolumeLimits filter, and the
// kubelet's VolumeAttachmentLimitExceeded rejection), counting the unique
// volumes of the pods that hold resources and the pod's own. A lookup that
// fails admits the pod (logged): the limit is the driver's to enforce
// then.
type VolumeLimitsHandler struct {
	Source VolumeSource
	Log    *slog.Logger
}

// usesClaimsOrCSI: only such pods are looked up.
func usesClaimsOrCSI(pod *corev1.Pod) bool {
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim != nil || v.Ephemeral != nil || v.CSI != nil {
			return true
		}
	}
	return false
}

func (h *VolumeLimitsHandler) Admit(attrs *Attributes) Result {
	if h.Source == nil || !usesClaimsOrCSI(attrs.Pod) {
		return Result{Admit: true}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	mine, err := h.Source.CSIVolumes(ctx, attrs.Pod)
	for i := 0; apierrors.IsForbidden(err) && i < 30; i++ {
		// The Node authorizer learns of a new pod's claims asynchronously.
		time.Sleep(100 * time.Millisecond)
		mine, err = h.Source.CSIVolumes(ctx, attrs.Pod)
	}
	if err != nil || len(mine) == 0 {
		h.lookupFailed(attrs.Pod, err)
		return Result{Admit: true}
	}
	limits, err := h.Source.Limits(ctx)
	if err != nil {
		h.lookupFailed(attrs.Pod, err)
		return Result{Admit: true}
	}
	used := map[string]string{}
	for _, o := range attrs.OtherPods {
		if !usesClaimsOrCSI(o.Pod) {
			continue
		}
		vols, err := h.Source.CSIVolumes(ctx, o.Pod)
		if err != nil {
			h.lookupFailed(o.Pod, err)
			continue
		}
		for k, d := range vols {
			used[k] = d
		}
	}
	count := map[string]int64{}
	for _, d := range used {
		count[d]++
	}
	adds := map[string]int64{}
	for k, d := range mine {
		if _, ok := used[k]; !ok {
			adds[d]++
		}
	}
	drivers := make([]string, 0, len(adds))
	for d := range adds {
		drivers = append(drivers, d)
	}
	sort.Strings(drivers)
	for _, d := range drivers {
		if limit, ok := limits[d]; ok && count[d]+adds[d] > limit {
			return Result{Reason: ReasonVolumeAttachmentLimitExceeded, Message: fmt.Sprintf(
				"Node has reached its volume attachment limit, rejecting pod. CSI driver %s: %d volumes in use, the pod adds %d, limit %d (node(s) exceed max volume count)",
				d, count[d], adds[d], limit)}
		}
	}
	return Result{Admit: true}
}

func (h *VolumeLimitsHandler) lookupFailed(pod *corev1.Pod, err error) {
	if err != nil && h.Log != nil {
		h.Log.Warn("Cannot read the pod's CSI volumes, not counting them against attach limits",
			"pod", pod.Namespace+"/"+pod.Name, "podUID", pod.UID, "err", err)
	}
}

// APIVolumes reads claims, PVs and the node's CSINode from the API server
// with the node's identity. A pod's volumes are cached once every claim
// was resolved.
type APIVolumes struct {
	Client   kubernetes.Interface
	NodeName string

	mu    sync.Mutex
	cache map[types.UID]map[string]string
}

// setClient gives a the node's API client once there is one: while
// nodelet-status is still bootstrapping the credential, admission must not
// wait for it (the runtime and status start after admission), so until
// then reads fail and pods are admitted without the check, as when the API
// cannot be read.
func (a *APIVolumes) setClient(c kubernetes.Interface) {
	a.mu.Lock()
	a.Client = c
	a.mu.Unlock()
}

// client is the API client, an error until it is there.
func (a *APIVolumes) client() (kubernetes.Interface, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.Client == nil {
		return nil, errors.New("the node's API credential is not ready yet")
	}
	return a.Client, nil
}

// Limits reads the node's CSINode (none yet: no limits).
func (a *APIVolumes) Limits(ctx context.Context) (map[string]int64, error) {
	c, err := a.client()
	if err != nil {
		return nil, err
	}
	n, err := c.StorageV1().CSINodes().Get(ctx, a.NodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return map[string]int64{}, nil
	}
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, d := range n.Spec.Drivers {
		if d.Allocatable != nil && d.Allocatable.Count != nil {
			out[d.Name] = int64(*d.Allocatable.Count)
		}
	}
	return out, nil
}

// CSIVolumes resolves the pod's inline CSI volumes and the CSI PVs behind
// its claims.
func (a *APIVolumes) CSIVolumes(ctx context.Context, pod *corev1.Pod) (map[string]string, error) {
	a.mu.Lock()
	if v, ok := a.cache[pod.UID]; ok {
		a.mu.Unlock()
		return v, nil
	}
	a.mu.Unlock()
	out := map[string]string{}
	complete := true
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		claim := ""
		switch {
		case v.CSI != nil:
			// Inline volumes are the pod's own (as the scheduler counts them).
			out[v.CSI.Driver+"/"+string(pod.UID)+"/"+v.Name] = v.CSI.Driver
			continue
		case v.PersistentVolumeClaim != nil:
			claim = v.PersistentVolumeClaim.ClaimName
		case v.Ephemeral != nil:
			claim = ephemeral.VolumeClaimName(pod, v)
		default:
			continue
		}
		c, err := a.client()
		if err != nil {
			return nil, err
		}
		pvc, err := c.CoreV1().PersistentVolumeClaims(pod.Namespace).Get(ctx, claim, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			complete = false
			continue
		}
		if err != nil {
			return nil, err
		}
		if pvc.Spec.VolumeName == "" {
			complete = false
			continue
		}
		pv, err := c.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		if pv.Spec.CSI != nil {
			out[pv.Spec.CSI.Driver+"/"+pv.Spec.CSI.VolumeHandle] = pv.Spec.CSI.Driver
		}
	}
	if complete {
		a.mu.Lock()
		if a.cache == nil || len(a.cache) > 10000 {
			a.cache = map[types.UID]map[string]string{}
		}
		a.cache[pod.UID] = out
		a.mu.Unlock()
	}
	return out, nil
}

// Forget drops a pod's cached volumes.
func (a *APIVolumes) Forget(uid types.UID) {
	a.mu.Lock()
	delete(a.cache, uid)
	a.mu.Unlock()
}

var _ Handler = (*VolumeLimitsHandler)(nil)
var _ VolumeSource = (*APIVolumes)(nil)
