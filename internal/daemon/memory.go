package daemon

import (
	"context"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodelet/nodelet/internal/config"
)

// GoMemory is what a process's Go runtime was set to: its soft memory
// limit in bytes (0 = none) and GOGC, and where each came from.
type GoMemory struct {
	Limit       int64
	GCPercent   int
	LimitFrom   string // "config" or "GOMEMLIMIT"
	PercentFrom string // "config" or "GOGC"
}

// ManageMemory is every nodelet process's memory policy, in one call at its
// start: ApplyGoMemory, then a release of memory each time its work dies
// down (until ctx ends). It returns the settings for the start-up log.
func ManageMemory(ctx context.Context, cfg *config.Config, component string) GoMemory {
	m := ApplyGoMemory(cfg, component)
	go releaseWhenQuiet(ctx)
	return m
}

// ApplyGoMemory sets this process's memory limit and GOGC from cfg's
// memory section for component. The environment's GOMEMLIMIT and GOGC,
// which the Go runtime has already read, win: an operator's override for
// one unit.
func ApplyGoMemory(cfg *config.Config, component string) GoMemory {
	limit, pct := cfg.Memory.LimitOf(component), cfg.Memory.GCPercent
	m := GoMemory{Limit: limit, GCPercent: pct, LimitFrom: "config", PercentFrom: "config"}
	if os.Getenv("GOMEMLIMIT") != "" {
		m.LimitFrom = "GOMEMLIMIT"
		if m.Limit = debug.SetMemoryLimit(-1); m.Limit == math.MaxInt64 {
			m.Limit = 0
		}
	} else if limit > 0 {
		debug.SetMemoryLimit(limit)
	} else {
		debug.SetMemoryLimit(math.MaxInt64)
	}
	if os.Getenv("GOGC") != "" {
		m.PercentFrom = "GOGC"
		m.GCPercent = debug.SetGCPercent(100)
		debug.SetGCPercent(m.GCPercent)
	} else {
		debug.SetGCPercent(pct)
	}
	return m
}

// Args are the settings as a start-up log line's attributes.
func (m GoMemory) Args() []any {
	limit := "none"
	if m.Limit > 0 {
		limit = resource.NewQuantity(m.Limit, resource.BinarySI).String()
	}
	return []any{"memoryLimit", limit, "memoryLimitFrom", m.LimitFrom, "gcPercent", m.GCPercent, "gcPercentFrom", m.PercentFrom}
}

// Idle release: after a burst of work a Go process keeps the heap it grew
// to (and pooled buffers, such as JetStream's 256 KiB block buffers) until
// later collections and the runtime's background scavenger, minutes later,
// give it back, and keeps mapped every page of the executable the burst
// touched. A nodelet process gives both back once its start-up is done and
// again each time a burst of work dies down (release).
const (
	idleCheckEvery = 5 * time.Second
	// startUpCheckEvery is the check period until the first release, so
	// that what start-up touched goes soon after it is over.
	startUpCheckEvery = time.Second
	// worthReleasing is how much must have been allocated since the last
	// release for another to be worth two collections. Small: the release
	// also gives back the executable's pages a burst touched, which a
	// light daemon (admission, for 50 pods) maps as much as a busy one
	// while allocating little; at rest, where a daemon allocates a few KiB
	// a period, it keeps quiet periods from releasing again and again.
	worthReleasing = 256 << 10
	// quieter: a period allocating less than the busiest period since the
	// last release divided by this is the end of a burst. (At rest a
	// runtime with 50 pods still allocates 3 MiB per period in its relists:
	// the end of a burst is a drop, not silence.)
	quieter = 4
)

// releaseWhenQuiet returns memory to the system each time the process
// goes quiet after a burst of work, until ctx ends.
func releaseWhenQuiet(ctx context.Context) {
	t := time.NewTicker(startUpCheckEvery)
	defer t.Stop()
	samples := make(chan uint64)
	go func() {
		defer close(samples)
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			select {
			case samples <- heapAllocated():
			case <-ctx.Done():
				return
			}
		}
	}()
	releaseWhenIdle(heapAllocated(), samples, func(uint64) uint64 {
		release()
		t.Reset(idleCheckEvery)
		return heapAllocated()
	})
}

// releaseWhenIdle reads the bytes allocated so far, one sample per check
// period, until samples closes; it calls release (given the sample, it
// answers the bytes allocated after it) when a period's allocation fell
// below a quarter of the busiest period's since the last release, and
// either nothing was released yet (the process's start-up is over) or
// more than worthReleasing was allocated since the last release.
func releaseWhenIdle(start uint64, samples <-chan uint64, release func(now uint64) uint64) {
	last, released := start, start
	var busiest uint64
	startedUp := false
	for now := range samples {
		period := now - last
		busiest = max(busiest, period)
		if period*quieter < busiest && (!startedUp || now-released > worthReleasing) {
			released, busiest, startedUp = release(now), 0, true
		}
		last = now
	}
}

// release gives back what a quiet process holds beyond its live heap: two
// collections, because the first only moves what sync.Pools hold aside
// and the second frees it (at rest the bus kept 4.5 MiB of JetStream block
// buffers so), the freed heap returned to the system at once
// (debug.FreeOSMemory), and the executable's pages (DropExecutablePages).
// Best effort: should the pages stay mapped, nothing else is wrong.
func release() {
	_ = DropExecutablePages()
	runtime.GC()
	debug.FreeOSMemory()
}

// heapAllocated is the bytes allocated on the heap since the process
// started.
func heapAllocated() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}
