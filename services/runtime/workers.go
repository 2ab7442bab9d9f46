package runtime

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// syncResult is what one sync of a pod asks of its worker.
type syncResult struct {
	// RequeueAfter > 0 syncs the pod again after that long (a back-off
	// ends, a retry), unless something else syncs it first.
	RequeueAfter time.Duration
	// Forget drops the worker: the pod is gone for good.
	Forget bool
	// Settled is the pod's CRI state (as the PLEG snapshots it) when the
	// sync left nothing to do in it; nil when it did not.
	Settled map[string]string
}

// podWorkers runs one worker per pod UID, as the kubelet's pod workers do:
// syncs of one pod never overlap, different pods sync in parallel, and
// updates that arrive while a sync runs coalesce into one more sync (which
// reads the newest state when it starts).
type podWorkers struct {
	ctx   context.Context
	clock clock.WithDelayedExecution
	sync  func(ctx context.Context, uid string) syncResult

	mu      sync.Mutex
	workers map[string]*podWorker
	wg      sync.WaitGroup
}

type podWorker struct {
	running bool
	pending bool
	timer   clock.Timer
	due     time.Time
	// settled is the last sync's Settled.
	settled map[string]string
	// relisted is the state a relist saw while a sync ran (nil: none).
	relisted map[string]string
}

func newPodWorkers(ctx context.Context, clk clock.WithDelayedExecution, fn func(context.Context, string) syncResult) *podWorkers {
	return &podWorkers{ctx: ctx, clock: clk, sync: fn, workers: map[string]*podWorker{}}
}

// Update asks for a sync of uid: now if its worker is idle, else once the
// running sync is done.
func (p *podWorkers) Update(uid string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.updateLocked(uid)
}

// Relisted asks for a sync of uid because the PLEG saw its CRI state
// change to state, unless its last sync left it settled in that very
// state: the change was that sync's own doing (a sandbox it created, a
// container it started) and another sync would find nothing to do. The
// kubelet syncs on every PLEG event; this spares two CRI list calls and
// a pass per event a pod's own start causes. While a sync runs, the
// decision waits for its result.
func (p *podWorkers) Relisted(uid string, state map[string]string) {
	if state == nil {
		state = map[string]string{} // the pod is gone from CRI
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	w := p.workers[uid]
	switch {
	case w == nil:
	case w.running:
		if !w.pending {
			w.relisted = state
		}
		return
	case w.settled != nil && maps.Equal(w.settled, state):
		return
	}
	p.updateLocked(uid)
}

func (p *podWorkers) updateLocked(uid string) {
	if p.ctx.Err() != nil {
		return
	}
	w := p.workers[uid]
	if w == nil {
		w = &podWorker{}
		p.workers[uid] = w
	}
	if w.running {
		w.pending = true
		return
	}
	w.running = true
	p.wg.Add(1)
	go p.loop(uid, w)
}

func (p *podWorkers) loop(uid string, w *podWorker) {
	defer p.wg.Done()
	for {
		res := p.sync(p.ctx, uid)
		p.mu.Lock()
		if res.RequeueAfter > 0 && !res.Forget {
			p.requeueLocked(uid, w, res.RequeueAfter)
		}
		w.settled = res.Settled
		if w.relisted != nil && (w.settled == nil || !maps.Equal(w.settled, w.relisted)) {
			w.pending = true
		}
		w.relisted = nil
		if !w.pending || p.ctx.Err() != nil {
			w.running = false
			if res.Forget && p.workers[uid] == w {
				if w.timer != nil {
					w.timer.Stop()
				}
				delete(p.workers, uid)
			}
			p.mu.Unlock()
			return
		}
		w.pending = false
		p.mu.Unlock()
	}
}

// requeueLocked makes sure uid syncs again within d. Callers hold p.mu.
func (p *podWorkers) requeueLocked(uid string, w *podWorker, d time.Duration) {
	due := p.clock.Now().Add(d)
	if w.timer != nil && !w.due.IsZero() && !w.due.After(due) && w.due.After(p.clock.Now()) {
		return // an earlier resync is already set
	}
	if w.timer != nil {
		w.timer.Stop()
	}
	w.due = due
	w.timer = p.clock.AfterFunc(d, func() { p.Update(uid) })
}

// Known lists the UIDs that have a worker.
func (p *podWorkers) Known() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Collect(maps.Keys(p.workers))
}

// Wait returns once every running sync has returned (after ctx is done).
func (p *podWorkers) Wait() {
	p.wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, w := range p.workers {
		if w.timer != nil {
			w.timer.Stop()
		}
	}
}
