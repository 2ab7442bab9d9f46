package e2e_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/e2e"
	"github.com/nodelet/nodelet/internal/testenv/eventually"
)

// TestStaticPodEndToEnd is the first path through every stage: a static pod
// file → sources → admission → runtime on real containerd → prober →
// status on /pods, then removal.
func TestStaticPodEndToEnd(t *testing.T) {
	n := e2e.NewNode(t, e2e.NodeOptions{})
	n.WriteManifest("web.yaml", e2e.WebManifest)
	pod := n.WaitPod("web-"+nodeName, 90*time.Second, "Running and Ready", e2e.RunningReady)

	cs := e2e.CRIContainers(t, ctrd, string(pod.UID))
	if len(cs) != 1 || cs[0].State != runtimeapi.ContainerState_CONTAINER_RUNNING || cs[0].Metadata.Name != "httpd" {
		t.Fatalf("CRI containers of the pod: %+v", cs)
	}
	if sb := e2e.CRISandboxes(t, ctrd, string(pod.UID)); len(sb) != 1 {
		t.Fatalf("sandboxes: %d", len(sb))
	}
	if len(pod.Status.ContainerStatuses) != 1 || !pod.Status.ContainerStatuses[0].Ready ||
		pod.Status.ContainerStatuses[0].State.Running == nil || !strings.HasPrefix(pod.Status.ContainerStatuses[0].ContainerID, "containerd://") {
		t.Fatalf("container status: %+v", pod.Status.ContainerStatuses)
	}
	resp, err := http.Get("http://" + pod.Status.PodIP + ":8080/")
	if err != nil {
		t.Fatalf("GET pod: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || len(body) == 0 {
		t.Fatalf("GET pod: %s %q", resp.Status, body)
	}
	if pod.Annotations["kubernetes.io/config.source"] != "file" {
		t.Errorf("annotations: %v", pod.Annotations)
	}
	// The node's /metrics (nodelet-server) federates every daemon's metrics.
	mresp, err := http.Get("http://" + n.ReadOnly + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(mresp.Body)
	mresp.Body.Close()
	for _, want := range []string{"nodelet_running_pods", `nodelet_prober_probe_total{`, "nodelet_gc_"} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics has no %s", want)
		}
	}

	n.RemoveManifest("web.yaml")
	eventually.True(t, 60*time.Second, "containers and sandbox removed from CRI", func() bool {
		for _, c := range e2e.CRIContainers(t, ctrd, string(pod.UID)) {
			if c.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
				return false
			}
		}
		for _, s := range e2e.CRISandboxes(t, ctrd, string(pod.UID)) {
			if s.State == runtimeapi.PodSandboxState_SANDBOX_READY {
				return false
			}
		}
		return true
	})
	n.WaitPod("web-"+nodeName, 30*time.Second, "gone from /pods", func(p *corev1.Pod) bool { return p == nil })
}
