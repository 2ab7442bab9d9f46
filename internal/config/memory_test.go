package config

import "testing"

func TestGoMemory(t *testing.T) {
	cfg, err := LoadFile(writeFile(t, "memory:\n  gcPercent: 25\n  limits: {runtime: 200Mi, prober: \"0\"}\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		limit int64
	}{
		{"runtime", 200 << 20}, // configured
		{"prober", 0},          // "0": none
		{"bus", 128 << 20},     // declared default
		{"supervisor", 32 << 20},
		{"tap", 0}, // not a process: no limit
	} {
		if l, pct := cfg.Memory.LimitOf(tc.name), cfg.Memory.GCPercent; l != tc.limit || pct != 25 {
			t.Errorf("%s: %d, GOGC %d; want %d, 25", tc.name, l, pct, tc.limit)
		}
	}
	if pct := Defaults().Memory.GCPercent; pct != 100 {
		t.Errorf("default GOGC %d, want 100", pct)
	}
}
