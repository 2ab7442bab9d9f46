package runtime

import (
	"context"
	"maps"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"
)

// Syncs of one pod never overlap, updates during a sync coalesce into one
// more sync, and pods proceed in parallel.
func TestPodWorkersSerialiseAndCoalesce(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		mu       sync.Mutex
		inFlight = map[string]int{}
		count    = map[string]int{}
		overlap  atomic.Bool
	)
	release := make(chan struct{})
	started := make(chan string, 100)
	w := newPodWorkers(ctx, testingclock.NewFakeClock(time.Now()), func(ctx context.Context, uid string) syncResult {
		mu.Lock()
		inFlight[uid]++
		if inFlight[uid] > 1 {
			overlap.Store(true)
		}
		count[uid]++
		mu.Unlock()
		started <- uid
		if uid == "a" {
			<-release
		}
		mu.Lock()
		inFlight[uid]--
		mu.Unlock()
		return syncResult{}
	})
	w.Update("a")
	if got := <-started; got != "a" {
		t.Fatalf("first sync of %s", got)
	}
	// While a's first sync blocks: many updates of a, and b runs meanwhile.
	for range 10 {
		w.Update("a")
	}
	w.Update("b")
	select {
	case got := <-started:
		if got != "b" {
			t.Fatalf("got sync of %s, want b while a is busy", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("b did not sync while a was busy")
	}
	close(release)
	select {
	case got := <-started:
		if got != "a" {
			t.Fatalf("got %s", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no coalesced sync of a")
	}
	cancel()
	w.Wait()
	if overlap.Load() {
		t.Fatal("two syncs of one pod overlapped")
	}
	if count["a"] != 2 || count["b"] != 1 {
		t.Fatalf("syncs: %v, want a twice (10 updates coalesced) and b once", count)
	}
}

// A sync that asks for a requeue runs again when the clock reaches it.
func TestPodWorkersRequeue(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clk := testingclock.NewFakeClock(time.Now())
	synced := make(chan int, 10)
	var n atomic.Int32
	w := newPodWorkers(ctx, clk, func(ctx context.Context, uid string) syncResult {
		k := int(n.Add(1))
		synced <- k
		if k == 1 {
			return syncResult{RequeueAfter: 10 * time.Second}
		}
		return syncResult{Forget: true}
	})
	w.Update("p")
	<-synced
	for !clk.HasWaiters() {
		time.Sleep(time.Millisecond)
	}
	clk.Step(9 * time.Second)
	select {
	case <-synced:
		t.Fatal("requeued too early")
	case <-time.After(50 * time.Millisecond):
	}
	clk.Step(time.Second)
	select {
	case k := <-synced:
		if k != 2 {
			t.Fatalf("sync %d", k)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no requeued sync")
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(w.Known()) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("forgotten worker still known: %v", w.Known())
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	w.Wait()
}

// A relist wakes a worker only when the pod's CRI state differs from the
// one its last sync settled in; while a sync runs, the relisted state is
// compared with that sync's result.
func TestPodWorkersRelisted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s1 := map[string]string{"sb": "p ready", "c": "p CONTAINER_RUNNING"}
	s2 := map[string]string{"sb": "p ready", "c": "p CONTAINER_EXITED"}
	var (
		mu      sync.Mutex
		settled = s1
		release chan struct{}
	)
	synced := make(chan struct{}, 10)
	w := newPodWorkers(ctx, testingclock.NewFakeClock(time.Now()), func(ctx context.Context, uid string) syncResult {
		mu.Lock()
		res, wait := syncResult{Settled: settled}, release
		mu.Unlock()
		synced <- struct{}{}
		if wait != nil {
			<-wait
		}
		return res
	})
	expect := func(what string, want bool) {
		t.Helper()
		select {
		case <-synced:
			if !want {
				t.Fatalf("%s: synced", what)
			}
		case <-time.After(100 * time.Millisecond):
			if want {
				t.Fatalf("%s: no sync", what)
			}
		}
	}
	w.Relisted("p", s1)
	expect("a pod the workers do not know", true)
	w.Relisted("p", maps.Clone(s1))
	expect("the state the last sync settled in", false)
	w.Relisted("p", s2)
	expect("a state of its own", true)
	w.Relisted("p", nil)
	expect("the pod gone from CRI", true)

	// A sync running: the relisted state waits for its result.
	for _, tc := range []struct {
		name     string
		relisted map[string]string
		settled  map[string]string
		again    bool
	}{
		{"the sync settles in the relisted state", s1, s1, false},
		{"the sync settles elsewhere", s2, s1, true},
		{"the sync does not settle", s1, nil, true},
	} {
		mu.Lock()
		release, settled = make(chan struct{}), tc.settled
		mu.Unlock()
		w.Update("p")
		expect(tc.name+": the update", true)
		w.Relisted("p", tc.relisted)
		mu.Lock()
		close(release)
		release = nil
		mu.Unlock()
		expect(tc.name, tc.again)
	}
}
