package bus_test

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nodelet/nodelet/bus"
)

// refusals ends a call on c as soon as the bus refuses one of its
// publishes. nats-server answers a publish outside the credential's
// permissions with an asynchronous permissions violation, which nats.go
// hands only to the connection's error handler: without this a refused
// request waits out its whole timeout, and the permission matrices spend
// minutes waiting. Calls on one connection go one at a time.
type refusals struct {
	c      *bus.Conn
	mu     sync.Mutex
	cancel context.CancelFunc
}

func newRefusals(c *bus.Conn) *refusals {
	r := &refusals{c: c}
	c.NC.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if !errors.Is(err, nats.ErrPermissionViolation) {
			return
		}
		r.mu.Lock()
		if r.cancel != nil {
			r.cancel()
		}
		r.mu.Unlock()
	})
	return r
}

// call runs f with a context that ends after timeout or at the first
// refusal.
func (r *refusals) call(timeout time.Duration, f func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	r.mu.Lock()
	r.cancel = cancel
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.cancel = nil
		r.mu.Unlock()
	}()
	return f(ctx)
}

// request is NC.Request, ended at the bus's refusal.
func (r *refusals) request(subj string, data []byte, timeout time.Duration) (*nats.Msg, error) {
	var m *nats.Msg
	err := r.call(timeout, func(ctx context.Context) (err error) {
		m, err = r.c.NC.RequestWithContext(ctx, subj, data)
		return err
	})
	return m, err
}
