package server

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/cri"
	"github.com/nodelet/nodelet/internal/testenv/eventually"
	"github.com/nodelet/nodelet/schemas"
)

// nodelet-server's own mirrors (desired pods, statuses, runtime state) are
// a check of /healthz: while the bus is away past the mirrors' grace it
// fails naming the lost watches, and passes again once they are back.
func TestHealthzFailsWhileTheServersMirrorsAreLost(t *testing.T) {
	ts := startServer(t, testConfig(t), &cri.Clients{}, func(o *Options) { o.Daemons = []string{} })
	runtime := ts.b.Connect(bus.Runtime)
	if _, err := runtime.Put(t.Context(), bus.BucketRuntime, bus.KeyRuntimeState,
		&schemas.RuntimeState{RuntimeReady: true, NetworkReady: true}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "healthz ok", func() bool {
		code, body := ts.get(http.MethodGet, "", "/healthz")
		return code == http.StatusOK && body == "ok"
	})

	ts.b.Server.Shutdown()
	want := []string{
		"[-]nodelet-server failed: bus watch of " + bus.BucketDesired + " lost since ",
		"bus watch of " + bus.BucketStatus + " lost since ",
		"bus watch of " + bus.BucketRuntime + " (" + bus.KeyRuntimeState + ") lost since ",
		"disconnected from the bus",
	}
	// "ok" above may have come before the runtime's state reached the
	// server (a missing state is not a failure at first), so the runtime's
	// check can fail here on its own. Each mirror reports its outage when
	// its own grace passes, so the first failing body may name only some:
	// wait until every mirror is named.
	eventually.State(t, 20*time.Second, "healthz to fail naming each of nodelet-server's mirrors", func() (bool, string) {
		code, body := ts.get(http.MethodGet, "", "/healthz")
		if code != http.StatusInternalServerError {
			return false, fmt.Sprintf("healthz %d: %s", code, body)
		}
		for _, w := range want {
			if !strings.Contains(body, w) {
				return false, fmt.Sprintf("healthz body lacks %q:\n%s", w, body)
			}
		}
		return true, ""
	})

	ts.b.Restart(false)
	waitFor(t, 20*time.Second, "healthz ok after the bus came back", func() bool {
		code, body := ts.get(http.MethodGet, "", "/healthz")
		return code == http.StatusOK && body == "ok"
	})
}
