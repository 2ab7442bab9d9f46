package status

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/schemas"
)

// heartbeats remembers the last heartbeat of every daemon, as received.
type heartbeats struct {
	mu   sync.Mutex
	last map[string]heartbeat
}

type heartbeat struct {
	hb schemas.Heartbeat
	at time.Time
}

// watchHeartbeats subscribes to every daemon's heartbeat until ctx ends.
// The subscription survives reconnects (nats.go re-subscribes).
func (s *Service) watchHeartbeats(ctx context.Context) error {
	sub, err := s.bus.NC.Subscribe(bus.SubjectHealthAll, func(m *nats.Msg) {
		_, hb, err := schemas.Decode[schemas.Heartbeat](m.Data)
		if err != nil {
			s.log.Warn("Skipping heartbeat that does not decode", "subject", m.Subject, "err", err)
			return
		}
		s.hb.mu.Lock()
		s.hb.last[hb.Component] = heartbeat{hb: *hb, at: s.clock.Now()}
		s.hb.mu.Unlock()
	})
	if err != nil {
		return fmt.Errorf("subscribe to heartbeats: %w", err)
	}
	<-ctx.Done()
	_ = sub.Unsubscribe()
	return nil
}

// healthCheck is one line of /healthz.
type healthCheck struct {
	name string
	err  error
}

// healthChecks says, for every daemon /healthz watches and for the
// container runtime, whether it is healthy and if not why. A daemon never
// heard from counts as stale once heartbeatStaleAfter has passed since
// nodelet-status started.
func (s *Service) healthChecks() []healthCheck {
	now := s.clock.Now()
	stale := s.cfg.Status.HeartbeatStaleAfter
	var out []healthCheck
	s.hb.mu.Lock()
	for _, d := range s.daemons {
		c := healthCheck{name: "nodelet-" + d}
		e, ok := s.hb.last[d]
		switch {
		case !ok && now.Sub(s.started) > stale:
			c.err = fmt.Errorf("no heartbeat received in %s", now.Sub(s.started).Round(time.Second))
		case !ok:
		case now.Sub(e.at) > stale:
			c.err = fmt.Errorf("last heartbeat %s ago (stale after %s)", now.Sub(e.at).Round(time.Second), stale)
		case !e.hb.Ready:
			c.err = fmt.Errorf("not ready: %s", e.hb.Message)
		}
		out = append(out, c)
	}
	s.hb.mu.Unlock()

	s.st.mu.Lock()
	rs := s.st.runtime
	s.st.mu.Unlock()
	rc := healthCheck{name: "runtime"}
	switch {
	case rs == nil && now.Sub(s.started) > stale:
		rc.err = fmt.Errorf("no runtime state published by nodelet-runtime")
	case rs == nil:
	case !rs.RuntimeReady:
		rc.err = fmt.Errorf("container runtime is down: %s", joinNonEmpty(": ", rs.Reason, rs.Message))
	}
	return append(out, rc)
}

func joinNonEmpty(sep string, parts ...string) string {
	out := ""
	for _, p := range parts {
		if p == "" {
			continue
		}
		if out != "" {
			out += sep
		}
		out += p
	}
	if out == "" {
		return "no reason given"
	}
	return out
}
