package bus_test

import (
	"fmt"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/bus/bustest"
)

// sweptBus starts a bus whose sweeps tick on clk and are told on the
// channel (keys dropped), and connects as nodelet-sources.
func sweptBus(t *testing.T, clk *testingclock.FakeClock, l bus.Limits) (*bus.Server, chan int, *bus.Conn) {
	t.Helper()
	dir := t.TempDir()
	s, err := bus.StartServer(ctxT(t), bus.ServerOptions{StateDir: dir, Listen: "127.0.0.1:0", Log: bustest.Logger(), Clock: clk, Limits: l})
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
	return s, swept, src
}

// A deleted key's history stays for the retention, then goes whole (its
// delete marker too); live keys and a key written again after its delete
// keep everything.
func TestDeletedKeysHistoryIsDroppedAfterTheRetention(t *testing.T) {
	ctx := ctxT(t)
	clk := testingclock.NewFakeClock(time.Now())
	s, swept, src := sweptBus(t, clk, bus.Limits{})

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

// A bucket more than half full drops the history of keys deleted longer ago
// than the minimum retention, not only of those past the configured one;
// keys deleted since keep theirs, and a bucket under half keeps all.
func TestFullBucketDropsHistoryPastTheMinimumRetention(t *testing.T) {
	const limit = 64 << 10
	for _, tc := range []struct {
		name string
		full bool // keys are put and deleted until the bucket is 55 % full
	}{
		{"under half full", false},
		{"over half full", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxT(t)
			// The first sweep falls when the clock reaches start+interval;
			// the clock is set there at once, to the cut plus the minimum.
			interval := bus.DefaultDeletedKeyRetention / 4
			clk := testingclock.NewFakeClock(time.Now().Add(bus.MinDeletedKeyRetention - interval))
			s, swept, src := sweptBus(t, clk, bus.Limits{BucketMaxBytes: limit, MaxValueSize: 8 << 10})
			churn := func(k string) {
				put(t, src, k)
				if err := src.Delete(ctx, bus.BucketDesired, k); err != nil {
					t.Fatal(err)
				}
			}
			fill := func() uint64 {
				bytes, max, err := bus.BucketFill(ctx, s, bus.BucketDesired)
				if err != nil || max != limit {
					t.Fatalf("bucket fill: %v, MaxBytes %d, want %d", err, max, limit)
				}
				return bytes
			}
			old := 3
			for i := range old {
				churn(fmt.Sprintf("old-%d", i))
			}
			for ; tc.full && fill() < limit*55/100; old++ {
				churn(fmt.Sprintf("old-%d", old))
			}
			cut := time.Now() // every marker above is older
			churn("young-0")
			churn("young-1")
			put(t, src, "live")
			if bytes := fill(); (bytes > limit/2) != tc.full {
				t.Fatalf("bucket holds %d of %d bytes: the case wants full=%v", bytes, limit, tc.full)
			}
			clk.SetTime(cut.Add(bus.MinDeletedKeyRetention))
			var n int
			select {
			case n = <-swept:
			case <-time.After(20 * time.Second):
				t.Fatal("no sweep after a tick")
			}
			want := map[string]uint64{"old-0": 2, "young-0": 2, "young-1": 2, "live": 1}
			if tc.full {
				if n != old {
					t.Errorf("sweep dropped %d keys, want the %d deleted before the cut", n, old)
				}
				want["old-0"] = 0
			} else if n != 0 {
				t.Errorf("sweep dropped %d keys within the retention of a bucket under half full", n)
			}
			for k, w := range want {
				if got, err := bus.KeyMessages(ctx, s, bus.BucketDesired, k); err != nil || got != w {
					t.Errorf("%s: %d messages (%v), want %d", k, got, err, w)
				}
			}
			if after := fill(); tc.full && after > limit/2 {
				t.Errorf("bucket still holds %d of %d bytes after the sweep", after, limit)
			}
		})
	}
}
