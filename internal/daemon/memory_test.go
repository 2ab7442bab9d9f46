package daemon

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os/exec"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/bus/bustest"
	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/internal/testenv"
)

func TestApplyGoMemory(t *testing.T) {
	oldLimit, oldPct := debug.SetMemoryLimit(-1), debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetMemoryLimit(oldLimit); debug.SetGCPercent(oldPct) })

	cfg := config.Defaults()
	cfg.Memory = config.MemoryConfig{GCPercent: 30, Limits: map[string]string{"gc": "40Mi", "prober": "0"}}
	for _, tc := range []struct {
		component string
		limit     int64
	}{
		{"gc", 40 << 20},      // configured
		{"runtime", 96 << 20}, // its declared default
		{"prober", 0},         // "0": none
	} {
		m := ApplyGoMemory(cfg, tc.component)
		got := debug.SetMemoryLimit(-1)
		if tc.limit == 0 && got != math.MaxInt64 || tc.limit != 0 && got != tc.limit || m.Limit != tc.limit {
			t.Errorf("%s: runtime limit %d, reported %d; want %d", tc.component, got, m.Limit, tc.limit)
		}
		if pct := debug.SetGCPercent(100); pct != 30 || m.GCPercent != 30 {
			t.Errorf("%s: GOGC %d, reported %d; want 30", tc.component, pct, m.GCPercent)
		}
	}

	// The environment wins: the runtime read it at start, the config is not applied.
	t.Setenv("GOMEMLIMIT", "100MiB")
	t.Setenv("GOGC", "70")
	debug.SetMemoryLimit(100 << 20)
	debug.SetGCPercent(70)
	m := ApplyGoMemory(cfg, "gc")
	if m.Limit != 100<<20 || m.LimitFrom != "GOMEMLIMIT" || m.GCPercent != 70 || m.PercentFrom != "GOGC" {
		t.Fatalf("with the environment set: %+v", m)
	}
	if got := debug.SetMemoryLimit(-1); got != 100<<20 {
		t.Fatalf("config applied over GOMEMLIMIT: %d", got)
	}
}

// TestDaemonProcessMemoryAndProfiles: a real daemon process takes its
// memory settings from the config (or GOMEMLIMIT), says so when it starts,
// and serves the Go runtime's profiles on its metrics socket.
func TestDaemonProcessMemoryAndProfiles(t *testing.T) {
	b := bustest.Start(t)
	cfgPath := writeConfig(t, fmt.Sprintf("node:\n  stateDir: %s\nbus:\n  listen: %s\nmemory:\n  gcPercent: 30\n  limits:\n    admission: 40Mi\n",
		b.StateDir, strings.TrimPrefix(b.URL, "nats://")))
	bin := testenv.MustDaemonBinary(t, "admission")

	for _, tc := range []struct {
		env  []string
		want []string
	}{
		{nil, []string{"memoryLimit=40Mi", "memoryLimitFrom=config", "gcPercent=30"}},
		{[]string{"GOMEMLIMIT=50MiB"}, []string{"memoryLimit=50Mi", "memoryLimitFrom=GOMEMLIMIT", "gcPercent=30"}},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		cmd := exec.CommandContext(ctx, bin, "--config", cfgPath)
		cmd.Env = append(cmd.Environ(), tc.env...)
		stderr, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		started := waitLine(t, stderr, "msg=Started")
		for _, w := range tc.want {
			if !strings.Contains(started, w) {
				t.Errorf("env %v: start line %q lacks %s", tc.env, started, w)
			}
		}
		sock := MetricsSocket(b.StateDir, bus.Admission)
		c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}}}
		resp, err := c.Get("http://daemon/debug/pprof/heap?debug=1")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "# HeapInuse") {
			t.Fatalf("heap profile: %s %.200q", resp.Status, body)
		}
		cancel()
		_ = cmd.Wait()
	}
}

// waitLine reads r until a line contains s and returns it; the rest of r
// is drained so the process never blocks on its stderr.
func waitLine(t *testing.T, r io.Reader, s string) string {
	t.Helper()
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(r)
		found := false
		for sc.Scan() {
			if !found && strings.Contains(sc.Text(), s) {
				found = true
				lines <- sc.Text()
			}
		}
		close(lines)
	}()
	select {
	case l, ok := <-lines:
		if !ok {
			t.Fatalf("the process ended without a line containing %q", s)
		}
		return l
	case <-time.After(time.Minute):
		t.Fatalf("no line containing %q within a minute", s)
	}
	return ""
}

func TestReleaseWhenIdleDecides(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		name    string
		samples []uint64 // allocated at the start, then at each check
		want    int      // releases
	}{
		{"quiet from the start", []uint64{0, mib / 2, mib}, 0},
		{"a burst, then quiet", []uint64{0, 20 * mib, 40 * mib, 40*mib + mib/2, 40*mib + mib/2 + 1000}, 1},
		{"still busy", []uint64{0, 20 * mib, 40 * mib, 60 * mib}, 0},
		{"two bursts", []uint64{0, 20 * mib, 20*mib + 100, 40 * mib, 40*mib + 100}, 2},
		{"start-up, then quiet", []uint64{0, 2 * mib, 2*mib + 100, 2*mib + 200}, 1},
		{"start-up, then small work never worth it", []uint64{0, 3 * mib, 3*mib + 10, 3*mib + 100<<10, 3*mib + 100<<10 + 10}, 1},
		{"start-up, then a small burst", []uint64{0, 3 * mib, 3*mib + 10, 4 * mib, 4*mib + 10}, 2},
		// A runtime's relists at rest: 3 MiB a period after the burst.
		{"a burst, then steady work", []uint64{0, 30 * mib, 33 * mib, 36 * mib, 39 * mib, 42 * mib, 45 * mib}, 1},
		{"steady work alone", []uint64{0, 3 * mib, 6 * mib, 9 * mib, 12 * mib, 15 * mib}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ch := make(chan uint64, len(tc.samples))
			for _, s := range tc.samples[1:] {
				ch <- s
			}
			close(ch)
			releases := 0
			releaseWhenIdle(tc.samples[0], ch, func(now uint64) uint64 { releases++; return now })
			if releases != tc.want {
				t.Fatalf("%d releases, want %d", releases, tc.want)
			}
		})
	}
}

// TestRelease: what releaseWhenQuiet does on a quiet process: two
// forced collections, which empty a sync.Pool, the freed heap given back
// to the system, and the executable's read-only pages unmapped.
func TestRelease(t *testing.T) {
	read := func(name string) uint64 {
		s := []metrics.Sample{{Name: name}}
		metrics.Read(s)
		return s[0].Value.Uint64()
	}
	garbage := make([][]byte, 0, 64)
	for range 64 {
		garbage = append(garbage, make([]byte, 256<<10))
	}
	garbage = nil // 16 MiB to collect
	var pool sync.Pool
	pool.Put(new([256 << 10]byte))
	touchExecutable(t)
	exeBefore := exeRSS(t)
	forced := read("/gc/cycles/forced:gc-cycles")

	release()

	if got := read("/gc/cycles/forced:gc-cycles") - forced; got != 2 {
		t.Fatalf("%d forced collections, want 2", got)
	}
	if b := pool.Get(); b != nil {
		t.Fatal("a pooled buffer outlived the release")
	}
	// The race detector's runtime keeps a few MiB free of its own, and
	// what earlier tests left running allocates meanwhile (4.3 MiB seen on
	// a loaded machine); the 16 MiB of garbage kept would be far more.
	if free := read("/memory/classes/heap/free:bytes"); free > 8<<20 {
		t.Fatalf("%d bytes of free heap kept from the system after the release", free)
	}
	if exeAfter := exeRSS(t); exeAfter*2 > exeBefore {
		t.Fatalf("executable's resident read-only pages: %d kB before, %d kB after; want at most half", exeBefore, exeAfter)
	}
}
