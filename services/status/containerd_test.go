package status

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/schemas"
	"github.com/nodelet/nodelet/services/common/cri"
	"github.com/nodelet/nodelet/services/common/images"
	"github.com/nodelet/nodelet/services/common/testenv"
)

// TestContainerdStatsAndNodeInfo runs a real pod in a real containerd and
// reads /stats/summary (from CRI stats), the node's runtime version and
// images (from CRI Version and ListImages) and the CRI call metrics.
func TestContainerdStatsAndNodeInfo(t *testing.T) {
	testenv.RequiresRoot(t)
	ctrd := testenv.NewContainerd(t, testenv.ContainerdOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	clients, err := cri.Connect(ctx, ctrd.Endpoint, "", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}

	h := newHarness(t)
	const (
		ns, name, uid = "default", "stats", "uid-stats"
	)
	logDir := filepath.Join(h.cfg.Node.PodLogsDir, ns+"_"+name+"_"+uid)
	sbConfig := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Namespace: ns, Uid: uid},
		Hostname:     name,
		LogDirectory: logDir,
		Labels:       map[string]string{"io.kubernetes.pod.name": name, "io.kubernetes.pod.namespace": ns, "io.kubernetes.pod.uid": uid},
		Linux:        &runtimeapi.LinuxPodSandboxConfig{},
	}
	sb, err := clients.Runtime.RunPodSandbox(ctx, sbConfig, "")
	if err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	if err := os.MkdirAll(filepath.Join(logDir, "app"), 0o755); err != nil {
		t.Fatal(err)
	}
	cid, err := clients.Runtime.CreateContainer(ctx, sb, &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "app"},
		Image:    &runtimeapi.ImageSpec{Image: images.BusyboxImage},
		Command:  []string{"sh", "-c", "echo hello; while true; do sleep 1; done"},
		LogPath:  "app/0.log",
		Labels:   map[string]string{"io.kubernetes.container.name": "app", "io.kubernetes.pod.uid": uid},
	}, sbConfig)
	if err != nil {
		t.Fatalf("CreateContainer: %v", err)
	}
	if err := clients.Runtime.StartContainer(ctx, cid); err != nil {
		t.Fatalf("StartContainer: %v", err)
	}

	s := h.start(func(o *Options) { o.CRI = clients })

	var sum statsapi.Summary
	var pod *statsapi.PodStats
	waitFor(t, 60*time.Second, "the pod in /stats/summary with cpu and memory", func() bool {
		getJSON(t, s.Service, "/stats/summary", &sum)
		pod = nil
		for i := range sum.Pods {
			if sum.Pods[i].PodRef.UID == uid {
				pod = &sum.Pods[i]
			}
		}
		return pod != nil && len(pod.Containers) == 1 && pod.Containers[0].CPU != nil && pod.Containers[0].Memory != nil &&
			pod.Containers[0].Memory.WorkingSetBytes != nil && *pod.Containers[0].Memory.WorkingSetBytes > 0
	})
	if pod.Network == nil || pod.Network.Name != "eth0" || pod.Network.RxBytes == nil {
		t.Errorf("pod network = %+v", pod.Network)
	}
	c := pod.Containers[0]
	if pod.PodRef.Name != name || pod.PodRef.Namespace != ns || c.Name != "app" || c.CPU.UsageCoreNanoSeconds == nil {
		t.Errorf("pod stats = %+v", pod)
	}
	if c.Rootfs == nil || c.Rootfs.UsedBytes == nil {
		t.Errorf("container rootfs = %+v", c.Rootfs)
	}
	if c.Logs == nil || c.Logs.UsedBytes == nil || *c.Logs.UsedBytes == 0 {
		t.Errorf("container logs = %+v (the container wrote a line)", c.Logs)
	}
	if pod.CPU == nil || pod.Memory == nil || pod.EphemeralStorage == nil {
		t.Errorf("pod cpu %+v memory %+v ephemeral %+v", pod.CPU, pod.Memory, pod.EphemeralStorage)
	}
	// Persistent volume stats come from the runtime's record.
	used := uint64(4096)
	h.put(h.runtime, bus.BucketRuntime, bus.KeyVolumeStats, &schemas.PodVolumeStats{Time: time.Now(), Pods: map[string][]statsapi.VolumeStats{
		uid: {{Name: "data", PVCRef: &statsapi.PVCReference{Name: "claim", Namespace: ns}, FsStats: statsapi.FsStats{UsedBytes: &used}}}}})
	waitFor(t, 30*time.Second, "the pod's volume stats in /stats/summary", func() bool {
		getJSON(t, s.Service, "/stats/summary", &sum)
		for _, p := range sum.Pods {
			if p.PodRef.UID == uid && len(p.VolumeStats) == 1 && p.VolumeStats[0].PVCRef != nil && p.VolumeStats[0].PVCRef.Name == "claim" &&
				p.VolumeStats[0].UsedBytes != nil && *p.VolumeStats[0].UsedBytes == used {
				return true
			}
		}
		return false
	})
	// (containerd computes the image filesystem's usage in the background,
	// so the bytes used may still read 0 this early.)
	if rt := sum.Node.Runtime; rt == nil || rt.ImageFs == nil || rt.ImageFs.UsedBytes == nil || rt.ImageFs.CapacityBytes == nil || *rt.ImageFs.CapacityBytes == 0 {
		t.Errorf("node runtime fs = %+v", sum.Node.Runtime)
	}

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

	_, m := get(t, s.Service, http.MethodGet, "/metrics")
	for _, want := range []string{`nodelet_runtime_operations_duration_seconds_count{operation_type="list_container_stats"}`,
		`nodelet_runtime_operations_total{operation_type="version"}`} {
		if !strings.Contains(string(m), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
