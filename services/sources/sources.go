// Package sources is nodelet-sources: it collects the pods this node should
// run from static pod manifests (a directory or file: FILE), a manifest URL
// (URL) and kube-apiserver (pods bound to the node), merges them with the
// kubelet's PodConfig semantics, and publishes the result as the
// desired-pods bucket, the one input of the rest of the node.
//
// Each source delivers full lists. The merge tells additions, updates,
// graceful deletions, removals and status-only reconciles apart, rejects a
// pod whose namespace/name another pod already has, and keeps the object it
// first stored, so only meaningful changes reach the bucket. The bucket is
// written through bus.Writer (only what changed) and read back at start:
// a restart that finds the same pods writes nothing. The sources-ready key
// says when every configured source has delivered its first list.
//
// Static pods (FILE and URL) get the kubelet's identity and the API
// server's defaults, and are validated here, since no API server sees them.
package sources

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/daemon"
	"github.com/nodelet/nodelet/internal/kubeclient"
	"github.com/nodelet/nodelet/schemas"
)

// Run is nodelet-sources under the daemon frame.
func Run(ctx context.Context, env *daemon.Env) error {
	d, err := New(Options{Deps: env.Deps()})
	if err != nil {
		return err
	}
	return d.Run(ctx)
}

// Options are what nodelet-sources runs with.
type Options struct {
	daemon.Deps
	// Clock defaults to the real clock.
	Clock clock.WithTicker
	// NoWatch turns fsnotify off, leaving the periodic listing.
	NoWatch bool
	// OnFlush is called after each successful publish, with whether every
	// configured source had delivered its first list.
	OnFlush func(allReady bool)
}

// Daemon is nodelet-sources: the configured sources and the merger that
// publishes what they deliver.
type Daemon struct {
	o          Options
	configured []string
	runners    []func(context.Context, chan<- snapshot)
	api        *apiSource
}

// retryPeriod is how soon a failed bucket write is tried again.
const retryPeriod = time.Second

// New sets up the sources the config names.
func New(o Options) (*Daemon, error) {
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Health == nil {
		o.Health = func(bool, string) {}
	}
	cfg, log := o.Config, o.Log
	d := &Daemon{o: o}
	parser := &staticParser{nodeName: cfg.Node.Name, log: log, emit: o.Bus.Emit}
	if p := cfg.Sources.StaticPodPath; p != "" {
		fs := newFileSource(p, cfg.Sources.FileCheckFrequency, o.Clock, log, parser)
		fs.noWatch = o.NoWatch
		d.configured = append(d.configured, schemas.SourceFile)
		d.runners = append(d.runners, fs.run)
	}
	if u := cfg.Sources.ManifestURL; u != "" {
		hs := newHTTPSource(u, cfg.Sources.ManifestURLHeader, cfg.Sources.HTTPCheckFrequency, o.Clock, log, parser)
		d.configured = append(d.configured, schemas.SourceHTTP)
		d.runners = append(d.runners, hs.run)
	}
	if cfg.NodeKubeconfig() != "" {
		as := &apiSource{nodeName: cfg.Node.Name, log: log.With("source", schemas.SourceAPI)}
		as.newClient = func(ctx context.Context) (kubernetes.Interface, error) { return newAPIClient(ctx, cfg, as.log) }
		d.api = as
		d.configured = append(d.configured, schemas.SourceAPI)
		d.runners = append(d.runners, as.run)
	}
	if len(d.configured) == 0 {
		log.Warn("No pod source configured (sources.staticPodPath, sources.manifestURL, node.kubeconfig): the node runs no pods")
	}
	return d, nil
}

// Run collects and publishes until ctx is done.
func (d *Daemon) Run(ctx context.Context) error {
	o, log := d.o, d.o.Log
	if d.api != nil && !kubeclient.Bootstraps(o.Config) {
		// A kubeconfig that is there or not: a bad one stops the daemon.
		var err error
		if d.api.client, err = d.api.newClient(ctx); err != nil {
			return err
		}
	}
	configured, runners := d.configured, d.runners
	m := newMerger(o, configured)
	if err := m.restore(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}

	updates := make(chan snapshot)
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, r := range runners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r(ctx, updates)
		}()
	}

	dirty := true // publish what restore found (and drop unconfigured sources)
	var retry <-chan time.Time
	for {
		if dirty {
			if err := m.flush(ctx); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				log.Warn("Cannot publish desired pods, retrying", "err", err)
				retry = o.Clock.After(retryPeriod)
			} else {
				dirty, retry = false, nil
				if o.OnFlush != nil {
					o.OnFlush(m.allReady)
				}
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case s := <-updates:
			m.store.set(s.source, s.pods)
			dirty = true
		case <-m.reset:
			clear(m.written)
			dirty = true
		case <-retry:
			retry = nil
		}
	}
}

// merger owns the store and the two buckets sources writes.
type merger struct {
	bus        *bus.Conn
	health     func(ready bool, message string)
	log        *slog.Logger
	configured []string
	store      *store
	desired    *bus.Writer
	ready      *bus.Writer
	reset      chan struct{}

	rejected map[string]bool // source/UID of duplicates already reported
	refused  map[string]bool // UIDs the bus refused to store, reported
	// written is the gen of each entry the bucket holds as the merge has
	// it, so a flush marshals and puts only what changed since (the
	// writer would skip the rest, but only after marshalling every pod
	// of every flush). Cleared when the bucket was recreated.
	written       map[types.UID]uint64
	readyRestored bool // the bucket says these sources were all ready
	allReady      bool
}

func newMerger(o Options, configured []string) *merger {
	m := &merger{
		bus:        o.Bus,
		health:     o.Health,
		log:        o.Log,
		configured: configured,
		store:      newStore(o.Clock, o.Log),
		reset:      make(chan struct{}, 1),
		rejected:   map[string]bool{},
		written:    map[types.UID]uint64{},
	}
	// The bus's store was wiped under us: the writers forget what they
	// wrote, and the next flush puts everything again.
	onReset := func() error {
		select {
		case m.reset <- struct{}{}:
		default:
		}
		return nil
	}
	m.desired = bus.NewWriter(o.Bus, bus.BucketDesired, onReset)
	m.ready = bus.NewWriter(o.Bus, bus.BucketSources, onReset)
	return m
}

// restore loads what the bucket holds from an earlier run into the store,
// so that the sources' first lists are compared against it: unchanged pods
// are not written again, and the pods of a source that has not listed yet
// stay published until it does. It waits for the bus.
func (m *merger) restore(ctx context.Context) error {
	for {
		err := m.tryRestore(ctx)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		m.log.Warn("Cannot read the desired pods bucket yet, retrying", "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(retryPeriod):
		}
	}
}

func (m *merger) tryRestore(ctx context.Context) error {
	keys, err := m.desired.Keys(ctx)
	if err != nil {
		return err
	}
	sort.Strings(keys)
	restored := 0
	for _, k := range keys {
		data, _, ok, err := m.desired.Data(ctx, k)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		var d schemas.PodDesired
		if err := json.Unmarshal(data, &d); err != nil || d.Pod == nil || string(d.Pod.UID) != k {
			// Not something we would have written: the first flush
			// deletes it.
			m.log.Warn("Dropping unreadable desired pod from the bucket", "key", k, "err", err)
			continue
		}
		m.store.restore(d.Source, d.Pod, d.FirstSeen)
		restored++
	}
	for src := range m.store.sources {
		if !slices.Contains(m.configured, src) {
			m.store.drop(src)
		}
	}
	data, _, ok, err := m.ready.Data(ctx, bus.KeySourcesReady)
	if err != nil {
		return err
	}
	if ok {
		var r schemas.SourcesReady
		if json.Unmarshal(data, &r) == nil && r.AllReady && sameSet(r.Configured, m.configured) {
			// What the bucket holds was complete when we stopped; it stays
			// authoritative until the sources list again. Saying "not
			// ready" meanwhile would only hold the runtime back.
			m.readyRestored = true
		}
	}
	m.log.Info("Restored desired pods from the bus", "pods", restored, "sourcesReady", m.readyRestored)
	return nil
}

func sameSet(a, b []string) bool {
	x, y := slices.Clone(a), slices.Clone(b)
	slices.Sort(x)
	slices.Sort(y)
	return slices.Equal(x, y)
}

// flush publishes the merged pods: deletes what left, puts what is new or
// changed (bus.Writer skips what the bucket already holds), reports new
// duplicates, and updates the sources-ready key.
func (m *merger) flush(ctx context.Context) error {
	out, dups := m.store.merged()
	m.reportDuplicates(dups)

	keys, err := m.desired.Keys(ctx)
	if err != nil {
		return err
	}
	// One pod's failed write never holds back the others nor the ready
	// marker: failures are collected and the flush retried as a whole.
	// That the marker goes out with a write missing is safe: a pod whose
	// put failed is either new (nothing runs yet), changed (its last spec
	// stays) or leaving (it stays until its delete succeeds).
	var failed []error
	sort.Strings(keys)
	for _, k := range keys {
		if _, ok := out[types.UID(k)]; ok {
			continue
		}
		if _, err := m.desired.Delete(ctx, k); err != nil {
			failed = append(failed, err)
			continue
		}
		m.log.Info("Deleted desired pod", "podUID", k)
	}
	for uid := range m.written {
		if _, ok := out[uid]; !ok {
			delete(m.written, uid) // a pod that comes back is a new entry
		}
	}
	uids := make([]string, 0, len(out))
	for uid, e := range out {
		if gen, ok := m.written[uid]; !ok || gen != e.gen {
			uids = append(uids, string(uid))
		}
	}
	sort.Strings(uids)
	refused := map[string]bool{}
	// One round trip for the lot: a burst of manifests reaches the bus
	// together rather than one put after the other.
	entries := make([]bus.Entry, len(uids))
	for i, uid := range uids {
		e := out[types.UID(uid)]
		entries[i] = bus.Entry{Key: uid, Msg: schemas.PodDesired{Pod: e.pod, Source: e.source, FirstSeen: e.firstSeen}}
	}
	for i, r := range m.desired.PutMany(ctx, entries) {
		uid, e := uids[i], out[types.UID(uids[i])]
		wrote, rev, err := r.Wrote, r.Rev, r.Err
		if bus.IsRejected(err) {
			// Retrying cannot help (the pod is larger than the bus takes):
			// reject the pod, once, as validation would have.
			refused[uid] = true
			m.reportRefused(e, err)
			continue
		}
		if err != nil {
			failed = append(failed, err)
			continue
		}
		m.written[types.UID(uid)] = e.gen
		if wrote {
			m.log.Debug("Wrote desired pod", "pod", podKey(e.pod), "podUID", uid, "source", e.source, "revision", rev)
		}
	}
	m.refused = refused
	if err := m.publishReady(ctx); err != nil {
		failed = append(failed, err)
	}
	return errors.Join(failed...)
}

// reportRefused emits the rejection of a pod the bus refused to store,
// once while it stays refused.
func (m *merger) reportRefused(e *entry, err error) {
	uid := string(e.pod.UID)
	if m.refused[uid] {
		return
	}
	m.log.Warn("Rejected pod the bus cannot store", "pod", podKey(e.pod), "podUID", uid, "source", e.source, "err", err)
	m.bus.Emit(schemas.Event{
		Object:  corev1.ObjectReference{Kind: "Pod", Namespace: e.pod.Namespace, Name: e.pod.Name, UID: e.pod.UID},
		Type:    corev1.EventTypeWarning,
		Reason:  ReasonFailedValidation,
		Message: fmt.Sprintf("Pod %s from source %s cannot be stored on the bus, ignoring it: %v", podKey(e.pod), e.source, err),
	})
}

func (m *merger) reportDuplicates(dups []duplicate) {
	now := map[string]bool{}
	for _, d := range dups {
		key := d.entry.source + "/" + string(d.entry.pod.UID)
		now[key] = true
		if m.rejected[key] {
			continue
		}
		p := d.entry.pod
		m.log.Warn("Pod failed validation due to duplicate pod name, ignoring", "pod", podKey(p), "podUID", p.UID,
			"source", d.entry.source, "keptUID", d.by.pod.UID, "keptSource", d.by.source)
		m.bus.Emit(schemas.Event{
			Object:  corev1.ObjectReference{Kind: "Pod", Namespace: p.Namespace, Name: p.Name, UID: p.UID},
			Type:    corev1.EventTypeWarning,
			Reason:  ReasonFailedValidation,
			Message: duplicateMessage(d),
		})
	}
	m.rejected = now
}

func (m *merger) publishReady(ctx context.Context) error {
	ready := []string{}
	for _, src := range m.configured {
		if m.store.seen[src] {
			ready = append(ready, src)
		}
	}
	all := len(ready) == len(m.configured)
	if all && !m.allReady {
		m.log.Info("All pod sources ready", "sources", m.configured)
	}
	m.allReady = all
	if all {
		m.health(true, "")
	} else {
		m.health(true, "waiting for the first list of: "+strings.Join(missing(m.configured, ready), ", "))
		if m.readyRestored {
			return nil
		}
	}
	configured := append([]string{}, m.configured...)
	_, _, err := m.ready.Put(ctx, bus.KeySourcesReady, schemas.SourcesReady{Configured: configured, Ready: ready, AllReady: all})
	if err != nil {
		return fmt.Errorf("publish sources ready: %w", err)
	}
	return nil
}

func missing(all, have []string) []string {
	var out []string
	for _, s := range all {
		if !slices.Contains(have, s) {
			out = append(out, s)
		}
	}
	return out
}
