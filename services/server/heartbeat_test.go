package server

import (
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/cri"
	"github.com/nodelet/nodelet/schemas"
)

// TestHeartbeatBelongsToItsSubject: issue 33, item 4. A heartbeat is filed
// under the component whose subject it came on (which only that
// component's credential may publish on), not the one its body names:
// prober saying runtime is not ready, on its own subject, leaves /healthz's
// runtime check alone and counts as prober's own beat.
func TestHeartbeatBelongsToItsSubject(t *testing.T) {
	ts := startServer(t, testConfig(t), &cri.Clients{}, func(o *Options) { o.Daemons = []string{bus.Runtime, bus.Prober} })
	rt, pr := ts.b.Connect(bus.Runtime), ts.b.Connect(bus.Prober)
	if _, err := rt.Put(t.Context(), bus.BucketRuntime, bus.KeyRuntimeState, &schemas.RuntimeState{RuntimeReady: true, NetworkReady: true}); err != nil {
		t.Fatal(err)
	}
	// Prober cannot even publish on runtime's subject.
	if err := pr.NC.Publish(bus.HealthSubject(bus.Runtime), []byte("{}")); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		tk := time.NewTicker(200 * time.Millisecond)
		defer tk.Stop()
		for {
			_ = rt.PublishHeartbeat(schemas.Heartbeat{Component: bus.Runtime, PID: os.Getpid(), Ready: true})
			_ = pr.PublishHeartbeat(schemas.Heartbeat{Component: bus.Runtime, PID: os.Getpid(), Ready: false, Message: "forged by prober"})
			select {
			case <-stop:
				return
			case <-tk.C:
			}
		}
	}()
	// Poll rather than look once: on a loaded machine a beat may come late,
	// but at no point may runtime be reported with prober's words.
	var body string
	forged := ""
	waitFor(t, 30*time.Second, "prober's beats to count as prober's and runtime's as runtime's", func() bool {
		_, body = ts.get(http.MethodGet, "", "/healthz?verbose")
		if strings.Contains(body, "[-]nodelet-runtime failed: not ready: forged") {
			forged = body
		}
		return strings.Contains(body, "[-]nodelet-prober failed: not ready: forged by prober") &&
			strings.Contains(body, "[+]nodelet-runtime ok")
	})
	if forged != "" {
		t.Errorf("prober's beat was filed as runtime's:\n%s", forged)
	}
}
