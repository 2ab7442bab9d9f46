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
	"strings"
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
