package runtime

import (
	"context"
	"fmt"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/dynamic-resource-allocation/resourceclaim"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/podutil"
	"github.com/nodelet/nodelet/schemas"
)

// reasonFailedPrepareDynamicResources is the kubelet's
// events.FailedPrepareDynamicResources.
const reasonFailedPrepareDynamicResources = "FailedPrepareDynamicResources"

// draClaims is what the runtime knows of the pods' ResourceClaims:
// nodelet-devices' claims.<uid> records (the kubelet's DRA manager state,
// read here as the kubelet's kuberuntime reads it through GetResources).
type draClaims struct {
	mu   sync.Mutex
	pods map[string]*schemas.PodClaims
	// reported: the last prepare error emitted as an event, per pod.
	reported map[string]string
}

func newDRAClaims() *draClaims {
	return &draClaims{pods: map[string]*schemas.PodClaims{}, reported: map[string]string{}}
}

// onClaims keeps a pod's record and returns the pod's UID, "" for none.
func (d *draClaims) onClaims(u bus.Update[schemas.PodClaims]) string {
	uid := strings.TrimPrefix(u.Key, "claims.")
	d.mu.Lock()
	defer d.mu.Unlock()
	switch u.Kind {
	case bus.Put:
		d.pods[uid] = u.Value
	case bus.Deleted:
		delete(d.pods, uid)
		delete(d.reported, uid)
	case bus.Reset:
		clear(d.pods)
		return ""
	default:
		return ""
	}
	return uid
}

func (d *draClaims) get(uid string) *schemas.PodClaims {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.pods[uid]
}

// waitForClaims holds a pod with ResourceClaims before its sandbox until
// nodelet-devices has prepared every claim: the kubelet's SyncPod calls
// PrepareDynamicResources right before createPodSandbox, and on an error
// emits FailedPrepareDynamicResources and does not start the pod. The
// pod's worker is woken when the record changes.
func (s *podSync) waitForClaims(ctx context.Context) *syncResult {
	if len(podutil.ResourceClaims(s.pod)) == 0 {
		return nil
	}
	d := s.m.store.claims
	rec := d.get(s.uid)
	if rec != nil && rec.Prepared {
		return nil
	}
	if rec != nil && rec.Error != "" {
		d.mu.Lock()
		fresh := d.reported[s.uid] != rec.Error
		d.reported[s.uid] = rec.Error
		d.mu.Unlock()
		if fresh {
			s.m.event(s.pod, nil, "", corev1.EventTypeWarning, reasonFailedPrepareDynamicResources,
				"Failed to prepare dynamic resources: "+rec.Error)
			s.m.log.Error("Failed to prepare dynamic resources", "pod", podRef(s.pod), "podUID", s.uid, "err", rec.Error)
		}
	}
	s.publish(ctx)
	return requeueIn(retryWaiting)
}

// cdiDevices is the kubelet's DRA GetResources for container c: the CDI
// device IDs of the claims (and requests) c names in resources.claims, as
// nodelet-devices prepared them. A claim not prepared is an error (the
// sandbox waited for all of them; this is a restart race).
func (d *draClaims) cdiDevices(pod *corev1.Pod, c *corev1.Container) ([]*runtimeapi.CDIDevice, error) {
	extClaim, extRequests := podutil.ExtendedResourceRequests(pod, c)
	if len(c.Resources.Claims) == 0 && len(extRequests) == 0 {
		return nil, nil
	}
	rec := d.get(string(pod.UID))
	var out []*runtimeapi.CDIDevice
	// The extended resources the scheduler's claim serves: its requests
	// mapped to this container.
	if len(extRequests) > 0 {
		var pc *schemas.PreparedClaim
		if rec != nil {
			pc = rec.ClaimNamed(extClaim)
		}
		if pc == nil || !pc.Prepared {
			return nil, fmt.Errorf("internal error: unable to get claim info for ResourceClaim %s in namespace %s", extClaim, pod.Namespace)
		}
		for _, r := range extRequests {
			for _, id := range pc.CDIDevices(r) {
				out = append(out, &runtimeapi.CDIDevice{Name: id})
			}
		}
	}
	for _, cc := range c.Resources.Claims {
		var podClaim *corev1.PodResourceClaim
		for i := range pod.Spec.ResourceClaims {
			if pod.Spec.ResourceClaims[i].Name == cc.Name {
				podClaim = &pod.Spec.ResourceClaims[i]
			}
		}
		if podClaim == nil {
			continue
		}
		name, _, err := resourceclaim.Name(pod, podClaim)
		if err != nil {
			return nil, err
		}
		if name == nil {
			continue // no claim generated: nothing to add
		}
		var pc *schemas.PreparedClaim
		if rec != nil {
			pc = rec.Claim(cc.Name)
		}
		if pc == nil || !pc.Prepared || pc.Name != *name {
			return nil, fmt.Errorf("internal error: unable to get claim info for ResourceClaim %s in namespace %s", *name, pod.Namespace)
		}
		for _, id := range pc.CDIDevices(cc.Request) {
			out = append(out, &runtimeapi.CDIDevice{Name: id})
		}
	}
	return out, nil
}
