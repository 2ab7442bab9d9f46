package runtime

import (
	"context"
	"log/slog"
	"strings"
	"time"

	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/config"
)

// pleg is the kubelet's PodLifecycleEventGenerator (GenericPLEG): the
// relist, and the runtime's container events (CRI's stream, else
// containerd's task events, taskevents.go) as hints between relists. It
// wakes the pod workers directly rather than through a Watch channel:
// Run starts it, relistNow asks for a relist at once.
type pleg struct {
	cfg   *config.RuntimeConfig
	log   *slog.Logger
	clock Clock
	rs    internalapi.RuntimeService
	// runtime names the container runtime (set once Version answered).
	runtime runtimeInfo
	// view lists the pods in CRI; store and observed know pods besides.
	view     plegLister
	store    knownPods
	observed knownPods
	// metrics records each relist (nil: none).
	metrics *metrics
	// workers are woken for pods that changed (set by Daemon.Run).
	workers plegWorkers

	// wake asks for a relist at once.
	wake chan struct{}
	// exits carries container IDs whose exit an event announced.
	exits chan string
}

// plegLister lists nodelet's pods in CRI (criView).
type plegLister interface {
	all(ctx context.Context) (map[string]*podRuntime, error)
}

// knownPods are the UIDs of pods an input or output knows (store,
// observedWriter).
type knownPods interface{ uids() []string }

// plegWorkers are the pod workers the PLEG wakes (podWorkers).
type plegWorkers interface {
	Update(uid string)
	Relisted(uid string, state map[string]string)
}

func newPLEG(cfg *config.RuntimeConfig, log *slog.Logger, clk Clock, rs internalapi.RuntimeService, view plegLister, store, observed knownPods) *pleg {
	return &pleg{
		cfg: cfg, log: log, clock: clk, rs: rs, view: view, store: store, observed: observed,
		wake: make(chan struct{}, 1), exits: make(chan string, 64),
	}
}

// Start runs the relist and follows the runtime's events until ctx is
// done; run runs each of them as a goroutine of the daemon.
func (g *pleg) Start(ctx context.Context, workers plegWorkers, rt runtimeInfo, run func(func(context.Context))) {
	g.workers, g.runtime = workers, rt
	run(g.relistLoop)
	run(g.watchContainerEvents)
}

// relistLoop is the PLEG: every relistPeriod it lists nodelet's sandboxes
// and containers, compares with the last list, and wakes the worker of
// every pod whose sandboxes or containers changed (started, died, were
// removed or appeared). The first list wakes every pod CRI, the buckets
// or the observed state know, which is how a restarted nodelet-runtime
// takes over its pods.
func (g *pleg) relistLoop(ctx context.Context) {
	period := g.cfg.RelistPeriod
	if period <= 0 {
		period = time.Second
	}
	t := g.clock.NewTicker(period)
	defer t.Stop()
	var last map[string]string // sandbox or container ID → "<uid> <state>"
	failing := false
	// pending: containers an event said have exited, until a relist sees
	// them stopped or their deadline passes; retry re-lists soon while any
	// is pending.
	pending := map[string]time.Time{}
	var retry <-chan time.Time
	retryDelay := exitRetryMin
	var prevStart time.Time
	for {
		start := g.clock.Now()
		timeout := g.cfg.RuntimeRequestTimeout
		if timeout <= 0 {
			timeout = 2 * time.Minute
		}
		lctx, cancel := context.WithTimeout(ctx, timeout)
		pods, err := g.view.all(lctx)
		cancel()
		if g.metrics != nil {
			g.metrics.relisted(start, prevStart, g.clock.Now())
		}
		prevStart = start
		switch {
		case err != nil && ctx.Err() == nil:
			if !failing {
				g.log.Error("Relist failed", "err", err)
			}
			failing = true
		case err == nil:
			if failing {
				g.log.Info("Relist works again")
			}
			failing = false
			cur := snapshot(pods)
			if last == nil {
				seen := map[string]bool{}
				for uid := range pods {
					seen[uid] = true
				}
				for _, uid := range g.store.uids() {
					seen[uid] = true
				}
				for _, uid := range g.observed.uids() {
					seen[uid] = true
				}
				for uid := range seen {
					g.workers.Update(uid)
				}
			} else {
				byPod := snapshotsByPod(cur)
				for uid := range changedPods(last, cur) {
					g.workers.Relisted(uid, byPod[uid])
				}
			}
			last = cur
			now := g.clock.Now()
			for id, until := range pending {
				if !stillRunning(cur[id]) || now.After(until) {
					delete(pending, id)
				}
			}
		}
		retry = nil
		if len(pending) > 0 {
			retry = g.clock.After(retryDelay)
			retryDelay = min(2*retryDelay, exitRetryMax)
		} else {
			retryDelay = exitRetryMin
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		case <-g.wake:
		case <-retry:
		case id := <-g.exits:
			pending[id] = g.clock.Now().Add(exitPendingFor)
		}
	}
}

// How the PLEG follows up an exit event until CRI reports the container
// stopped: re-lists after 10 ms, doubling up to 200 ms, for at most 2 s
// (then the periodic relist carries on alone).
const (
	exitRetryMin   = 10 * time.Millisecond
	exitRetryMax   = 200 * time.Millisecond
	exitPendingFor = 2 * time.Second
)

// stillRunning: a snapshot value ("<uid> <state>") of a container or
// sandbox that is still up.
func stillRunning(v string) bool {
	return strings.HasSuffix(v, " "+runtimeapi.ContainerState_CONTAINER_RUNNING.String()) || strings.HasSuffix(v, " ready")
}

// relistNow asks for a relist at once.
func (g *pleg) relistNow() {
	select {
	case g.wake <- struct{}{}:
	default:
	}
}

// snapshot is what the PLEG compares between relists: every sandbox's and
// container's ID → "<uid> <state>".
func snapshot(pods map[string]*podRuntime) map[string]string {
	out := map[string]string{}
	for _, p := range pods {
		addSnapshot(out, p)
	}
	return out
}

func addSnapshot(out map[string]string, p *podRuntime) {
	for _, sb := range p.Sandboxes {
		st := "notready"
		if sb.Ready {
			st = "ready"
		}
		out[sb.ID] = p.UID + " " + st
	}
	for _, c := range p.Containers {
		out[c.ID] = p.UID + " " + c.State.String()
	}
}

// snapshotsByPod splits a snapshot by pod UID.
func snapshotsByPod(snap map[string]string) map[string]map[string]string {
	out := map[string]map[string]string{}
	for id, v := range snap {
		uid := uidOf(v)
		if out[uid] == nil {
			out[uid] = map[string]string{}
		}
		out[uid][id] = v
	}
	return out
}

// uidOf is the pod UID of a snapshot value.
func uidOf(v string) string {
	uid, _, _ := strings.Cut(v, " ")
	return uid
}

// changedPods are the pods whose CRI state changed between two relists in
// a way worth a sync: the kubelet's isSyncPodWorthy, which leaves out
// ContainerRemoved — an exited container (or a sandbox no longer ready)
// removed, mostly by the garbage collector. Syncing a pod for it would
// only repeat the last sync (and record BackOff again for a container
// waiting out its back-off). A pod that left CRI altogether still changed:
// its worker forgets it.
func changedPods(last, cur map[string]string) map[string]bool {
	out := map[string]bool{}
	present := map[string]bool{}
	for id, v := range cur {
		present[uidOf(v)] = true
		if last[id] != v {
			out[uidOf(v)] = true
		}
	}
	for id, v := range last {
		if _, ok := cur[id]; ok {
			continue
		}
		if uid := uidOf(v); !present[uid] || !removedQuietly(v) {
			out[uid] = true
		}
	}
	return out
}

// removedQuietly says whether a snapshot value is an exited container or a
// sandbox not ready, whose removal is no event.
func removedQuietly(v string) bool {
	_, st, _ := strings.Cut(v, " ")
	return st == runtimeapi.ContainerState_CONTAINER_EXITED.String() || st == "notready"
}

// watchContainerEvents follows CRI's container event stream where the
// runtime offers it (containerd 2.x); each event wakes its pod's worker at
// once. Events are hints: the relist stays the truth. containerd 1.6
// answers Unimplemented, and the relist alone does the work.
func (g *pleg) watchContainerEvents(ctx context.Context) {
	if g.runtime.name == "containerd" && majorVersion(g.runtime.version) == 1 {
		// Known not to stream CRI events: asking would only make
		// cri-client log an error at every start.
		g.log.Info("containerd 1.x does not stream CRI container events, following its task events", "version", g.runtime.version)
		g.watchTaskEvents(ctx)
		return
	}
	ch := make(chan *runtimeapi.ContainerEventResponse, 128)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case ev := <-ch:
				if g.metrics != nil {
					g.metrics.containerEvent(ev.GetCreatedAt(), g.clock.Now())
				}
				if uid := ev.GetPodSandboxStatus().GetMetadata().GetUid(); uid != "" {
					g.workers.Update(uid)
				}
			}
		}
	}()
	// Counted as the kubelet's EventedPLEG.watchEventsChannel does: a
	// stream obtained, and every end of one that was not ours.
	connected := func(runtimeapi.RuntimeService_GetContainerEventsClient) {
		if g.metrics != nil {
			g.metrics.eventedConn.Inc()
		}
	}
	for {
		err := g.rs.GetContainerEvents(ctx, ch, connected)
		if ctx.Err() != nil {
			return
		}
		if g.metrics != nil {
			g.metrics.eventedConnErr.Inc()
		}
		if isUnimplemented(err) {
			if g.runtime.name == "containerd" {
				g.log.Info("The container runtime does not stream CRI container events, following containerd's task events")
				g.watchTaskEvents(ctx)
				return
			}
			g.log.Info("The container runtime does not stream container events, relisting only", "relistPeriod", g.cfg.RelistPeriod)
			return
		}
		g.log.Warn("Container event stream ended, reconnecting", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-g.clock.After(5 * time.Second):
		}
	}
}

// majorVersion of a runtime version string ("1.6.20~ds1", "v2.1.0"); 0
// when it has none.
func majorVersion(v string) int {
	v = strings.TrimPrefix(v, "v")
	n := 0
	for _, c := range v {
		if c < '0' || c > '9' {
			break
		}
		n = n*10 + int(c-'0')
	}
	return n
}

var (
	_ plegLister  = (*criView)(nil)
	_ knownPods   = (*store)(nil)
	_ knownPods   = (*observedWriter)(nil)
	_ plegWorkers = (*podWorkers)(nil)
)
