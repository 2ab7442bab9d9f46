package bus_test

import (
	"context"
	"testing"
	"time"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/bus/bustest"
	"github.com/nodelet/nodelet/internal/testenv/eventually"
	"github.com/nodelet/nodelet/schemas"
)

// What the bus holds at rest (docs/performance.md, memory at rest): the
// consumer proxy's workers end once their requests are served and start
// again with the next ones, and the proxy and the retention sweeper share
// one connection per store account.
func TestBusAtRest(t *testing.T) {
	b := bustest.Start(t)
	proxy, sweeper := bus.StoreConnections(b.Server)
	if len(proxy) == 0 || len(proxy) != len(sweeper) {
		t.Fatalf("store contexts: proxy %d, sweeper %d", len(proxy), len(sweeper))
	}
	for acct, js := range proxy {
		if sweeper[acct] != js {
			t.Errorf("store account %s: the proxy and the sweeper hold a connection each", acct)
		}
	}

	c := b.Connect(bus.Admission)
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	// A burst: every watch asks the proxy for a consumer at once.
	watch := func(n int) {
		synced := make(chan struct{}, n)
		for range n {
			go func() {
				_ = bus.Watch[schemas.PodDesired](ctx, c, bus.BucketDesired, ">", func(u bus.Update[schemas.PodDesired]) {
					if u.Kind == bus.Synced {
						synced <- struct{}{}
					}
				})
			}()
		}
		for i := range n {
			select {
			case <-synced:
			case <-time.After(30 * time.Second):
				t.Fatalf("%d of %d watches synced", i, n)
			}
		}
	}
	watch(12)
	eventually.True(t, 10*time.Second, "the proxy's workers end once idle", func() bool { return bus.ProxyWorkers(b.Server) == 0 })
	watch(3)
	eventually.True(t, 10*time.Second, "the proxy's workers end again", func() bool { return bus.ProxyWorkers(b.Server) == 0 })
}
