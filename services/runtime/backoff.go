package runtime

import (
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Back-off defaults: the kubelet's CrashLoopBackOff and image pull back-off.
const (
	initialBackOff = 10 * time.Second
	// backOffResetAfter: a container that ran this long before it failed
	// (or an image whose last failed pull is this old) starts over at the
	// initial back-off.
	backOffResetAfter = 10 * time.Minute
)

// backOff is an exponential back-off per key (a container of a pod, or an
// image of a pod): each failure doubles the wait, from initial up to max.
// The wait counts from the failure, so restarts come 10, 20, 40, ... s after
// the container exited, as the kubelet's CrashLoopBackOff.
type backOff struct {
	clock   clock.Clock
	initial time.Duration
	max     time.Duration
	reset   time.Duration

	mu      sync.Mutex
	entries map[string]*backOffEntry
}

type backOffEntry struct {
	backoff time.Duration
	at      time.Time // the failure the wait counts from
	failure string    // identity of that failure (the dead container's ID)
}

func newBackOff(c clock.Clock, initial, max time.Duration) *backOff {
	if max < initial {
		max = initial
	}
	return &backOff{clock: c, initial: initial, max: max, reset: backOffResetAfter, entries: map[string]*backOffEntry{}}
}

// ContainerFailed records that container instance id of key exited at
// finished after running since started, and returns how long from now the
// restart must wait (0: restart now). Calling it again for the same id
// changes nothing, so every sync of a crashed container may ask.
func (b *backOff) ContainerFailed(key, id string, started, finished time.Time) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, ok := b.entries[key]
	if !ok || e.failure != id {
		ranLong := !started.IsZero() && finished.Sub(started) >= b.reset
		if !ok || ranLong {
			e = &backOffEntry{backoff: b.initial}
			b.entries[key] = e
		} else {
			e.backoff = min(2*e.backoff, b.max)
		}
		e.at, e.failure = finished, id
	}
	return b.left(e)
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
