// Package devices is nodelet-devices: the kubelet's device manager
// (pkg/kubelet/cm/devicemanager). It serves the device plugin Registration
// service on <node.rootDir>/device-plugins/kubelet.sock, follows each
// plugin's ListAndWatch, allocates devices to each pod before admission
// decides it, and publishes the resources and every allocation in the
// devices bucket. It is the kubelet's DRA manager (pkg/kubelet/cm/dra) too:
// DRA drivers register through <node.rootDir>/plugins_registry, and it
// prepares each admitted pod's ResourceClaims with them before
// nodelet-runtime may create the pod's sandbox (README.md).
package devices

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/daemon"
	"github.com/nodelet/nodelet/internal/pluginwatcher"
	"github.com/nodelet/nodelet/internal/podutil"
	"github.com/nodelet/nodelet/schemas"
)

// KeyPodPrefix starts the key of a pod's allocation: pods.<uid>.
const KeyPodPrefix = "pods."

const retryPeriod = time.Second

// Options build a Daemon.
type Options struct {
	daemon.Deps
	// Dir is <node.rootDir>/device-plugins.
	Dir string
	// RegistryDir is <node.rootDir>/plugins_registry, where DRA drivers
	// register; "" registers none.
	RegistryDir string
	// Client reads ResourceClaims; nil makes one from node.kubeconfig
	// when it is set (else no claim can be prepared).
	Client kubernetes.Interface
}

// Daemon is a running nodelet-devices.
type Daemon struct {
	o   Options
	m   *manager
	reg *registrar
	w   *bus.Writer
	dra *draState

	mu       sync.Mutex
	desired  map[string]*schemas.PodDesired
	verdicts map[string]*schemas.AdmissionVerdict
	observed map[string]*schemas.PodObserved
	sources  *schemas.SourcesReady
	synced   map[string]bool
	wake     chan struct{}

	// checkpointed is the content of CheckpointFile as last written.
	checkpointed []byte
}

// Run is the daemon's main, inside the frame.
func Run(ctx context.Context, env *daemon.Env) error {
	return New(Options{Deps: env.Deps(), Dir: env.Config.DevicePluginsDir(), RegistryDir: env.Config.PluginsRegistryDir()}).Run(ctx)
}

// New builds the daemon; Run starts it.
func New(o Options) *Daemon {
	d := &Daemon{o: o, m: newManager(o.Log),
		desired: map[string]*schemas.PodDesired{}, verdicts: map[string]*schemas.AdmissionVerdict{},
		observed: map[string]*schemas.PodObserved{}, synced: map[string]bool{}, wake: make(chan struct{}, 1)}
	d.initDRA()
	return d
}

// Run restores the allocations from its checkpoint (the kubelet's
// readCheckpoint), serves the registration socket, and allocates and frees
// as pods come and go, until ctx ends.
func (d *Daemon) Run(ctx context.Context) error {
	d.o.SetHealth(false, "loading allocations from "+bus.BucketDevices)
	d.w = bus.NewWriter(d.o.Bus, bus.BucketDevices, d.rewriteAll)
	if err := d.restore(ctx); err != nil {
		return err
	}
	d.reg = newRegistrar(ctx, d.o.Dir, d.m, d.o.Log)
	if err := d.reg.start(); err != nil {
		return err
	}
	defer d.reg.stop()
	defer d.dra.plugins.close()
	if d.o.Client == nil && d.o.Config != nil && d.o.Config.NodeKubeconfig() != "" {
		go d.connectAPI(ctx)
	}
	if d.o.RegistryDir != "" && d.o.Config != nil && d.o.Config.Node.Name != "" {
		w := newSliceWiper(ctx, d.o.Log.With("subsystem", "dra"), d.o.Config.Node.Name, d.apiClient, d.dra.plugins.usable)
		d.dra.plugins.mu.Lock()
		d.dra.plugins.wiper = w
		d.dra.plugins.mu.Unlock()
		w.start()
	}
	if d.o.RegistryDir != "" {
		go pluginwatcher.New(pluginwatcher.Options{
			Dirs:     []string{d.o.RegistryDir},
			Handlers: map[string]pluginwatcher.Handler{registerapi.DRAPlugin: d.dra.plugins},
			Log:      d.o.Log.With("subsystem", "dra"),
		}).Run(ctx)
	}
	go d.runClaims(ctx)
	go d.runHealth(ctx)
	go bus.RunAll(ctx,
		bus.NewMirror(d.o.Bus, bus.BucketDesired, ">", func(u bus.Update[schemas.PodDesired]) {
			d.apply(bus.BucketDesired, u.Kind, func() { bus.Apply(d.desired, u) })
		}),
		bus.NewMirror(d.o.Bus, bus.BucketAdmission, ">", func(u bus.Update[schemas.AdmissionVerdict]) {
			d.apply(bus.BucketAdmission, u.Kind, func() { bus.Apply(d.verdicts, u) })
		}),
		bus.NewMirror(d.o.Bus, bus.BucketObserved, ">", func(u bus.Update[schemas.PodObserved]) {
			d.apply(bus.BucketObserved, u.Kind, func() { bus.Apply(d.observed, u) })
		}),
		bus.NewMirror(d.o.Bus, bus.BucketSources, bus.KeySourcesReady, func(u bus.Update[schemas.SourcesReady]) {
			d.apply(bus.BucketSources, u.Kind, func() {
				switch u.Kind {
				case bus.Put:
					d.sources = u.Value
				case bus.Deleted, bus.Reset:
					d.sources = nil
				}
			})
		}),
	)
	d.o.SetHealth(true, "")
	for {
		var grace <-chan time.Time
		if next := d.m.nextGraceEnd(); !next.IsZero() {
			grace = time.After(time.Until(next) + time.Second)
		}
		d.reconcile(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-d.wake:
		case <-d.m.changed:
		case <-grace:
		}
	}
}

func (d *Daemon) apply(bucket string, kind bus.UpdateKind, f func()) {
	d.mu.Lock()
	f()
	switch kind {
	case bus.Synced:
		d.synced[bucket] = true
	case bus.Reset:
		d.synced[bucket] = false
	}
	d.mu.Unlock()
	select {
	case d.wake <- struct{}{}:
	default:
	}
	d.wakeClaims()
}

// restore loads the allocations, until the bus answers: from
// CheckpointFile, which every allocation reaches before the bucket does,
// so that it holds at least what the bucket holds and outlives a wipe of
// the bus's store; from the bucket when there is no file (or a corrupt
// one: the kubelet then starts empty, the bucket is better). The bucket is
// then made to say the same.
func (d *Daemon) restore(ctx context.Context) error {
	for {
		res, pods, claims, err := d.load(ctx)
		if err == nil {
			from := bus.BucketDevices
			switch cres, cpods, cerr := readCheckpoint(d.o.Dir); {
			case cerr == nil:
				res, pods, from = cres, cpods, CheckpointFile
			case !errors.Is(cerr, errNoCheckpoint):
				d.o.Log.Error("Reading the device manager checkpoint, using the devices bucket", "path", filepath.Join(d.o.Dir, CheckpointFile), "err", cerr)
			}
			claimsFrom := bus.BucketDevices
			switch crecs, cerr := readDRACheckpoint(d.o.Dir); {
			case cerr == nil:
				claims, claimsFrom = crecs, DRACheckpointFile
			case !errors.Is(cerr, errNoCheckpoint):
				d.o.Log.Error("Reading the DRA manager checkpoint, using the devices bucket", "path", filepath.Join(d.o.Dir, DRACheckpointFile), "err", cerr)
			}
			d.m.restore(res, pods)
			d.dra.claims.restore(claims)
			// The file says what the bucket says from now on (the
			// bucket's records when there was no file).
			if err = d.saveClaimsCheckpoint(nil, ""); err == nil {
				err = d.publishAll(ctx)
			}
			if err == nil {
				d.o.Log.Info("Read allocations", "from", from, "pods", len(pods), "claimsFrom", claimsFrom, "claimPods", len(claims))
				return nil
			}
		}
		d.o.Log.Warn("Cannot read the devices bucket, retrying", "bucket", bus.BucketDevices, "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(retryPeriod):
		}
	}
}

func (d *Daemon) load(ctx context.Context) (*schemas.DeviceResources, []*schemas.PodDevices, []*schemas.PodClaims, error) {
	keys, err := d.w.Keys(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	var res *schemas.DeviceResources
	var pods []*schemas.PodDevices
	var claims []*schemas.PodClaims
	for _, k := range keys {
		data, _, ok, err := d.w.Data(ctx, k)
		if err != nil || !ok {
			continue
		}
		switch {
		case k == bus.KeyDevices:
			var r schemas.DeviceResources
			if err := json.Unmarshal(data, &r); err != nil {
				d.o.Log.Error("Ignoring stored resources that do not decode", "key", k, "err", err)
				continue
			}
			res = &r
		case strings.HasPrefix(k, KeyPodPrefix):
			var p schemas.PodDevices
			if err := json.Unmarshal(data, &p); err != nil || KeyPodPrefix+p.UID != k {
				if err == nil {
					err = errBadKey(k, p.UID)
				}
				d.o.Log.Error("Ignoring stored allocation that does not decode", "key", k, "err", err)
				continue
			}
			pods = append(pods, &p)
		case strings.HasPrefix(k, KeyClaimsPrefix):
			p, err := decodeClaims(k, data)
			if err != nil {
				d.o.Log.Error("Ignoring stored claims that do not decode", "key", k, "err", err)
				continue
			}
			claims = append(claims, p)
		}
	}
	return res, pods, claims, nil
}

func errBadKey(key, uid string) error {
	return errors.New("record under " + key + " names pod " + uid)
}

// rewriteAll puts the whole state again after the bus's store was wiped.
func (d *Daemon) rewriteAll() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return d.publishAll(ctx)
}

// publishAll makes the bucket hold the state: the resources, every pod's
// record, and no record of a pod the state does not hold.
func (d *Daemon) publishAll(ctx context.Context) error {
	if _, _, err := d.w.Put(ctx, bus.KeyDevices, d.m.resources()); err != nil {
		return err
	}
	pods := d.m.allocations()
	keys, err := d.w.Keys(ctx)
	if err != nil {
		return err
	}
	held := map[string]bool{}
	for _, p := range pods {
		held[KeyPodPrefix+p.UID] = true
	}
	for _, uid := range d.dra.claims.uids() {
		held[KeyClaimsPrefix+uid] = true
	}
	for _, k := range keys {
		if (strings.HasPrefix(k, KeyPodPrefix) || strings.HasPrefix(k, KeyClaimsPrefix)) && !held[k] {
			if _, err := d.w.Delete(ctx, k); err != nil {
				return err
			}
		}
	}
	for _, p := range pods {
		if _, _, err := d.w.Put(ctx, KeyPodPrefix+p.UID, p); err != nil {
			return err
		}
	}
	if h, _ := d.dra.health.snapshot(); h != nil {
		if _, _, err := d.w.Put(ctx, bus.KeyDRAHealth, h); err != nil {
			return err
		}
	}
	for _, uid := range d.dra.claims.uids() {
		if p := d.dra.claims.record(uid); p != nil {
			if _, _, err := d.w.Put(ctx, KeyClaimsPrefix+uid, p); err != nil {
				return err
			}
		}
	}
	return nil
}

// saveCheckpoint writes CheckpointFile when the state changed since it
// was last written: the kubelet's writeCheckpoint.
func (d *Daemon) saveCheckpoint() error {
	b, err := encodeCheckpoint(d.m.resources(), d.m.allocations())
	if err != nil || bytes.Equal(b, d.checkpointed) {
		return err
	}
	if err := writeFileAtomic(filepath.Join(d.o.Dir, CheckpointFile), b); err != nil {
		return fmt.Errorf("writing the device manager checkpoint: %w", err)
	}
	d.checkpointed = b
	return nil
}

// reconcile publishes the resources, frees the devices of pods no longer
// active (gone, refused, or finished: the kubelet's UpdateAllocatedDevices
// over its activePods), and allocates for pods that need it, oldest first
// (admission's order of arrival). Nothing is freed or allocated before the
// desired pods, the verdicts and the runtime's reports are loaded: a pod
// not seen yet is not a pod gone.
func (d *Daemon) reconcile(ctx context.Context) {
	if _, _, err := d.w.Put(ctx, bus.KeyDevices, d.m.resources()); err != nil {
		d.o.SetHealth(false, "writing "+bus.BucketDevices+": "+err.Error())
		d.retryLater(ctx)
		return
	}
	d.mu.Lock()
	if !d.synced[bus.BucketDesired] || !d.synced[bus.BucketAdmission] || !d.synced[bus.BucketObserved] {
		d.mu.Unlock()
		return
	}
	// The kubelet's UpdateAllocatedDevices frees nothing before every
	// source delivered its pods (sourcesReady.AllReady): after a restart
	// or a wipe of the bus's store the desired bucket fills again only
	// then, and a running pod missing from it is not gone.
	var gone []string
	if d.sources != nil && d.sources.AllReady {
		for _, p := range d.m.allocations() {
			if !d.active(p.UID) {
				gone = append(gone, p.UID)
			}
		}
	}
	var todo []*schemas.PodDesired
	for uid, p := range d.desired {
		if !d.active(uid) || d.m.allocation(uid) != nil || !wantsDevices(p.Pod) {
			continue
		}
		todo = append(todo, p)
	}
	d.mu.Unlock()
	sort.Slice(todo, func(i, j int) bool {
		a, b := todo[i], todo[j]
		if !a.FirstSeen.Equal(b.FirstSeen) {
			return a.FirstSeen.Before(b.FirstSeen)
		}
		return a.Pod.CreationTimestamp.Before(&b.Pod.CreationTimestamp)
	})
	for _, uid := range gone {
		if !d.confirmGone(ctx, uid) {
			continue
		}
		if _, err := d.w.Delete(ctx, KeyPodPrefix+uid); err != nil {
			d.o.SetHealth(false, "writing "+bus.BucketDevices+": "+err.Error())
			d.retryLater(ctx)
			return
		}
		d.m.free(uid)
		d.o.Log.Info("Freed the devices of a pod no longer active", "podUID", uid)
	}
	for _, p := range todo {
		rec := d.m.allocatePod(ctx, p.Pod)
		// The checkpoint first: what admission may see is never lost.
		err := d.saveCheckpoint()
		if err == nil {
			_, _, err = d.w.Put(ctx, KeyPodPrefix+rec.UID, rec)
		}
		if err != nil {
			// Not stored, not held: allocated again at the next pass.
			d.m.free(rec.UID)
			d.o.SetHealth(false, "writing "+bus.BucketDevices+": "+err.Error())
			d.retryLater(ctx)
			return
		}
		if rec.Error == "" {
			d.o.Log.Info("Allocated devices", "pod", rec.Namespace+"/"+rec.Name, "podUID", rec.UID, "containers", len(rec.Containers))
		}
	}
	if err := d.saveCheckpoint(); err != nil {
		d.o.SetHealth(false, err.Error())
		d.retryLater(ctx)
		return
	}
	d.o.SetHealth(true, "")
}

// confirmGone reads the desired bucket itself before the devices of a pod
// missing from the mirror are freed: the watches of the desired and
// sources buckets run apart, so "sources ready" may be seen before the
// pods the sources put just before it (as nodelet-runtime's confirmGone).
// A pod still desired but no longer active is freed without asking.
func (d *Daemon) confirmGone(ctx context.Context, uid string) bool {
	d.mu.Lock()
	seen := d.desired[uid] != nil
	d.mu.Unlock()
	if seen {
		return true
	}
	p, _, err := bus.Get[schemas.PodDesired](ctx, d.o.Bus, bus.BucketDesired, uid)
	if err != nil {
		d.o.Log.Warn("Cannot read desired pod, not freeing its devices yet", "podUID", uid, "err", err)
		d.retryLater(ctx)
		return false
	}
	if p != nil {
		d.retryLater(ctx)
	}
	return p == nil
}

// active is the kubelet's activePods for one pod: desired, not refused
// and not finished (podutil.Inactive: a terminal phase, or every app
// container done for good, or terminated by the runtime). Callers hold mu.
func (d *Daemon) active(uid string) bool {
	p := d.desired[uid]
	if p == nil || p.Pod == nil {
		return false
	}
	if v := d.verdicts[uid]; v != nil && !v.Admitted {
		return false
	}
	return !podutil.Inactive(p.Pod, d.observed[uid])
}

func (d *Daemon) retryLater(ctx context.Context) {
	go func() {
		select {
		case <-ctx.Done():
		case <-time.After(retryPeriod):
			select {
			case d.wake <- struct{}{}:
			default:
			}
		}
	}()
}
