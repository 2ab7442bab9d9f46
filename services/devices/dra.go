package devices

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/kubeclient"
	"github.com/nodelet/nodelet/schemas"
)

// KeyClaimsPrefix starts the key of a pod's DRA record: claims.<uid>.
const KeyClaimsPrefix = "claims."

// Prepare retries: a pod whose claims cannot be prepared is tried again
// after prepareRetryMin, doubling up to prepareRetryMax (the kubelet
// retries at each sync of the pod), and at once when a driver registers.
const (
	prepareRetryMin = time.Second
	prepareRetryMax = 10 * time.Second
)

// draState is the DRA half of the daemon.
type draState struct {
	plugins *draPlugins
	claims  *claimManager
	health  *healthCache
	client  atomic.Pointer[kubernetes.Interface]
	wake    chan struct{}
	// retry: when each pod not prepared (or not unprepared) is due again.
	retry map[string]retryState

	// fileMu guards checkpointed, the content of DRACheckpointFile as
	// last written.
	fileMu       sync.Mutex
	checkpointed []byte
}

type retryState struct {
	at    time.Time
	delay time.Duration
}

func (d *Daemon) initDRA() {
	s := &draState{plugins: newDRAPlugins(d.o.Log.With("subsystem", "dra")), health: newHealthCache(d.o.Log.With("subsystem", "dra-health")),
		wake: make(chan struct{}, 1), retry: map[string]retryState{}}
	s.plugins.health = s.health
	if d.o.Client != nil {
		s.client.Store(&d.o.Client)
	}
	s.claims = newClaimManager(d.o.Log.With("subsystem", "dra"), func() claimGetter {
		c := s.client.Load()
		if c == nil {
			return nil
		}
		return func(ctx context.Context, ns, name string) (*resourceapi.ResourceClaim, error) {
			return (*c).ResourceV1().ResourceClaims(ns).Get(ctx, name, metav1.GetOptions{})
		}
	}, s.plugins.get)
	d.dra = s
}

// connectAPI makes the API client from node.kubeconfig, retrying until
// it can (as nodelet-admission's nodeClient).
func (d *Daemon) connectAPI(ctx context.Context) {
	for ctx.Err() == nil {
		rc, err := kubeclient.RESTConfig(ctx, d.o.Config, d.o.Log)
		if err == nil {
			rc.UserAgent = "nodelet-devices"
			var c kubernetes.Interface
			if c, err = kubernetes.NewForConfig(rc); err == nil {
				d.dra.client.Store(&c)
				d.wakeClaims()
				return
			}
		}
		d.o.Log.Warn("No API client to read ResourceClaims yet, will retry", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Second):
		}
	}
}

// apiClient is the API client once there is one, else nil.
func (d *Daemon) apiClient() kubernetes.Interface {
	if c := d.dra.client.Load(); c != nil {
		return *c
	}
	return nil
}

func (d *Daemon) wakeClaims() {
	select {
	case d.dra.wake <- struct{}{}:
	default:
	}
}

// runClaims prepares and unprepares claims until ctx ends: its own loop,
// as a driver call may take the kubelet's 45 seconds and device plugin
// allocation must not wait for it.
func (d *Daemon) runClaims(ctx context.Context) {
	for {
		next := d.reconcileClaims(ctx)
		var timer <-chan time.Time
		if !next.IsZero() {
			timer = time.After(time.Until(next))
		}
		select {
		case <-ctx.Done():
			return
		case <-d.dra.wake:
		case <-d.dra.plugins.changed:
			clear(d.dra.retry) // a driver came: every waiting pod is due
		case <-timer:
		}
	}
}

// reconcileClaims unprepares the claims of pods no longer active and
// prepares those of admitted pods (PrepareResources, which the kubelet
// calls in SyncPod right before the sandbox). It returns when it wants to
// run again.
//
// A pod is unprepared once it is terminated, not only once it is gone:
// the kubelet calls UnprepareDynamicResources in SyncTerminatingPod, after
// every container stopped and before the pod's terminal status is
// reported, and podResourcesAreReclaimed holds the pod's deletion until
// then (PodMightNeedToUnprepareResources). Terminated is the device
// manager's rule too (podutil.Inactive: the runtime reports it
// terminated, or a terminal phase, or every app container done for good
// under its restart policy); a pod refused by admission holds nothing
// either. A pod missing from the desired bucket is unprepared only once
// the sources are ready (the kubelet's reconcileLoop over activePods waits
// for sourcesReady.AllReady): after a restart or a wipe of the bus's store
// the bucket fills again only then. A claim another pod's record still
// names stays prepared (unprepare skips it).
func (d *Daemon) reconcileClaims(ctx context.Context) time.Time {
	d.mu.Lock()
	if !d.synced[bus.BucketDesired] || !d.synced[bus.BucketAdmission] || !d.synced[bus.BucketObserved] {
		d.mu.Unlock()
		return time.Time{}
	}
	var gone, missing []string
	for _, uid := range d.dra.claims.uids() {
		p := d.desired[uid]
		if p == nil || p.Pod == nil {
			if d.sources != nil && d.sources.AllReady {
				missing = append(missing, uid)
			}
			continue
		}
		if !d.active(uid) {
			gone = append(gone, uid)
		}
	}
	var todo []*corev1.Pod
	for uid, p := range d.desired {
		v := d.verdicts[uid]
		if p.Pod == nil || v == nil || !v.Admitted || !wantsClaims(p.Pod) || p.Pod.DeletionTimestamp != nil || !d.active(uid) {
			continue
		}
		if r := d.dra.claims.record(uid); r != nil && r.Prepared {
			continue
		}
		todo = append(todo, p.Pod)
	}
	d.mu.Unlock()
	now := time.Now()
	for _, uid := range missing {
		if !d.due(uid, now) {
			continue
		}
		if !d.confirmGone(ctx, uid) {
			d.failed(uid, now)
			continue
		}
		gone = append(gone, uid)
	}
	for _, uid := range gone {
		if !d.due(uid, now) {
			continue
		}
		if err := d.dra.claims.unprepare(ctx, uid); err != nil {
			d.o.Log.Error("Failed to unprepare dynamic resources", "podUID", uid, "err", err)
			d.failed(uid, now)
			continue
		}
		if err := d.dropClaims(ctx, uid); err != nil {
			d.o.Log.Error("Failed to checkpoint ResourceClaim state", "podUID", uid, "err", err)
			d.failed(uid, now)
			continue
		}
		delete(d.dra.retry, uid)
		d.o.Log.Info("Unprepared the resource claims of a pod no longer active", "podUID", uid)
	}
	for _, pod := range todo {
		uid := string(pod.UID)
		if !d.due(uid, now) {
			continue
		}
		rec := d.dra.claims.prepare(ctx, pod, func(r *schemas.PodClaims) error {
			return d.storeClaims(ctx, r)
		})
		podRef := pod.Namespace + "/" + pod.Name
		if rec.Prepared {
			delete(d.dra.retry, uid)
			d.o.Log.Info("Prepared dynamic resources", "pod", podRef, "podUID", uid, "claims", len(rec.Claims))
			continue
		}
		d.o.Log.Error("Failed to prepare dynamic resources", "pod", podRef, "podUID", uid, "err", rec.Error)
		d.failed(uid, now)
	}
	var next time.Time
	for _, r := range d.dra.retry {
		if next.IsZero() || r.at.Before(next) {
			next = r.at
		}
	}
	return next
}

func (d *Daemon) due(uid string, now time.Time) bool {
	r, ok := d.dra.retry[uid]
	return !ok || !now.Before(r.at)
}

func (d *Daemon) failed(uid string, now time.Time) {
	r := d.dra.retry[uid]
	r.delay = min(max(2*r.delay, prepareRetryMin), prepareRetryMax)
	r.at = now.Add(r.delay)
	d.dra.retry[uid] = r
}

// decodeClaims reads a stored claims.<uid> record back.
func decodeClaims(key string, data []byte) (*schemas.PodClaims, error) {
	var p schemas.PodClaims
	if err := json.Unmarshal(data, &p); err != nil {
		return nil, err
	}
	if KeyClaimsPrefix+p.UID != key || !strings.HasPrefix(key, KeyClaimsPrefix) {
		return nil, errBadKey(key, p.UID)
	}
	return &p, nil
}

// saveClaimsCheckpoint writes DRACheckpointFile with the records the claim
// manager holds, rec in place of its pod's (when not nil) and without pod
// drop's (when not ""): the kubelet's syncToCheckpoint. Nothing is written
// when the content did not change.
func (d *Daemon) saveClaimsCheckpoint(rec *schemas.PodClaims, drop string) error {
	var recs []*schemas.PodClaims
	for _, uid := range d.dra.claims.uids() {
		if uid == drop || rec != nil && uid == rec.UID {
			continue
		}
		if r := d.dra.claims.record(uid); r != nil {
			recs = append(recs, r)
		}
	}
	if rec != nil {
		recs = append(recs, rec)
	}
	b, err := encodeDRACheckpoint(recs)
	if err != nil {
		return err
	}
	s := d.dra
	s.fileMu.Lock()
	defer s.fileMu.Unlock()
	if bytes.Equal(b, s.checkpointed) {
		return nil
	}
	// At start the directory may not be there yet (the registrar makes
	// it, as the Registration socket's).
	if err := os.MkdirAll(d.o.Dir, 0o750); err != nil {
		return fmt.Errorf("writing the DRA manager checkpoint: %w", err)
	}
	if err := writeFileAtomic(filepath.Join(d.o.Dir, DRACheckpointFile), b); err != nil {
		return fmt.Errorf("writing the DRA manager checkpoint: %w", err)
	}
	s.checkpointed = b
	return nil
}

// storeClaims checkpoints a pod's record: the file first, then the bucket
// (what nodelet-runtime may act on is never missing from the file).
func (d *Daemon) storeClaims(ctx context.Context, rec *schemas.PodClaims) error {
	if err := d.saveClaimsCheckpoint(rec, ""); err != nil {
		return err
	}
	_, _, err := d.w.Put(ctx, KeyClaimsPrefix+rec.UID, rec)
	return err
}

// dropClaims forgets a pod whose claims are unprepared: out of the file,
// then out of the bucket, then out of the claim manager. A crash in
// between leaves the record in the bucket alone, which the file (read
// first at start) overrules; or in both, and the pod is unprepared again
// (NodeUnprepareResources is idempotent).
func (d *Daemon) dropClaims(ctx context.Context, uid string) error {
	if err := d.saveClaimsCheckpoint(nil, uid); err != nil {
		return err
	}
	if _, err := d.w.Delete(ctx, KeyClaimsPrefix+uid); err != nil {
		return err
	}
	d.dra.claims.forget(uid)
	return nil
}
