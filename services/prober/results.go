package prober

import (
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/schemas"
)

// probeKey names one probe of one container of one pod.
type probeKey struct {
	uid       string
	container string
	kind      string // schemas.ProbeLiveness, ProbeReadiness or ProbeStartup
}

// busKey is the probes-bucket key of k.
func (k probeKey) busKey() string { return k.uid + "." + k.container + "." + k.kind }

// parseBusKey splits a probes-bucket key. Pod UIDs and container names
// (DNS labels) hold no dots, so the split is unambiguous.
func parseBusKey(s string) (probeKey, bool) {
	parts := strings.Split(s, ".")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" {
		return probeKey{}, false
	}
	switch parts[2] {
	case schemas.ProbeLiveness, schemas.ProbeReadiness, schemas.ProbeStartup:
		return probeKey{uid: parts[0], container: parts[1], kind: parts[2]}, true
	}
	return probeKey{}, false
}

// resultWriter is where results go: the probes bucket's bus.Writer.
type resultWriter interface {
	Put(ctx context.Context, key string, m schemas.Message) (bool, uint64, error)
	Delete(ctx context.Context, key string) (bool, error)
}

// results is the prober's results manager (the kubelet's
// prober/results.Manager): the latest published result of every probe,
// keyed by pod, container and kind. It is the single source the workers
// read (startup gates liveness and readiness) and the bus is written from.
//
// A result is published only when its Result or ContainerID changes;
// publishing happens on one goroutine (publish) so that probe workers never
// wait for the bus and a bus outage is retried without losing the latest
// value of any key.
type results struct {
	log   *slog.Logger
	clock clock.Clock

	mu    sync.Mutex
	cur   map[probeKey]schemas.ProbeResult
	dirty map[probeKey]struct{} // changed (or removed) since last published
	wake  chan struct{}
}

func newResults(log *slog.Logger, clk clock.Clock) *results {
	return &results{
		log:   log,
		clock: clk,
		cur:   map[probeKey]schemas.ProbeResult{},
		dirty: map[probeKey]struct{}{},
		wake:  make(chan struct{}, 1),
	}
}

// seed loads what the bucket held when this process started: these results
// are the starting point, not written again unless they change.
func (r *results) seed(k probeKey, pr schemas.ProbeResult) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cur[k] = pr
}

func (r *results) get(k probeKey) (schemas.ProbeResult, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	pr, ok := r.cur[k]
	return pr, ok
}

// set records pr under k unless the stored result has the same Result and
// ContainerID (then nothing changes: the message and time of the first
// result of a run are kept). allowed is checked under the lock, so that a
// worker being stopped cannot bring back a key its manager just removed.
// It returns whether the result changed.
func (r *results) set(k probeKey, pr schemas.ProbeResult, allowed func() bool) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if allowed != nil && !allowed() {
		return false
	}
	if prev, ok := r.cur[k]; ok && prev.Result == pr.Result && prev.ContainerID == pr.ContainerID {
		return false
	}
	r.cur[k] = pr
	r.markLocked(k)
	return true
}

// remove forgets k and deletes its key from the bus.
func (r *results) remove(k probeKey) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.cur[k]; !ok {
		return
	}
	delete(r.cur, k)
	r.markLocked(k)
}

// keys lists every probe that has a result.
func (r *results) keys() []probeKey {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Collect(maps.Keys(r.cur))
}

// republish marks every result for writing: the bucket was recreated under
// us (the bus's store was wiped).
func (r *results) republish() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k := range r.cur {
		r.markLocked(k)
	}
}

func (r *results) markLocked(k probeKey) {
	r.dirty[k] = struct{}{}
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// publish writes changed results to w until ctx is done, then makes one
// last bounded attempt so that a clean stop loses nothing. health (may be
// nil) hears when publishing starts and stops failing.
func (r *results) publish(ctx context.Context, w resultWriter, health func(ok bool, msg string)) {
	const retry = time.Second
	failing := false
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_ = r.flush(fctx, w)
			cancel()
			return
		case <-r.wake:
		}
		for ctx.Err() == nil {
			err := r.flush(ctx, w)
			if err == nil {
				if failing {
					r.log.Info("Publishing probe results again")
					if health != nil {
						health(true, "")
					}
					failing = false
				}
				break
			}
			if ctx.Err() != nil {
				break
			}
			if !failing {
				r.log.Warn("Cannot publish probe results, retrying", "err", err)
				if health != nil {
					health(false, "probe results not published: "+err.Error())
				}
				failing = true
			}
			select {
			case <-ctx.Done():
			case <-r.clock.After(retry):
			}
		}
	}
}

// flush writes every dirty key once; a key that fails stays dirty.
func (r *results) flush(ctx context.Context, w resultWriter) error {
	r.mu.Lock()
	batch := make(map[probeKey]*schemas.ProbeResult, len(r.dirty))
	for k := range r.dirty {
		if pr, ok := r.cur[k]; ok {
			batch[k] = &pr
		} else {
			batch[k] = nil
		}
	}
	clear(r.dirty)
	r.mu.Unlock()

	var firstErr error
	for k, pr := range batch {
		var err error
		if pr != nil {
			_, _, err = w.Put(ctx, k.busKey(), pr)
		} else {
			_, err = w.Delete(ctx, k.busKey())
		}
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			r.mu.Lock()
			r.dirty[k] = struct{}{}
			r.mu.Unlock()
		}
	}
	return firstErr
}

// decodeStored turns a stored result (envelope data) back into a
// ProbeResult; a value that does not decode is reported and not used.
func decodeStored(data []byte) (schemas.ProbeResult, error) {
	var pr schemas.ProbeResult
	err := json.Unmarshal(data, &pr)
	return pr, err
}
