package daemon

import (
	"math"
	"os"
	"runtime/debug"

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

// ApplyGoMemory sets this process's memory limit and GOGC from cfg's
// memory section for component. The environment's GOMEMLIMIT and GOGC,
// which the Go runtime has already read, win: an operator's override for
// one unit.
func ApplyGoMemory(cfg *config.Config, component string) GoMemory {
	limit, pct := cfg.GoMemory(component)
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
