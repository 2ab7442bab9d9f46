package sources

import (
	"bufio"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/internal/testenv"
)

// TestRestartWritesNothing stops the daemon (in-process: its context is
// cancelled mid-run) and starts it again with FILE, URL and API sources.
// With the same pods, the second run writes nothing at all: not a put, not
// a delete, in either bucket. Changes made while it was down are applied,
// and only those.
func TestRestartWritesNothing(t *testing.T) {
	cp := controlPlane(t)
	ns := cp.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	apiPod := createAndCleanup(ctx, t, cp.AdminClient(t), ns, boundPod("from-api", cp.NodeName))
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yaml"), podYAML("a", "busybox:1.36"))
	writeFile(t, filepath.Join(dir, "b.yaml"), podYAML("b", "busybox:1.36"))
	srv := &manifestServer{status: http.StatusOK, body: podYAML("c", "busybox:1.36")}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	h := apiHarness(t, cp, func(c *config.Config) {
		c.Sources.StaticPodPath = dir
		c.Sources.ManifestURL = ts.URL
	})
	names := []string{"a-node-1", "b-node-1", "c-node-1", "from-api"}
	h.start()
	before := h.waitNames(names...)
	h.waitAllReady()
	h.waitAllReadyFlush()
	desiredSeq, readySeq := h.lastSeq(bus.BucketDesired), h.lastSeq(bus.BucketSources)

	h.stop()
	h.start()
	h.waitAllReadyFlush()
	waitPolls(t, srv, 2)
	if s := h.lastSeq(bus.BucketDesired); s != desiredSeq {
		t.Errorf("restart with unchanged pods wrote to the desired bucket: last sequence %d → %d; %s", desiredSeq, s, describe(h.desired()))
	}
	if s := h.lastSeq(bus.BucketSources); s != readySeq {
		t.Errorf("restart wrote the sources-ready key again: last sequence %d → %d", readySeq, s)
	}
	after := h.desired()
	for _, n := range names {
		if after[n].rev != before[n].rev || !after[n].FirstSeen.Equal(before[n].FirstSeen) {
			t.Errorf("%s: revision %d → %d, first seen %v → %v", n, before[n].rev, after[n].rev, before[n].FirstSeen, after[n].FirstSeen)
		}
	}
	if after["from-api"].Pod.UID != apiPod.UID {
		t.Errorf("API pod UID %s, want %s", after["from-api"].Pod.UID, apiPod.UID)
	}

	// Down again; meanwhile a changes and b goes away.
	h.stop()
	writeFile(t, filepath.Join(dir, "a.yaml"), podYAML("a", "busybox:1.37"))
	if err := os.Remove(filepath.Join(dir, "b.yaml")); err != nil {
		t.Fatal(err)
	}
	h.start()
	got := h.waitDesired("a updated and b removed", func(m map[string]desiredEntry) bool {
		a, ok := m["a-node-1"]
		_, hasB := m["b-node-1"]
		return ok && !hasB && len(m) == 3 && a.Pod.Spec.Containers[0].Image == "busybox:1.37"
	})
	for _, n := range []string{"c-node-1", "from-api"} {
		if got[n].rev != before[n].rev {
			t.Errorf("%s rewritten by a restart that changed other pods (revision %d → %d)", n, before[n].rev, got[n].rev)
		}
	}
}

// TestSIGKILLRestart runs nodelet-sources, kills it with SIGKILL
// once it has published, and starts it again: the desired bucket's
// revisions do not move.
func TestSIGKILLRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the daemon")
	}
	bin := testenv.MustDaemonBinary(t, "sources")
	dir := t.TempDir()
	for _, n := range []string{"a", "b", "c"} {
		writeFile(t, filepath.Join(dir, n+".yaml"), podYAML(n, "busybox:1.36"))
	}
	h := newHarness(t, nil)
	args := []string{
		"--node.name=node-1", "--node.stateDir=" + h.cfg.Node.StateDir, "--bus.listen=" + h.cfg.Bus.Listen,
		"--sources.staticPodPath=" + dir,
	}
	start := func() (*exec.Cmd, <-chan struct{}) {
		t.Helper()
		cmd := exec.Command(bin, args...)
		var env []string
		for _, e := range os.Environ() {
			if !strings.HasPrefix(e, config.EnvPrefix+"_") {
				env = append(env, e)
			}
		}
		cmd.Env = env
		stderr, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		ready := make(chan struct{})
		var once sync.Once
		go func() {
			sc := bufio.NewScanner(stderr)
			for sc.Scan() {
				if testing.Verbose() {
					t.Log(sc.Text())
				}
				if strings.Contains(sc.Text(), "All pod sources ready") {
					once.Do(func() { close(ready) })
				}
			}
		}()
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
		return cmd, ready
	}
	waitReady := func(ready <-chan struct{}) {
		t.Helper()
		select {
		case <-ready:
		case <-time.After(waitTimeout):
			t.Fatal("nodelet-sources did not log that all sources are ready")
		}
	}

	first, ready := start()
	waitReady(ready)
	before := h.waitNames("a-node-1", "b-node-1", "c-node-1")
	seq := h.lastSeq(bus.BucketDesired)
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()

	_, ready = start()
	waitReady(ready)
	if s := h.lastSeq(bus.BucketDesired); s != seq {
		t.Errorf("restart after SIGKILL wrote to the desired bucket: last sequence %d → %d", seq, s)
	}
	after := h.desired()
	for n, e := range before {
		if after[n].rev != e.rev {
			t.Errorf("%s: revision %d → %d", n, e.rev, after[n].rev)
		}
	}
	// And the restarted daemon does its job.
	writeFile(t, filepath.Join(dir, "d.yaml"), podYAML("d", "busybox:1.36"))
	h.waitNames("a-node-1", "b-node-1", "c-node-1", "d-node-1")
}

// TestBusStoreWiped: the bus restarts with its store wiped; the daemon
// reconnects and publishes every pod and the ready key again.
func TestBusStoreWiped(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yaml"), podYAML("a", "busybox:1.36"))
	writeFile(t, filepath.Join(dir, "b.yaml"), podYAML("b", "busybox:1.36"))
	h := newHarness(t, func(c *config.Config) { c.Sources.StaticPodPath = dir })
	h.start()
	before := h.waitNames("a-node-1", "b-node-1")
	h.waitAllReady()

	h.bus.Restart(true)
	after := h.waitNames("a-node-1", "b-node-1")
	for n, e := range before {
		if after[n].Pod.UID != e.Pod.UID || !after[n].FirstSeen.Equal(e.FirstSeen) {
			t.Errorf("%s came back as %s first seen %v, want %s first seen %v", n, after[n].Pod.UID, after[n].FirstSeen, e.Pod.UID, e.FirstSeen)
		}
	}
	h.waitAllReady()
}

// TestUnconfiguredSourceDropped: pods of a source that is no longer
// configured leave the bucket at the next start.
func TestUnconfiguredSourceDropped(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yaml"), podYAML("a", "busybox:1.36"))
	h := newHarness(t, func(c *config.Config) { c.Sources.StaticPodPath = dir })
	h.start()
	h.waitNames("a-node-1")
	h.stop()
	h.cfg.Sources.StaticPodPath = ""
	h.start()
	h.waitNames()
	waitFor(t, "ready with no sources", func() (bool, string) {
		r, _ := h.ready()
		return r != nil && r.AllReady && len(r.Configured) == 0, ""
	})
}
