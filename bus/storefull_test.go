package bus_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/bus/bustest"
	"github.com/nodelet/nodelet/internal/testenv"
	"github.com/nodelet/nodelet/schemas"
)

// TestStoreFilesystemFull: the store on a small filesystem of its own that
// fills up. nats-server fails the write and answers nothing; the put fails
// with ErrNoAck naming the bucket and key after PutAckTimeout, the server
// reports the stream's write error (StoreWriteError) while JetStream stays
// on; once space is back and the bus restarted (what nodelet-bus does), the
// stream takes writes again and what was stored before is all there.
// internal/e2e/faults's TestStateDirFull is the whole node's version.
func TestStoreFilesystemFull(t *testing.T) {
	testenv.RequiresRoot(t)
	stateDir := t.TempDir()
	store := filepath.Join(stateDir, "bus")
	if err := os.MkdirAll(store, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=24m", "nodelet-bus-test", store).CombinedOutput(); err != nil {
		t.Fatalf("mount: %v\n%s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", store).Run() }) // after the bus stopped
	defer func(d time.Duration) { bus.PutAckTimeout = d }(bus.PutAckTimeout)
	bus.PutAckTimeout = 2 * time.Second

	b := bustest.StartIn(t, stateDir)
	ctx := ctxT(t)
	src := b.Connect(bus.Sources)
	// Values of 100 KiB: each needs pages the full filesystem has not.
	pad := strings.Repeat("x", 100<<10)
	put := func(keys ...string) []error {
		bodies := make([][]byte, len(keys))
		for i, k := range keys {
			body, err := schemas.Encode(bus.Sources, &schemas.Heartbeat{Component: k, Version: pad})
			if err != nil {
				t.Fatal(err)
			}
			bodies[i] = body
		}
		_, errs := src.PutRawMany(ctx, bus.BucketDesired, keys, bodies)
		return errs
	}
	before := []string{"a", "b", "c"}
	for _, err := range put(before...) {
		if err != nil {
			t.Fatal(err)
		}
	}

	filler := filepath.Join(store, "filler")
	f, err := os.Create(filepath.Join(store, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	f.Close()
	errs := put("d", "e")
	for i, err := range errs {
		if !errors.Is(err, bus.ErrNoAck) || !strings.Contains(err.Error(), bus.BucketDesired+"/") {
			t.Fatalf("put %d on a full store: %v, want ErrNoAck naming the bucket", i, err)
		}
	}
	werr := b.Server.StoreWriteError()
	if werr == nil || !strings.Contains(werr.Error(), "no space left on device") || !strings.Contains(werr.Error(), "KV_"+bus.BucketDesired) {
		t.Fatalf("StoreWriteError: %v", werr)
	}
	if err := b.Server.Healthy(); err != nil {
		t.Fatalf("JetStream should stay on: %v", err)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	b.Restart(false)
	if err := b.Server.StoreWriteError(); err != nil {
		t.Fatalf("after the restart: %v", err)
	}
	src = b.Connect(bus.Sources)
	for _, err := range put("d", "e") {
		if err != nil {
			t.Fatalf("after the restart: %v", err)
		}
	}
	for _, k := range before {
		v, _, err := bus.Get[schemas.Heartbeat](ctx, src, bus.BucketDesired, k)
		if err != nil || v == nil || v.Component != k {
			t.Fatalf("%s lost: %v %v", k, v, err)
		}
	}
}
