package testenv

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/cri"
	"github.com/nodelet/nodelet/internal/images"
)

// RunBusyboxPod runs, straight through CRI (no nodelet daemon), a pod
// sandbox ns/name with uid and the kubelet's CRI labels, and in it one
// busybox container "app" that prints hello and then sleeps, logging to
// <podLogsDir>/<ns>_<name>_<uid>/app/0.log as the kubelet lays logs out.
// It returns the container's ID; failures fail t.
func RunBusyboxPod(ctx context.Context, t testing.TB, rs internalapi.RuntimeService, podLogsDir, ns, name, uid string) string {
	t.Helper()
	return RunBusyboxPodIn(ctx, t, rs, podLogsDir, ns, name, uid, "")
}

// RunBusyboxPodIn is RunBusyboxPod with the sandbox's CgroupParent (a pod
// cgroup the test made; "" leaves it to the runtime).
func RunBusyboxPodIn(ctx context.Context, t testing.TB, rs internalapi.RuntimeService, podLogsDir, ns, name, uid, cgroupParent string) string {
	t.Helper()
	logDir := filepath.Join(podLogsDir, ns+"_"+name+"_"+uid)
	podLabels := map[string]string{cri.LabelPodName: name, cri.LabelPodNamespace: ns, cri.LabelPodUID: uid}
	sbConfig := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Namespace: ns, Uid: uid},
		Hostname:     name,
		LogDirectory: logDir,
		Labels:       podLabels,
		Linux:        &runtimeapi.LinuxPodSandboxConfig{CgroupParent: cgroupParent},
	}
	sb, err := rs.RunPodSandbox(ctx, sbConfig, "")
	if err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	if err := os.MkdirAll(filepath.Join(logDir, "app"), 0o755); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{cri.LabelContainerName: "app"}
	for k, v := range podLabels {
		labels[k] = v
	}
	cid, err := rs.CreateContainer(ctx, sb, &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "app"},
		Image:    &runtimeapi.ImageSpec{Image: images.BusyboxImage},
		Command:  []string{"sh", "-c", "echo hello; while true; do sleep 1; done"},
		LogPath:  "app/0.log",
		Labels:   labels,
	}, sbConfig)
	if err != nil {
		t.Fatalf("CreateContainer: %v", err)
	}
	if err := rs.StartContainer(ctx, cid); err != nil {
		t.Fatalf("StartContainer: %v", err)
	}
	return cid
}

// Clients connects the daemons' CRI client (internal/cri) to c, each call
// bounded by 30s, failing t when it cannot.
func (c *Containerd) Clients(ctx context.Context, t testing.TB) *cri.Clients {
	t.Helper()
	clients, err := cri.Connect(ctx, c.Endpoint, "", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return clients
}
