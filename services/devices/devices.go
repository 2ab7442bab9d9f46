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
	"context"
	"encoding/json"
	"errors"
	"sort"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/daemon"
	"github.com/nodelet/nodelet/internal/pluginwatcher"
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
	synced   map[string]bool
	wake     chan struct{}
}

// Run is the daemon's main, inside the frame.
func Run(ctx context.Context, env *daemon.Env) error {
	return New(Options{Deps: env.Deps(), Dir: env.Config.DevicePluginsDir(), RegistryDir: env.Config.PluginsRegistryDir()}).Run(ctx)
}

// New builds the daemon; Run starts it.
func New(o Options) *Daemon {
	d := &Daemon{o: o, m: newManager(o.Log),
		desired: map[string]*schemas.PodDesired{}, verdicts: map[string]*schemas.AdmissionVerdict{},
		synced: map[string]bool{}, wake: make(chan struct{}, 1)}
	d.initDRA()
	return d
}

// Run restores the allocations from the bucket (the kubelet's
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
	if d.o.RegistryDir != "" {
		go pluginwatcher.New(pluginwatcher.Options{
			Dirs:     []string{d.o.RegistryDir},
			Handlers: map[string]pluginwatcher.Handler{registerapi.DRAPlugin: d.dra.plugins},
			Log:      d.o.Log.With("subsystem", "dra"),
		}).Run(ctx)
	}
	go d.runClaims(ctx)
	go bus.RunAll(ctx,
		bus.NewMirror(d.o.Bus, bus.BucketDesired, ">", func(u bus.Update[schemas.PodDesired]) {
			d.apply(bus.BucketDesired, u.Kind, func() { bus.Apply(d.desired, u) })
		}),
		bus.NewMirror(d.o.Bus, bus.BucketAdmission, ">", func(u bus.Update[schemas.AdmissionVerdict]) {
			d.apply(bus.BucketAdmission, u.Kind, func() { bus.Apply(d.verdicts, u) })
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

// restore reads the bucket until the bus answers.
func (d *Daemon) restore(ctx context.Context) error {
	for {
		res, pods, claims, err := d.load(ctx)
		if err == nil {
			d.m.restore(res, pods)
			d.dra.claims.restore(claims)
			d.o.Log.Info("Read allocations from the devices bucket", "pods", len(pods), "claimPods", len(claims))
			return nil
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
	if _, _, err := d.w.Put(ctx, bus.KeyDevices, d.m.resources()); err != nil {
		return err
	}
	d.m.mu.Lock()
	pods := make([]*schemas.PodDevices, 0, len(d.m.pods))
	for _, p := range d.m.pods {
		pods = append(pods, p)
	}
	d.m.mu.Unlock()
	for _, p := range pods {
		if _, _, err := d.w.Put(ctx, KeyPodPrefix+p.UID, p); err != nil {
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

// reconcile publishes the resources, frees the devices of pods gone or
// refused, and allocates for pods that need it, oldest first (admission's
// order of arrival). Nothing is freed or allocated before the desired pods
// and the verdicts are loaded: a pod not seen yet is not a pod gone.
func (d *Daemon) reconcile(ctx context.Context) {
	if _, _, err := d.w.Put(ctx, bus.KeyDevices, d.m.resources()); err != nil {
		d.o.SetHealth(false, "writing "+bus.BucketDevices+": "+err.Error())
		d.retryLater(ctx)
		return
	}
	d.mu.Lock()
	if !d.synced[bus.BucketDesired] || !d.synced[bus.BucketAdmission] {
		d.mu.Unlock()
		return
	}
	var gone []string
	d.m.mu.Lock()
	for uid := range d.m.pods {
		v := d.verdicts[uid]
		if d.desired[uid] == nil || (v != nil && !v.Admitted) {
			gone = append(gone, uid)
		}
	}
	d.m.mu.Unlock()
	var todo []*schemas.PodDesired
	for uid, p := range d.desired {
		v := d.verdicts[uid]
		if p.Pod == nil || (v != nil && !v.Admitted) || d.m.allocation(uid) != nil || !wantsDevices(p.Pod) {
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
		if _, err := d.w.Delete(ctx, KeyPodPrefix+uid); err != nil {
			d.o.SetHealth(false, "writing "+bus.BucketDevices+": "+err.Error())
			d.retryLater(ctx)
			return
		}
		d.m.free(uid)
		d.o.Log.Info("Freed the devices of a pod gone", "podUID", uid)
	}
	for _, p := range todo {
		rec := d.m.allocatePod(ctx, p.Pod)
		if _, _, err := d.w.Put(ctx, KeyPodPrefix+rec.UID, rec); err != nil {
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
	d.o.SetHealth(true, "")
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
