package status

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/schemas"
)

// claimsUpdate keeps nodelet-devices' claims.<uid> records; a change
// makes the pod's status computed again.
func (s *store) claimsUpdate(u bus.Update[schemas.PodClaims]) {
	s.mu.Lock()
	defer s.mu.Unlock()
	uid := strings.TrimPrefix(u.Key, "claims.")
	switch u.Kind {
	case bus.Put:
		s.claims[uid] = u.Value
		s.markDirty(uid)
	case bus.Deleted:
		delete(s.claims, uid)
		s.markDirty(uid)
	case bus.Reset:
		for k := range s.claims {
			s.dirty[k] = true
		}
		clear(s.claims)
	}
}

// draHealthUpdate keeps nodelet-devices' drahealth record; a change makes
// the status of every pod with claims computed again (the kubelet's
// HandleWatchResourcesStream asks for the pods using a changed device).
func (s *store) draHealthUpdate(u bus.Update[schemas.DRAHealth]) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch u.Kind {
	case bus.Put:
		s.draHealth = u.Value
	case bus.Deleted, bus.Reset:
		s.draHealth = nil
	default:
		return
	}
	for uid := range s.claims {
		s.markDirty(uid)
	}
}

// setClaimsResourcesStatus is the DRA manager's
// UpdateAllocatedResourcesStatus (ResourceHealthStatus, beta and on by
// default since 1.36): each app container that names claims in
// resources.claims reports, per "claim:<name>" or "claim:<name>/<request>",
// the claim's prepared devices of that request, each by its first CDI
// device ID (else driver/pool/device) with the health its driver's
// DRAResourceHealth stream last reported (nodelet-devices' drahealth
// record: Unknown when not reported or not refreshed within its timeout,
// the kubelet's getHealthInfo) and its message (ResourceHealthStatusMessage,
// beta and on by default). Entries without devices are left out, as the
// kubelet does; they are sorted by name (the kubelet's order is its map's).
func setClaimsResourcesStatus(pod *corev1.Pod, statuses []corev1.ContainerStatus, rec *schemas.PodClaims, health *schemas.DRAHealth) {
	if rec == nil {
		return
	}
	for i := range statuses {
		cs := &statuses[i]
		var spec *corev1.Container
		for j := range pod.Spec.Containers {
			if pod.Spec.Containers[j].Name == cs.Name {
				spec = &pod.Spec.Containers[j]
			}
		}
		if spec == nil || len(spec.Resources.Claims) == 0 {
			continue
		}
		var out []corev1.ResourceStatus
		for _, cl := range spec.Resources.Claims {
			pc := rec.Claim(cl.Name)
			if pc == nil || !claimNamed(pod, cl.Name, pc.Name) {
				continue
			}
			name := corev1.ResourceName("claim:" + cl.Name)
			if cl.Request != "" {
				name = corev1.ResourceName(fmt.Sprintf("claim:%s/%s", cl.Name, cl.Request))
			}
			rs := corev1.ResourceStatus{Name: name}
			seen := map[corev1.ResourceID]bool{}
			for _, d := range pc.Devices {
				if cl.Request != "" && len(d.Requests) > 0 && !slices.Contains(d.Requests, resourceclaim.BaseRequestRef(cl.Request)) {
					continue
				}
				id := corev1.ResourceID(fmt.Sprintf("%s/%s/%s", d.Driver, d.Pool, d.Device))
				if len(d.CDIDeviceIDs) > 0 {
					id = corev1.ResourceID(d.CDIDeviceIDs[0])
				}
				if seen[id] {
					continue
				}
				seen[id] = true
				rh := corev1.ResourceHealth{ResourceID: id, Health: corev1.ResourceHealthStatusUnknown}
				if h := health.Device(d.Driver, d.Pool, d.Device); h != nil && h.Health != "" {
					rh.Health = corev1.ResourceHealthStatus(h.Health)
					if h.Message != "" {
						rh.Message = ptr.To(h.Message)
					}
				}
				rs.Resources = append(rs.Resources, rh)
			}
			if len(rs.Resources) > 0 {
				out = append(out, rs)
			}
		}
		sort.Slice(out, func(a, b int) bool { return out[a].Name < out[b].Name })
		cs.AllocatedResourcesStatus = out
	}
}

// claimNamed tells whether the pod's claim podClaim resolves to the
// ResourceClaim name (a record of an older claim of the same pod name
// does not count).
func claimNamed(pod *corev1.Pod, podClaim, name string) bool {
	for i := range pod.Spec.ResourceClaims {
		if pod.Spec.ResourceClaims[i].Name == podClaim {
			n, _, err := resourceclaim.Name(pod, &pod.Spec.ResourceClaims[i])
			return err == nil && n != nil && *n == name
		}
	}
	return false
}
