package server

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"k8s.io/utils/clock"
)

// healthz is the kubelet's /healthz (its syncloop check, over every
// daemon's heartbeat and the runtime's state): what nodelet-server serves
// on its port and, where asked, on its own healthz address.
type healthz struct {
	clock      clock.Clock
	staleAfter time.Duration
	view       *nodeView
	daemons    []string
	started    time.Time
	// bus has nodelet-server's own watch outages; nil: none.
	bus interface{ Outages() []string }
}

// checks says, for every daemon /healthz watches and for the
// container runtime, whether it is healthy and if not why: the kubelet's
// syncloop check (a loop that stopped turning is unhealthy) applied to each
// daemon's heartbeat. A daemon never heard from counts as stale once
// status.heartbeatStaleAfter has passed since nodelet-server started.
func (h *healthz) checks() []healthCheck {
	now := h.clock.Now()
	stale := h.staleAfter
	v := h.view
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []healthCheck
	for _, d := range h.daemons {
		c := healthCheck{name: "nodelet-" + d}
		e, ok := v.beats[d]
		switch {
		case !ok && now.Sub(h.started) > stale:
			c.err = fmt.Errorf("no heartbeat received in %s", now.Sub(h.started).Round(time.Second))
		case !ok:
		case now.Sub(e.at) > stale:
			c.err = fmt.Errorf("last heartbeat %s ago (stale after %s)", now.Sub(e.at).Round(time.Second), stale)
		case !e.hb.Ready:
			c.err = fmt.Errorf("not ready: %s", e.hb.Message)
		}
		out = append(out, c)
	}
	// nodelet-server's own mirrors (it does not hear its own heartbeat):
	// a lost watch past its grace fails /healthz like a daemon's would.
	if h.bus != nil {
		if lost := h.bus.Outages(); len(lost) > 0 {
			out = append(out, healthCheck{name: "nodelet-server", err: errors.New(strings.Join(lost, "; "))})
		}
	}
	rc := healthCheck{name: "runtime"}
	switch rs := v.runtime; {
	case rs == nil && now.Sub(h.started) > stale:
		rc.err = fmt.Errorf("no runtime state published by nodelet-runtime")
	case rs == nil:
	case !rs.RuntimeReady:
		rc.err = fmt.Errorf("container runtime is down: %s", joinNonEmpty(": ", rs.Reason, rs.Message))
	}
	return append(out, rc)
}

func joinNonEmpty(sep string, parts ...string) string {
	var out []string
	for _, p := range parts {
		if p != "" {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return "no reason given"
	}
	return strings.Join(out, sep)
}

// serve answers "ok", or 500 naming each failing check, in the
// format of k8s.io/apiserver's healthz (?verbose lists every check).
func (h *healthz) serve(w http.ResponseWriter, r *http.Request) {
	failed := false
	var b strings.Builder
	b.WriteString("[+]ping ok\n")
	for _, c := range h.checks() {
		if c.err != nil {
			failed = true
			fmt.Fprintf(&b, "[-]%s failed: %v\n", c.name, c.err)
		} else {
			fmt.Fprintf(&b, "[+]%s ok\n", c.name)
		}
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	switch _, verbose := r.URL.Query()["verbose"]; {
	case failed:
		w.WriteHeader(http.StatusInternalServerError)
		b.WriteString("healthz check failed\n")
		_, _ = w.Write([]byte(b.String()))
	case verbose:
		b.WriteString("healthz check passed\n")
		_, _ = w.Write([]byte(b.String()))
	default:
		_, _ = w.Write([]byte("ok"))
	}
}
