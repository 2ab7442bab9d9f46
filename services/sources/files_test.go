package sources

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/internal/podutil"
	"github.com/nodelet/nodelet/schemas"
)

// TestFileSource drops, edits (by rename and in place) and removes manifest
// files and follows them through fsnotify into the desired bucket.
func TestFileSource(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yaml"), podYAML("a", "busybox:1.36"))
	writeFile(t, filepath.Join(dir, ".hidden.yaml"), podYAML("hidden", "busybox:1.36"))
	h := newHarness(t, func(c *config.Config) { c.Sources.StaticPodPath = dir })
	h.start()

	got := h.waitNames("a-node-1")
	a := got["a-node-1"]
	if a.Source != schemas.SourceFile || a.FirstSeen.IsZero() || a.Pod.Namespace != "default" ||
		a.Pod.Annotations[podutil.AnnotationConfigSource] != "file" || a.Pod.Annotations[podutil.AnnotationConfigHash] != string(a.Pod.UID) ||
		a.Pod.Annotations[podutil.AnnotationConfigSeen] == "" || a.Pod.Spec.NodeName != "node-1" {
		t.Fatalf("desired pod a = %+v, %+v", a.PodDesired, a.Pod.ObjectMeta)
	}
	if r := h.waitAllReady(); strings.Join(r.Configured, ",") != "file" || strings.Join(r.Ready, ",") != "file" {
		t.Errorf("sources ready = %+v", r)
	}

	// Add: a new file, written and renamed into place.
	writeFile(t, filepath.Join(dir, "b.yaml"), podYAML("b", "busybox:1.36"))
	got = h.waitNames("a-node-1", "b-node-1")
	b := got["b-node-1"]

	// Update by rename: a new spec is a new pod (new UID); b is untouched.
	writeFile(t, filepath.Join(dir, "a.yaml"), podYAML("a", "busybox:1.37"))
	got = h.waitDesired("a on busybox:1.37", func(m map[string]desiredEntry) bool {
		e, ok := m["a-node-1"]
		return ok && e.Pod.Spec.Containers[0].Image == "busybox:1.37" && len(m) == 2
	})
	a2 := got["a-node-1"]
	if a2.Pod.UID == a.Pod.UID {
		t.Errorf("changed spec kept UID %s", a.Pod.UID)
	}
	if got["b-node-1"].rev != b.rev {
		t.Errorf("b was rewritten (revision %d → %d) by a change to a", b.rev, got["b-node-1"].rev)
	}

	// Update in place (truncate and write).
	if err := os.WriteFile(filepath.Join(dir, "a.yaml"), []byte(podYAML("a", "busybox:1.38")), 0o644); err != nil {
		t.Fatal(err)
	}
	got = h.waitDesired("a on busybox:1.38", func(m map[string]desiredEntry) bool {
		e, ok := m["a-node-1"]
		return ok && e.Pod.Spec.Containers[0].Image == "busybox:1.38" && len(m) == 2
	})
	if got["a-node-1"].Pod.UID == a2.Pod.UID {
		t.Errorf("in-place change kept UID %s", a2.Pod.UID)
	}

	// Remove.
	if err := os.Remove(filepath.Join(dir, "b.yaml")); err != nil {
		t.Fatal(err)
	}
	h.waitNames("a-node-1")

	// A hidden file never counted.
	if _, ok := h.desired()["hidden-node-1"]; ok {
		t.Error("a file starting with '.' was read")
	}
}

// TestFileSourceRelist: with no file events at all, the periodic listing
// (fileCheckFrequency, driven here by a fake clock) picks up every change.
func TestFileSourceRelist(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yaml"), podYAML("a", "busybox:1.36"))
	h := newHarness(t, func(c *config.Config) {
		c.Sources.StaticPodPath = dir
		c.Sources.FileCheckFrequency = 20 * time.Second
	})
	clk := clocktesting.NewFakeClock(time.Now())
	h.opts.Clock = clk
	h.opts.NoWatch = true
	h.start()
	h.waitNames("a-node-1")

	// tick advances the fake clock by one period once the source waits on
	// its ticker.
	tick := func() {
		t.Helper()
		waitFor(t, "the source to wait on its ticker", func() (bool, string) { return clk.HasWaiters(), "" })
		clk.Step(20 * time.Second)
	}

	writeFile(t, filepath.Join(dir, "b.yaml"), podYAML("b", "busybox:1.36"))
	if err := os.WriteFile(filepath.Join(dir, "a.yaml"), []byte(podYAML("a", "busybox:1.37")), 0o644); err != nil {
		t.Fatal(err)
	}
	tick()
	h.waitDesired("b added and a updated by the re-list", func(m map[string]desiredEntry) bool {
		a, okA := m["a-node-1"]
		_, okB := m["b-node-1"]
		return len(m) == 2 && okA && okB && a.Pod.Spec.Containers[0].Image == "busybox:1.37"
	})

	if err := os.Remove(filepath.Join(dir, "a.yaml")); err != nil {
		t.Fatal(err)
	}
	tick()
	h.waitNames("b-node-1")
}

// TestFileSourceRejects: a broken YAML file and an invalid pod are each
// rejected with an event naming the file (and the field); the good pod is
// not touched; fixing a file brings its pod in; breaking a file again
// (as a half-written save would) keeps its last good pod.
func TestFileSourceRejects(t *testing.T) {
	dir := t.TempDir()
	good, broken, invalid := filepath.Join(dir, "good.yaml"), filepath.Join(dir, "broken.yaml"), filepath.Join(dir, "invalid.yaml")
	writeFile(t, good, podYAML("good", "busybox:1.36"))
	brokenYAML := "apiVersion: v1\nkind: Pod\nmetadata:\n  name: broken\nspec:\n  containers:\n  - name: main\n    image: [busybox\n"
	writeFile(t, broken, brokenYAML)
	writeFile(t, invalid, strings.Replace(podYAML("invalid", "busybox:1.36"), "spec:\n", "spec:\n  restartPolicy: Sometimes\n", 1))
	h := newHarness(t, func(c *config.Config) { c.Sources.StaticPodPath = dir })
	h.start()

	g := h.waitNames("good-node-1")["good-node-1"]
	h.waitAllReady()
	ev := h.waitEvent("broken file rejected", func(e schemas.Event) bool {
		return strings.Contains(e.Message, broken)
	})
	if ev.Reason != ReasonFailedValidation || ev.Type != corev1.EventTypeWarning || ev.Object.Kind != "Node" || ev.Component != "sources" {
		t.Errorf("broken-file event = %+v", ev)
	}
	ev = h.waitEvent("invalid pod rejected", func(e schemas.Event) bool {
		return strings.Contains(e.Message, invalid)
	})
	if ev.Reason != ReasonFailedValidation || ev.Object.Kind != "Pod" || ev.Object.Name != "invalid-node-1" ||
		!strings.Contains(ev.Message, "spec.restartPolicy") || !strings.Contains(ev.Message, `"Sometimes"`) {
		t.Errorf("invalid-pod event = %+v", ev)
	}

	// Fix the broken file: its pod comes in, good stays as it was.
	writeFile(t, broken, podYAML("broken", "busybox:1.36"))
	got := h.waitNames("good-node-1", "broken-node-1")
	if got["good-node-1"].rev != g.rev {
		t.Errorf("good pod rewritten while other files changed")
	}
	fixed := got["broken-node-1"]

	// Half-written again: the last good version stays, and it is reported.
	before := h.eventCount(func(e schemas.Event) bool { return strings.Contains(e.Message, broken) })
	if err := os.WriteFile(broken, []byte(podYAML("broken", "busybox:1.36")[:40]), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a second event for the broken file", func() (bool, string) {
		return h.eventCount(func(e schemas.Event) bool { return strings.Contains(e.Message, broken) }) > before, ""
	})
	// The invalid file's content did not change: it is not reported again.
	if n := h.eventCount(func(e schemas.Event) bool { return strings.Contains(e.Message, invalid) }); n != 1 {
		t.Errorf("invalid file reported %d times, want once", n)
	}
	got = h.desired()
	if e, ok := got["broken-node-1"]; !ok || e.rev != fixed.rev || got["good-node-1"].rev != g.rev {
		t.Fatalf("a half-written file changed the bucket: %s", describe(got))
	}
	// Fix the invalid pod.
	writeFile(t, invalid, podYAML("invalid", "busybox:1.36"))
	h.waitNames("good-node-1", "broken-node-1", "invalid-node-1")
}

// TestFileSourcePaths: a static pod path that does not exist yet is an
// empty list (the source is ready); when it appears, its pods come in. A
// single manifest file works as the path too.
func TestFileSourcePaths(t *testing.T) {
	t.Run("missing directory", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "manifests")
		h := newHarness(t, func(c *config.Config) { c.Sources.StaticPodPath = dir })
		h.start()
		h.waitAllReady()
		if n := len(h.desired()); n != 0 {
			t.Fatalf("%d pods from a missing directory", n)
		}
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		// The directory is watched once a listing finds it; the creation
		// event of the directory triggers that listing.
		waitFor(t, "the new directory to be watched", func() (bool, string) {
			writeFile(t, filepath.Join(dir, "a.yaml"), podYAML("a", "busybox:1.36"))
			time.Sleep(300 * time.Millisecond)
			_, ok := h.desired()["a-node-1"]
			return ok, ""
		})
	})
	t.Run("single file", func(t *testing.T) {
		dir := t.TempDir()
		file := filepath.Join(dir, "pod.yaml")
		writeFile(t, filepath.Join(dir, "other.yaml"), podYAML("other", "busybox:1.36"))
		writeFile(t, file, podYAML("only", "busybox:1.36"))
		h := newHarness(t, func(c *config.Config) { c.Sources.StaticPodPath = file })
		h.start()
		h.waitNames("only-node-1")
		writeFile(t, file, podYAML("only", "busybox:1.37"))
		h.waitDesired("the file's new version", func(m map[string]desiredEntry) bool {
			e, ok := m["only-node-1"]
			return ok && len(m) == 1 && e.Pod.Spec.Containers[0].Image == "busybox:1.37"
		})
		if err := os.Remove(file); err != nil {
			t.Fatal(err)
		}
		h.waitNames()
	})
}

// TestNoSources: with no source configured the node runs no pods, and says
// at once that all (zero) sources are ready.
func TestNoSources(t *testing.T) {
	h := newHarness(t, nil)
	h.start()
	r := h.waitAllReady()
	if len(r.Configured) != 0 || len(r.Ready) != 0 {
		t.Errorf("ready = %+v", r)
	}
}
