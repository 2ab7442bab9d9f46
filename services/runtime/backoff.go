package runtime

import (
	"fmt"
	"hash/fnv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"
)

// Back-off defaults: the kubelet's CrashLoopBackOff and image pull back-off.
const (
	initialBackOff = 10 * time.Second
	// backOffResetAfter: a container that failed this long after its last
	// restart (or an image whose last failed pull is this old) starts over:
	// the kubelet's crashLoopBackOff.HasExpiredFunc (600 s).
	backOffResetAfter = 10 * time.Minute
)

// backOff is an exponential back-off per key (a container of a pod, or an
// image of a pod): each failure doubles the wait, from initial up to max.
// A container's restarts follow the kubelet's doBackOff: the first failure
// restarts at once, the next ones wait 10, 20, 40, ... s counted from the
// container's exit (the e2e_node "Container restart backs off" sequence:
// restarts at 0, 0, 10, 30, 70 ... s).
type backOff struct {
	clock   clock.Clock
	initial time.Duration
	max     time.Duration
	reset   time.Duration

	mu      sync.Mutex
	entries map[string]*backOffEntry
}

type backOffEntry struct {
	// backoff is the wait of the failure at (and, for a container, of the
	// next failure until this one's restart doubles it).
	backoff time.Duration
	at      time.Time // the failure the wait counts from
	failure string    // identity of that failure (the dead container's ID)
	// restarted: failure's restart was allowed, at lastRestart (the
	// kubelet's lastUpdate, set by backOff.Next).
	restarted   bool
	lastRestart time.Time
}

func newBackOff(c clock.Clock, initial, max time.Duration) *backOff {
	if max < initial {
		max = initial
	}
	return &backOff{clock: c, initial: initial, max: max, reset: backOffResetAfter, entries: map[string]*backOffEntry{}}
}

// ContainerFailed records that container instance id of key exited at
// finished, and returns how long from now its restart must wait (0:
// restart now), as the kubelet's doBackOff: not in back-off — the first
// failure, a failure more than 10 minutes after the last restart, or one
// whose wait is over — it allows the restart and doubles the next wait
// (flowcontrol.Backoff.Next); else it returns the rest of the wait.
// Calling it again for the same id changes nothing, so every sync of a
// crashed container may ask (the kubelet's second ask after Next would
// wait the doubled back-off if the restart failed; a retried start here
// does not).
func (b *backOff) ContainerFailed(key, id string, finished time.Time) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clock.Now()
	e, ok := b.entries[key]
	switch {
	case ok && e.failure == id:
		if e.restarted {
			return 0
		}
	case !ok || finished.Sub(e.lastRestart) > b.reset:
		b.entries[key] = &backOffEntry{backoff: b.initial, at: finished, failure: id, restarted: true, lastRestart: now}
		return 0
	default:
		e.at, e.failure, e.restarted = finished, id, false
	}
	if left := b.left(e); left > 0 {
		return left
	}
	e.backoff = min(2*e.backoff, b.max)
	e.restarted, e.lastRestart = true, now
	return 0
}

// left is how long e must still wait. A failure later than now means the
// wall clock was stepped back past it (the failure's time is CRI's
// FinishedAt, wall time): the wait then counts from now, so a step back
// delays a restart by one back-off at most, not by the step. (The
// kubelet's IsInBackOffSince would wait out the whole step too.) A step
// forward only ends the wait sooner.
func (b *backOff) left(e *backOffEntry) time.Duration {
	if now := b.clock.Now(); e.at.After(now) {
		e.at = now
	}
	return max(0, e.backoff-b.clock.Since(e.at))
}

// containerBackOffKey is the kubelet's GetBackoffKey: a container's back-off
// starts over when its image or resources change. The pod's UID leads, for
// Forget.
func containerBackOffKey(pod *corev1.Pod, c *corev1.Container) string {
	h := fnv.New64a()
	h.Write([]byte(c.Image + "/" + c.Resources.String()))
	return fmt.Sprintf("%s_%s_%x", pod.UID, c.Name, h.Sum64())
}

// Failed records a failure of key now (an image pull) and returns the wait
// before the next try.
func (b *backOff) Failed(key string) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clock.Now()
	e, ok := b.entries[key]
	if !ok || now.Sub(e.at) >= b.reset {
		e = &backOffEntry{backoff: b.initial}
		b.entries[key] = e
	} else {
		e.backoff = min(2*e.backoff, b.max)
	}
	e.at = now
	return e.backoff
}

// Remaining is how long key must still wait (0: go ahead), and the back-off
// it waits for.
func (b *backOff) Remaining(key string) (time.Duration, time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, ok := b.entries[key]
	if !ok {
		return 0, 0
	}
	return b.left(e), e.backoff
}

// Reset forgets key (an image pulled at last).
func (b *backOff) Reset(key string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.entries, key)
}

// Forget drops every key with prefix (a pod that is gone).
func (b *backOff) Forget(prefix string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for k := range b.entries {
		if strings.HasPrefix(k, prefix) {
			delete(b.entries, k)
		}
	}
}
