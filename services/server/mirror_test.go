package server

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/cri"
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
	var body string
	// "ok" above may have come before the runtime's state reached the
	// server (a missing state is not a failure at first), so the runtime's
	// check can fail here on its own; wait for the mirrors' outage.
	waitFor(t, 20*time.Second, "healthz to fail on nodelet-server", func() bool {
		var code int
		code, body = ts.get(http.MethodGet, "", "/healthz")
		return code == http.StatusInternalServerError && strings.Contains(body, "[-]nodelet-server failed")
	})
	for _, want := range []string{
		"[-]nodelet-server failed: bus watch of " + bus.BucketDesired + " lost since ",
		"bus watch of " + bus.BucketStatus + " lost since ",
		"bus watch of " + bus.BucketRuntime + " (" + bus.KeyRuntimeState + ") lost since ",
		"disconnected from the bus",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("healthz body lacks %q:\n%s", want, body)
		}
	}

	ts.b.Restart(false)
	waitFor(t, 20*time.Second, "healthz ok after the bus came back", func() bool {
		code, body := ts.get(http.MethodGet, "", "/healthz")
		return code == http.StatusOK && body == "ok"
	})
}
