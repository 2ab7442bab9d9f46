package sources

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/bus/bustest"
	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/schemas"
)

// TestBadUIDNeverBlocksGoodPods: a manifest whose pod has a UID NATS
// refuses as a key ("0.", "x.", "..") beside a good pod in another file:
// the good pod is published, each bad one is rejected with an event naming
// its file, and the sources become ready.
func TestBadUIDNeverBlocksGoodPods(t *testing.T) {
	for _, uid := range []string{"0.", "x.", "a..b", ".a"} {
		t.Run(uid, func(t *testing.T) {
			dir := t.TempDir()
			bad := filepath.Join(dir, "0-bad.yaml") // sorts first, as its UID would
			writeFile(t, bad, strings.Replace(podYAML("bad", "busybox:1.36"), "metadata:\n", "metadata:\n  uid: \""+uid+"\"\n", 1))
			writeFile(t, filepath.Join(dir, "good.yaml"), podYAML("good", "busybox:1.36"))
			h := newHarness(t, func(c *config.Config) { c.Sources.StaticPodPath = dir })
			h.start()
			h.waitNames("good-node-1")
			ev := h.waitEvent("rejection of the bad pod", func(e schemas.Event) bool {
				return e.Reason == ReasonFailedValidation && strings.Contains(e.Message, bad) && strings.Contains(e.Message, "metadata.uid")
			})
			if ev.Object.Name != "bad-node-1" {
				t.Fatalf("rejection names %q", ev.Object.Name)
			}
			h.waitAllReady()
		})
	}
}

// TestPodTooLargeForTheBusIsRejectedOnce: a pod the bus refuses to store
// (larger than bus.maxValueSize) is rejected with one event; the other pod
// and the ready marker are published all the same.
func TestPodTooLargeForTheBusIsRejectedOnce(t *testing.T) {
	dir := t.TempDir()
	h := newHarness(t, func(c *config.Config) { c.Sources.StaticPodPath = dir })
	// A bus that takes values of 16 KiB at most.
	h.bus = bustest.StartWithLimits(t, t.TempDir(), bus.Limits{MaxValueSize: 16 << 10})
	h.cfg.Node.StateDir = h.bus.StateDir
	h.cfg.Bus.Listen = strings.TrimPrefix(h.bus.URL, "nats://")
	h.tap = h.bus.Connect(bus.Tap)
	h.subscribeEvents()
	big := podYAML("big", "busybox:1.36") + "  - name: filler\n    image: busybox:1.36\n    env:\n    - name: X\n      value: \"" + strings.Repeat("x", 32<<10) + "\"\n"
	writeFile(t, filepath.Join(dir, "0-big.yaml"), big)
	writeFile(t, filepath.Join(dir, "good.yaml"), podYAML("good", "busybox:1.36"))
	h.start()
	h.waitNames("good-node-1")
	h.waitAllReady()
	h.waitEvent("rejection of the big pod", func(e schemas.Event) bool {
		return e.Reason == ReasonFailedValidation && e.Object.Name == "big-node-1" && strings.Contains(e.Message, "cannot be stored")
	})
	// Another flush (a file changes) does not report it again.
	writeFile(t, filepath.Join(dir, "good.yaml"), podYAML("good", "busybox:1.37"))
	h.waitDesired("good at 1.37", func(m map[string]desiredEntry) bool {
		return strings.Contains(describe(m), "busybox:1.37")
	})
	if n := h.eventCount(func(e schemas.Event) bool { return e.Object.Name == "big-node-1" }); n != 1 {
		t.Fatalf("big pod reported %d times", n)
	}
}
