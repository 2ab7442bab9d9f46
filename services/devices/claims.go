package devices

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"

	"github.com/nodelet/nodelet/internal/podutil"
	"github.com/nodelet/nodelet/schemas"
)

// draClient is a driver's DRAPlugin service (v1, or v1beta1 wrapped).
type draClient = drapb.DRAPluginClient

// claimGetter reads a ResourceClaim from the API server.
type claimGetter func(ctx context.Context, namespace, name string) (*resourceapi.ResourceClaim, error)

// claimManager is the kubelet's DRA manager (pkg/kubelet/cm/dra): it
// prepares each pod's ResourceClaims with their drivers and unprepares
// them when the last pod using them is gone. Its state, one
// schemas.PodClaims per pod, is the checkpoint the daemon stores in the
// devices bucket (the kubelet's claim info cache and its state file).
type claimManager struct {
	log *slog.Logger
	// getClaim reads claims; nil until the daemon has an API client.
	getClaim func() claimGetter
	driver   func(name string) (draClient, error)
	now      func() time.Time

	mu   sync.Mutex
	pods map[string]*schemas.PodClaims
}

func newClaimManager(log *slog.Logger, getClaim func() claimGetter, driver func(string) (draClient, error)) *claimManager {
	return &claimManager{log: log, getClaim: getClaim, driver: driver, now: time.Now, pods: map[string]*schemas.PodClaims{}}
}

func (m *claimManager) restore(recs []*schemas.PodClaims) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range recs {
		m.pods[r.UID] = r
	}
}

func (m *claimManager) record(uid string) *schemas.PodClaims {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.pods[uid]
}

func (m *claimManager) uids() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]string, 0, len(m.pods))
	for uid := range m.pods {
		out = append(out, uid)
	}
	sort.Strings(out)
	return out
}

func (m *claimManager) set(r *schemas.PodClaims) {
	m.mu.Lock()
	m.pods[r.UID] = r
	m.mu.Unlock()
}

func (m *claimManager) forget(uid string) {
	m.mu.Lock()
	delete(m.pods, uid)
	m.mu.Unlock()
}

// preparedElsewhere is the claim uid as prepared for another pod, or nil.
func (m *claimManager) preparedElsewhere(podUID, claimUID string) *schemas.PreparedClaim {
	m.mu.Lock()
	defer m.mu.Unlock()
	for uid, r := range m.pods {
		if uid == podUID {
			continue
		}
		for i := range r.Claims {
			if c := &r.Claims[i]; c.UID == claimUID && c.Prepared {
				return c
			}
		}
	}
	return nil
}

// usedElsewhere tells whether a pod other than podUID holds claimUID.
func (m *claimManager) usedElsewhere(podUID, claimUID string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for uid, r := range m.pods {
		if uid != podUID && slices.ContainsFunc(r.Claims, func(c schemas.PreparedClaim) bool { return c.UID == claimUID }) {
			return true
		}
	}
	return false
}

// wantsClaims tells whether the pod has ResourceClaims to prepare.
func wantsClaims(pod *corev1.Pod) bool { return len(podutil.ResourceClaims(pod)) > 0 }

// prepare is the kubelet's PrepareResources for pod: a validation pass
// (each claim read, allocated, reserved for the pod, its drivers
// registered) that changes nothing, then the record checkpointed with the
// claims about to be prepared (store), then NodePrepareResources per
// driver for the claims not prepared yet (a claim another pod prepared is
// not prepared again), and the record stored prepared. It returns the
// record as stored last; its Error says why it is not prepared.
func (m *claimManager) prepare(ctx context.Context, pod *corev1.Pod, store func(*schemas.PodClaims) error) *schemas.PodClaims {
	uid := string(pod.UID)
	rec := &schemas.PodClaims{UID: uid, Namespace: pod.Namespace, Name: pod.Name}
	if old := m.record(uid); old != nil {
		rec.Claims = slices.Clone(old.Claims)
	}
	fail := func(err error) *schemas.PodClaims {
		rec.Prepared, rec.Error, rec.UpdatedAt = false, "prepare dynamic resources: "+err.Error(), m.now()
		if serr := store(rec); serr == nil {
			m.set(rec)
		}
		return rec
	}
	claims, err := m.validate(ctx, pod)
	if err != nil {
		return fail(err)
	}
	// The claims to prepare, now tracked (the kubelet's addPodReference and
	// syncToCheckpoint): a pod gone before its claims are prepared still
	// has them unprepared.
	byUID := map[string]*schemas.PreparedClaim{}
	for i := range rec.Claims {
		byUID[rec.Claims[i].UID] = &rec.Claims[i]
	}
	next := make([]schemas.PreparedClaim, 0, len(claims))
	for _, c := range claims {
		if old := byUID[c.UID]; old != nil && old.Prepared {
			c = *old
		} else if other := m.preparedElsewhere(uid, c.UID); other != nil {
			c.Prepared, c.Devices = true, slices.Clone(other.Devices)
		}
		next = append(next, c)
	}
	// Claims of an earlier attempt the pod no longer names stay tracked
	// until the pod is gone.
	for _, old := range rec.Claims {
		if !slices.ContainsFunc(next, func(c schemas.PreparedClaim) bool { return c.UID == old.UID }) {
			next = append(next, old)
		}
	}
	rec.Claims, rec.UpdatedAt = next, m.now()
	if err := store(rec); err != nil {
		return fail(fmt.Errorf("checkpoint ResourceClaim cache: %w", err))
	}
	m.set(rec)
	if err := m.callPrepare(ctx, rec); err != nil {
		return fail(err)
	}
	for i := range rec.Claims {
		rec.Claims[i].Prepared = true
	}
	rec.Prepared, rec.Error, rec.UpdatedAt = true, "", m.now()
	if err := store(rec); err != nil {
		return fail(fmt.Errorf("checkpoint ResourceClaim state: %w", err))
	}
	m.set(rec)
	return rec
}

// validate is the validation pass of the kubelet's prepareResources.
func (m *claimManager) validate(ctx context.Context, pod *corev1.Pod) ([]schemas.PreparedClaim, error) {
	var out []schemas.PreparedClaim
	podClaims := podutil.ResourceClaims(pod)
	for i := range podClaims {
		podClaim := &podClaims[i]
		claimName, mustCheckOwner, err := resourceclaim.Name(pod, podClaim)
		if err != nil {
			return nil, err
		}
		if claimName == nil {
			continue // no claim generated for it: nothing to do
		}
		var get claimGetter
		if m.getClaim != nil {
			get = m.getClaim()
		}
		if get == nil {
			return nil, fmt.Errorf("fetch ResourceClaim %s: no API client (node.kubeconfig)", *claimName)
		}
		claim, err := get(ctx, pod.Namespace, *claimName)
		if err != nil {
			return nil, fmt.Errorf("fetch ResourceClaim %s: %w", *claimName, err)
		}
		if mustCheckOwner {
			if err := resourceclaim.IsForPod(pod, claim, false); err != nil {
				return nil, err
			}
		}
		if !resourceclaim.IsReservedForPod(pod, claim, false) {
			return nil, fmt.Errorf("pod %s (%s) is not allowed to use ResourceClaim %s (%s)", pod.Name, pod.UID, *claimName, claim.UID)
		}
		if claim.Status.Allocation == nil {
			return nil, fmt.Errorf("ResourceClaim %s: not allocated", claim.Name)
		}
		c := schemas.PreparedClaim{PodClaimName: podClaim.Name, Name: claim.Name, UID: string(claim.UID)}
		for _, r := range claim.Status.Allocation.Devices.Results {
			if !slices.Contains(c.Drivers, r.Driver) {
				c.Drivers = append(c.Drivers, r.Driver)
			}
		}
		sort.Strings(c.Drivers)
		for _, name := range c.Drivers {
			if _, err := m.driver(name); err != nil {
				return nil, err
			}
		}
		if m.nameTakenByOther(pod, claim) {
			return nil, fmt.Errorf("old ResourceClaim with same name %s and different UID %s still exists (previous pod force-deleted?!)", claim.Name, m.otherUID(pod, claim))
		}
		out = append(out, c)
	}
	return out, nil
}

func (m *claimManager) otherUID(pod *corev1.Pod, claim *resourceapi.ResourceClaim) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range m.pods {
		if r.Namespace != pod.Namespace {
			continue
		}
		for _, c := range r.Claims {
			if c.Name == claim.Name && c.UID != string(claim.UID) {
				return c.UID
			}
		}
	}
	return ""
}

func (m *claimManager) nameTakenByOther(pod *corev1.Pod, claim *resourceapi.ResourceClaim) bool {
	return m.otherUID(pod, claim) != ""
}

// callPrepare calls NodePrepareResources on each driver for the claims of
// rec not prepared yet, in the kubelet's batches and words, and keeps the
// devices each answered.
func (m *claimManager) callPrepare(ctx context.Context, rec *schemas.PodClaims) error {
	batches := map[string][]*drapb.Claim{}
	for _, c := range rec.Claims {
		if c.Prepared {
			continue
		}
		for _, d := range c.Drivers {
			batches[d] = append(batches[d], &drapb.Claim{Namespace: rec.Namespace, Uid: c.UID, Name: c.Name})
		}
	}
	for _, driver := range sortedKeys(batches) {
		claims := batches[driver]
		client, err := m.driver(driver)
		if err != nil {
			return err
		}
		cctx, cancel := context.WithTimeout(ctx, draCallTimeout)
		resp, err := client.NodePrepareResources(cctx, &drapb.NodePrepareResourcesRequest{Claims: claims})
		cancel()
		if err != nil {
			return fmt.Errorf("NodePrepareResources: %w", err)
		}
		for claimUID, result := range resp.GetClaims() {
			c := findClaim(rec, claimUID)
			if c == nil {
				return fmt.Errorf("NodePrepareResources returned result for unknown claim UID %s", claimUID)
			}
			if result.GetError() != "" {
				return fmt.Errorf("NodePrepareResources failed for ResourceClaim %s: %s", c.Name, result.GetError())
			}
			// The driver's answer is authoritative for its devices
			// (the kubelet's resetDevices then addDevice).
			c.Devices = slices.DeleteFunc(c.Devices, func(d schemas.PreparedDevice) bool { return d.Driver == driver })
			for _, d := range result.GetDevices() {
				c.Devices = append(c.Devices, schemas.PreparedDevice{Driver: driver, Pool: d.GetPoolName(), Device: d.GetDeviceName(),
					ShareID: d.GetShareId(), Requests: d.GetRequestNames(), CDIDeviceIDs: d.GetCdiDeviceIds()})
			}
		}
		if unfinished := len(claims) - len(resp.GetClaims()); unfinished != 0 {
			return fmt.Errorf("NodePrepareResources skipped %d ResourceClaims", unfinished)
		}
	}
	return nil
}

// unprepare is the kubelet's unprepareResources for a pod gone:
// NodeUnprepareResources per driver for each of its claims no other pod
// holds. The caller forgets the pod once it succeeded; until then it is
// retried (the driver may be away).
func (m *claimManager) unprepare(ctx context.Context, uid string) error {
	rec := m.record(uid)
	if rec == nil {
		return nil
	}
	batches := map[string][]*drapb.Claim{}
	names := map[string]string{}
	for _, c := range rec.Claims {
		if m.usedElsewhere(uid, c.UID) {
			continue
		}
		names[c.UID] = c.Name
		for _, d := range c.Drivers {
			batches[d] = append(batches[d], &drapb.Claim{Namespace: rec.Namespace, Uid: c.UID, Name: c.Name})
		}
	}
	for _, driver := range sortedKeys(batches) {
		claims := batches[driver]
		client, err := m.driver(driver)
		if err != nil {
			return err
		}
		cctx, cancel := context.WithTimeout(ctx, draCallTimeout)
		resp, err := client.NodeUnprepareResources(cctx, &drapb.NodeUnprepareResourcesRequest{Claims: claims})
		cancel()
		if err != nil {
			return fmt.Errorf("NodeUnprepareResources: %w", err)
		}
		for claimUID, result := range resp.GetClaims() {
			name, ok := names[claimUID]
			if !ok {
				return fmt.Errorf("NodeUnprepareResources returned result for unknown claim UID %s", claimUID)
			}
			if result.GetError() != "" {
				return fmt.Errorf("NodeUnprepareResources failed for ResourceClaim %s: %s", name, result.GetError())
			}
		}
		if unfinished := len(claims) - len(resp.GetClaims()); unfinished != 0 {
			return fmt.Errorf("NodeUnprepareResources skipped %d ResourceClaims", unfinished)
		}
	}
	return nil
}

func findClaim(rec *schemas.PodClaims, uid string) *schemas.PreparedClaim {
	for i := range rec.Claims {
		if rec.Claims[i].UID == uid {
			return &rec.Claims[i]
		}
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
