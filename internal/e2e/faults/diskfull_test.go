package faults_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/e2e"
	"github.com/nodelet/nodelet/internal/testenv/eventually"
)

// TestStateDirFull (issue 37, the state dir's filesystem full): the bus's
// store on a small filesystem of its own that fills up while pods run and
// more are added. Writes are refused and the refusal is logged with the
// bucket or stream it was for; the running pods keep running (no
// container restarted); nothing stored before is lost (every key of the
// pipeline's buckets is still there, at its revision or a later one, not
// rewritten from scratch); once space returns the node converges: the pods
// added meanwhile run and every status is caught up.
func TestStateDirFull(t *testing.T) {
	n := e2e.NewNode(t, e2e.NodeOptions{BusStoreSize: "64m"})
	names := map[string]bool{}
	add := func(prefix string, k int) {
		for i := 0; i < k; i++ {
			name := fmt.Sprintf("%s-%d", prefix, i)
			names[name+"-"+nodeName] = true
			n.WriteManifest(name+".yaml", e2e.SleeperManifest(name))
		}
	}
	converged := func() (bool, string) {
		l, err := n.Pods()
		if err != nil {
			return false, err.Error()
		}
		seen := 0
		for _, p := range l.Items {
			if !names[p.Name] {
				continue
			}
			seen++
			if !e2e.RunningReady(&p) {
				return false, p.Name + "=" + string(p.Status.Phase)
			}
			c := e2e.CRIView(t, ctrd)[string(p.UID)]
			if c == nil || c.Sandboxes != 1 || c.Running != 1 {
				return false, fmt.Sprintf("CRI of %s: %+v", p.Name, c)
			}
		}
		if seen != len(names) {
			return false, fmt.Sprintf("/pods lists %d of %d pods", seen, len(names))
		}
		return true, ""
	}
	add("before", 3)
	waitState(t, 90*time.Second, "the first pods Running", converged)
	baseline := e2e.CRIView(t, ctrd)
	tap := n.Connect(bus.Tap)
	stored := storedRevisions(t, tap)

	// Fill the filesystem.
	filler := filepath.Join(n.StateDir, "bus", "filler")
	fillUp(t, filler)
	t.Cleanup(func() { _ = os.Remove(filler) })
	full := time.Now()
	add("during", 2)
	// The refusal is logged with what it was for: by the bus, naming the
	// stream, and by the writer (nodelet-sources, whose new pods these
	// are), naming the bucket, once its put goes unacknowledged.
	eventually.True(t, 60*time.Second, "the bus's refusal logged with the stream", func() bool {
		return strings.Contains(n.Out.String(), "Bus store refuses writes") &&
			strings.Contains(n.Out.String(), "KV_"+bus.BucketDesired+"] Critical write error")
	})
	eventually.True(t, 60*time.Second, "nodelet-sources' refused put logged with the bucket", func() bool {
		for _, l := range strings.Split(n.Out.String(), "\n") {
			if strings.Contains(l, "Cannot publish desired pods") && strings.Contains(l, "put "+bus.BucketDesired+"/") &&
				strings.Contains(l, bus.ErrNoAck.Error()) {
				return true
			}
		}
		return false
	})
	// Meanwhile the pods ran on.
	now := e2e.CRIView(t, ctrd)
	for uid, b := range baseline {
		if b.ContainerID == "" {
			continue
		}
		if c := now[uid]; c == nil || c.ContainerID != b.ContainerID || c.RestartCount != b.RestartCount {
			t.Fatalf("while full: pod %s container restarted: %+v → %+v", uid, b, c)
		}
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	freed := time.Now()
	waitState(t, 2*time.Minute, "every pod Running after space returned", converged)
	t.Logf("state dir full: full %s, converged %s after space returned",
		freed.Sub(full).Round(time.Second), time.Since(freed).Round(10*time.Millisecond))
	now = e2e.CRIView(t, ctrd)
	for uid, b := range baseline {
		if b.ContainerID == "" {
			continue
		}
		if c := now[uid]; c == nil || c.ContainerID != b.ContainerID || c.RestartCount != b.RestartCount {
			t.Fatalf("after: pod %s container restarted: %+v → %+v", uid, b, c)
		}
	}
	after := storedRevisions(t, tap)
	for bucket, keys := range stored {
		for key, rev := range keys {
			if got, ok := after[bucket][key]; !ok || got < rev {
				t.Errorf("%s/%s: revision %d before, %d (present %v) after", bucket, key, rev, got, ok)
			}
		}
	}
}

func waitState(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var why string
	for time.Now().Before(deadline) {
		var ok bool
		if ok, why = cond(); ok {
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("%s: not after %s: %s", what, timeout, why)
}

// storedRevisions reads every key's revision in the pipeline's buckets.
func storedRevisions(t *testing.T, c *bus.Conn) map[string]map[string]uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out := map[string]map[string]uint64{}
	for _, b := range []string{bus.BucketDesired, bus.BucketAdmission, bus.BucketObserved, bus.BucketStatus} {
		kv, err := c.KV(ctx, b)
		if err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		keys, err := kv.ListKeys(ctx)
		if err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		out[b] = map[string]uint64{}
		for k := range keys.Keys() {
			e, err := kv.Get(ctx, k)
			if err != nil {
				t.Fatalf("%s/%s: %v", b, k, err)
			}
			out[b][k] = e.Revision()
		}
	}
	return out
}

// fillUp writes zeros to path until its filesystem is full.
func fillUp(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for {
		if _, err := f.Write(buf); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				break
			}
			t.Fatal(err)
		}
	}
	// The last partial megabyte, in small writes.
	small := buf[:4096]
	for {
		if _, err := f.Write(small); err != nil {
			break
		}
	}
}
