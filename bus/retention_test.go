package bus_test

import (
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/bus/bustest"
)

// A deleted key's history stays for the retention, then goes whole (its
// delete marker too); live keys and a key written again after its delete
// keep everything.
func TestDeletedKeysHistoryIsDroppedAfterTheRetention(t *testing.T) {
	ctx := ctxT(t)
	clk := testingclock.NewFakeClock(time.Now())
	dir := t.TempDir()
	s, err := bus.StartServer(ctx, bus.ServerOptions{StateDir: dir, Listen: "127.0.0.1:0", Log: bustest.Logger(), Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	swept := make(chan int, 10)
	bus.OnSweep(s, func(n int, err error) {
		if err != nil {
			t.Errorf("sweep: %v", err)
		}
		swept <- n
	})
	src, err := bus.Connect(bus.ConnectOptions{URL: s.ClientURL(), Component: bus.Sources, StateDir: dir, Log: bustest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(src.Close)

	put(t, src, "gone")
	if _, err := src.Put(ctx, bus.BucketDesired, "gone", desired("gone-2", "gone")); err != nil {
		t.Fatal(err)
	}
	put(t, src, "live")
	put(t, src, "back")
	for _, k := range []string{"gone", "back"} {
		if err := src.Delete(ctx, bus.BucketDesired, k); err != nil {
			t.Fatal(err)
		}
	}
	put(t, src, "back")

	messages := func(key string) uint64 {
		t.Helper()
		n, err := bus.KeyMessages(ctx, s, bus.BucketDesired, key)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	want := map[string]uint64{"gone": 3, "live": 1, "back": 3}
	check := func(when string) {
		t.Helper()
		for k, n := range want {
			if got := messages(k); got != n {
				t.Errorf("%s: %d messages for %s, want %d", when, got, k, n)
			}
		}
	}
	check("before any sweep")

	interval := bus.DefaultDeletedKeyRetention / 4
	sweep := func() int {
		t.Helper()
		clk.Step(interval)
		select {
		case n := <-swept:
			return n
		case <-time.After(20 * time.Second):
			t.Fatal("no sweep after a tick")
			return 0
		}
	}
	// Up to the retention (the clock started before the delete), the
	// history stays.
	for i := 1; i <= 4; i++ {
		if n := sweep(); n != 0 {
			t.Fatalf("sweep %d at %v dropped %d keys, want none within the retention", i, time.Duration(i)*interval, n)
		}
	}
	check("within the retention")

	if n := sweep(); n != 1 {
		t.Fatalf("sweep past the retention dropped %d keys, want 1 (gone)", n)
	}
	want["gone"] = 0
	check("past the retention")
	if n := sweep(); n != 0 {
		t.Fatalf("a second sweep dropped %d keys, want none", n)
	}
}
