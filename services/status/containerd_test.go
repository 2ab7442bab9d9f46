package status

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/testenv"
	"github.com/nodelet/nodelet/schemas"
)

// TestContainerdNodeInfo runs a real pod in a real containerd and reads the
// node's runtime version and images (from CRI Version and ListImages) and
// the CRI call metrics. (/stats/summary from the same pod: services/server
// TestContainerdReadOnlyAPI.)
func TestContainerdNodeInfo(t *testing.T) {
	testenv.RequiresRoot(t)
	h := newHarness(t)
	ctrd := testenv.NewContainerd(t, testenv.ContainerdOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	clients := ctrd.Clients(ctx, t)
	testenv.RunBusyboxPod(ctx, t, clients.Runtime, h.cfg.Node.PodLogsDir, "default", "stats", "uid-stats")

	s := h.start(func(o *Options) { o.CRI = clients })

	// The node: runtime version from CRI Version, images from ListImages.
	waitFor(t, 30*time.Second, "the node record with the runtime's version and images", func() bool {
		rec, _, err := bus.Get[schemas.NodeRecord](ctx, h.tap, bus.BucketNode, bus.KeyNode)
		if err != nil || rec == nil {
			return false
		}
		ni := rec.Node.Status.NodeInfo
		hasBusybox := false
		for _, im := range rec.Node.Status.Images {
			for _, n := range im.Names {
				hasBusybox = hasBusybox || strings.Contains(n, "busybox")
			}
		}
		return strings.HasPrefix(ni.ContainerRuntimeVersion, "containerd://") && hasBusybox
	})

	m := metricsText(t, s.Daemon)
	for _, want := range []string{`nodelet_runtime_operations_duration_seconds_count{operation_type="list_images"}`,
		`nodelet_runtime_operations_total{operation_type="version"}`} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
