package config

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodelet/nodelet/internal/component"
)

// MemoryConfig is the Go runtime's memory settings of every nodelet
// process (the bus, the daemons and `nodelet up`), applied at its start.
// The environment's GOGC and GOMEMLIMIT, when set, win over these.
type MemoryConfig struct {
	// GCPercent is each process's GOGC: the heap grows by this percentage
	// of the live heap before the next collection. Lower keeps less garbage
	// at rest for more collections under load; -1 turns collection off
	// below the memory limit. Default: 100, Go's own: the memory a burst
	// leaves behind is returned once it is over (daemon.ManageMemory), and
	// 50 cost a tenth more CPU in bursts for 3–5 MiB less at rest
	// (docs/performance.md).
	GCPercent int `mapstructure:"gcPercent"`
	// Limits maps a process (bus, sources, admission, runtime, prober,
	// status, server, gc, supervisor) to its soft memory limit (GOMEMLIMIT,
	// a quantity such as 64Mi; "0" = none). Past it the collector runs more
	// often to stay under it; no allocation fails. A process not named keeps
	// its default. Default: bus 128Mi, runtime 96Mi, sources, status and
	// server 64Mi, admission, prober and gc 48Mi, supervisor 32Mi.
	Limits map[string]string `mapstructure:"limits"`
}

// LimitOf is the memory limit in bytes (0 = none) of component name's
// process: memory.limits, else its declared default.
func (m MemoryConfig) LimitOf(name string) int64 {
	v := m.Limits[name]
	if v == "" {
		if comp, ok := component.Get(name); ok {
			v = comp.MemoryLimit
		}
	}
	if q, err := resource.ParseQuantity(v); err == nil {
		return q.Value()
	}
	return 0
}

// memoryProcesses are the components memory.limits may name.
func memoryProcesses() []string {
	var out []string
	for _, c := range component.Declared {
		if c.MemoryLimit != "" {
			out = append(out, c.Name)
		}
	}
	sort.Strings(out)
	return out
}

func validateMemory(m MemoryConfig) error {
	if m.GCPercent < -1 || m.GCPercent == 0 {
		return &Error{Key: "memory.gcPercent", Problem: fmt.Sprintf("%d must be a positive percentage, or -1 for off", m.GCPercent)}
	}
	names := memoryProcesses()
	for name, v := range m.Limits {
		key := "memory.limits." + name
		if !slices.Contains(names, name) {
			return &Error{Key: key, Problem: fmt.Sprintf("%q is not a nodelet process (%s)", name, strings.Join(names, ", "))}
		}
		q, err := resource.ParseQuantity(v)
		if err != nil || q.Sign() < 0 {
			return &Error{Key: key, Problem: fmt.Sprintf("%q is not a size (e.g. 64Mi, or 0 for no limit)", v)}
		}
		if s := q.Value(); s != 0 && s < 8<<20 {
			return &Error{Key: key, Problem: fmt.Sprintf("%s is below 8Mi, less than a nodelet process needs to start", v)}
		}
	}
	if m.GCPercent == -1 {
		for _, name := range names {
			if m.LimitOf(name) == 0 {
				return &Error{Key: "memory.gcPercent", Problem: fmt.Sprintf("-1 (collection off) needs a memory limit for every process; %s has none", name)}
			}
		}
	}
	return nil
}
