package sources

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/internal/podutil"
	"github.com/nodelet/nodelet/schemas"
)

// manifestServer serves whatever the test sets, and counts requests.
type manifestServer struct {
	mu       sync.Mutex
	status   int
	body     string
	requests int
	header   http.Header
}

func (s *manifestServer) set(status int, body string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.status, s.body = status, body
}

func (s *manifestServer) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests
}

func (s *manifestServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.requests++
	s.header = r.Header.Clone()
	status, body := s.status, s.body
	s.mu.Unlock()
	w.WriteHeader(status)
	fmt.Fprint(w, body)
}

// waitPolls waits until the source has fetched n more times, so that what
// it did with the current body is done.
func waitPolls(t *testing.T, srv *manifestServer, n int) {
	t.Helper()
	start := srv.count()
	waitFor(t, fmt.Sprintf("%d more requests", n), func() (bool, string) {
		c := srv.count()
		return c >= start+n, fmt.Sprintf("%d requests", c-start)
	})
}

const podListJSON = `{"apiVersion":"v1","kind":"PodList","items":[
 {"metadata":{"name":"web"},"spec":{"containers":[{"name":"main","image":"busybox:1.36"}]}},
 {"metadata":{"name":"db","namespace":"data"},"spec":{"containers":[{"name":"main","image":"busybox:1.36"}]}}]}`

// TestHTTPSource serves a Pod, then a PodList, then the same body again
// (no write), then a 500 (the last good pods stay, reported once), then an
// empty body (no pods).
func TestHTTPSource(t *testing.T) {
	srv := &manifestServer{status: http.StatusOK, body: podYAML("web", "busybox:1.36")}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	h := newHarness(t, func(c *config.Config) {
		c.Sources.ManifestURL = ts.URL + "/pods"
		c.Sources.ManifestURLHeader = map[string][]string{"X-Node-Token": {"secret-1"}}
	})
	h.start()

	web := h.waitNames("web-node-1")["web-node-1"]
	if web.Source != schemas.SourceHTTP || web.Pod.Annotations[podutil.AnnotationConfigSource] != "http" || len(web.Pod.Spec.Tolerations) != 0 {
		t.Errorf("URL pod = %+v", web.Pod.ObjectMeta)
	}
	srv.mu.Lock()
	token := srv.header.Get("X-Node-Token")
	srv.mu.Unlock()
	if token != "secret-1" {
		t.Errorf("header X-Node-Token = %q, want secret-1", token)
	}
	if r := h.waitAllReady(); strings.Join(r.Configured, ",") != "http" {
		t.Errorf("ready = %+v", r)
	}

	// A PodList that holds the same "web" adds "db" and leaves web alone:
	// same content from the same URL is the same UID.
	srv.set(http.StatusOK, podListJSON)
	got := h.waitNames("web-node-1", "db-node-1")
	if got["web-node-1"].rev != web.rev || got["web-node-1"].Pod.UID != web.Pod.UID {
		t.Errorf("web rewritten when the list repeated it: rev %d → %d", web.rev, got["web-node-1"].rev)
	}
	if got["db-node-1"].Pod.Namespace != "data" {
		t.Errorf("db namespace = %q", got["db-node-1"].Pod.Namespace)
	}

	// The same body again: nothing is written.
	seq := h.lastSeq("nodelet_v1_pods_desired")
	waitPolls(t, srv, 3)
	if s := h.lastSeq("nodelet_v1_pods_desired"); s != seq {
		t.Errorf("an unchanged body wrote to the bucket (last sequence %d → %d)", seq, s)
	}

	// 500: the last good pods stay, and the failure is reported once.
	srv.set(http.StatusInternalServerError, "boom")
	ev := h.waitEvent("fetch failure", func(e schemas.Event) bool { return e.Reason == ReasonFailedToFetchManifest })
	if !strings.Contains(ev.Message, "500") || !strings.Contains(ev.Message, ts.URL) || ev.Type != "Warning" {
		t.Errorf("event = %+v", ev)
	}
	waitPolls(t, srv, 3)
	if n := h.eventCount(func(e schemas.Event) bool { return e.Reason == ReasonFailedToFetchManifest }); n != 1 {
		t.Errorf("a lasting outage was reported %d times, want once", n)
	}
	if s := h.lastSeq("nodelet_v1_pods_desired"); s != seq {
		t.Errorf("a failing URL changed the bucket (last sequence %d → %d)", seq, s)
	}

	// Back, with a broken body: reported, the last good pods stay.
	srv.set(http.StatusOK, `{"apiVersion":"v1","kind":"PodList","items":[`)
	h.waitEvent("broken body", func(e schemas.Event) bool {
		return e.Reason == ReasonFailedValidation && strings.Contains(e.Message, ts.URL)
	})
	waitPolls(t, srv, 2)
	if s := h.lastSeq("nodelet_v1_pods_desired"); s != seq {
		t.Errorf("a broken body changed the bucket (last sequence %d → %d)", seq, s)
	}

	// A list with one invalid pod: the other pods go on, the invalid one
	// keeps its last good version.
	srv.set(http.StatusOK, strings.Replace(podListJSON, `"name":"main","image":"busybox:1.36"}]}},`,
		`"name":"Main!","image":"busybox:1.37"}]}},`, 1))
	ev = h.waitEvent("invalid pod in the list", func(e schemas.Event) bool {
		return e.Reason == ReasonFailedValidation && e.Object.Name == "web-node-1"
	})
	if !strings.Contains(ev.Message, "spec.containers[0].name") {
		t.Errorf("event %q does not name the field", ev.Message)
	}
	waitPolls(t, srv, 2)
	if got := h.desired(); len(got) != 2 || got["web-node-1"].rev != web.rev {
		t.Errorf("after an invalid update of web: %s", describe(got))
	}

	// An empty body is an empty list.
	srv.set(http.StatusOK, "")
	h.waitNames()
}
