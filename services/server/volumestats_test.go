package server

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/cri"
	"github.com/nodelet/nodelet/internal/testenv"
	"github.com/nodelet/nodelet/schemas"
	dto "github.com/prometheus/client_model/go"
)

// The volume stats nodelet-runtime publishes reach /stats/summary as the
// kubelet's makePodStorageStats puts them: the pod's volumeStats (emptyDir
// and the others, a claim with its pvcRef) and, in its ephemeralStorage,
// what its local ephemeral volumes and /etc/hosts use beside its
// container's writable layer and log; /metrics has the claim's
// nodelet_volume_stats_* gauges (the kubelet's kubelet_volume_stats_*),
// one series per claim. Before, only persistent volumes were measured and
// ephemeral storage left them out; /metrics had no volume gauges.
func TestVolumeStatsInSummaryAndMetrics(t *testing.T) {
	testenv.RequiresRoot(t)
	ctrd := testenv.NewContainerd(t, testenv.ContainerdOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	clients := ctrd.Clients(ctx, t)
	cfg := testConfig(t)
	const ns, name, uid = "default", "vols", "uid-vols"
	testenv.RunBusyboxPod(ctx, t, clients.Runtime, cfg.Node.PodLogsDir, ns, name, uid)
	ts := startServer(t, cfg, &cri.Clients{Runtime: clients.Runtime, Image: clients.Image}, nil)

	u := func(v uint64) *uint64 { return &v }
	fs := func(used, inodes uint64) statsapi.FsStats {
		return statsapi.FsStats{Time: metav1.Now(), CapacityBytes: u(1 << 30), AvailableBytes: u(1<<30 - used),
			UsedBytes: u(used), Inodes: u(1000), InodesFree: u(1000 - inodes), InodesUsed: u(inodes)}
	}
	claim := &statsapi.PVCReference{Name: "data", Namespace: ns}
	rec := &schemas.PodVolumeStats{Time: time.Now().UTC(),
		Pods: map[string][]statsapi.VolumeStats{
			uid: {
				{Name: "cache", FsStats: fs(3<<20, 4)},
				{Name: "data", PVCRef: claim, FsStats: fs(5<<20, 7)},
				{Name: "token", FsStats: fs(4096, 3)},
			},
			"other-pod": {{Name: "data", PVCRef: claim, FsStats: fs(5<<20, 7)}},
		},
		Ephemeral: map[string]statsapi.FsStats{uid: {UsedBytes: u(3<<20 + 4096), InodesUsed: u(5)}},
	}
	// The pod is desired: its volumes are named in nodelet_pod_volume_stats_*.
	desired := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: uid}}
	if _, err := ts.b.Connect(bus.Sources).Put(ctx, bus.BucketDesired, uid, &schemas.PodDesired{Pod: desired, Source: schemas.SourceAPI}); err != nil {
		t.Fatal(err)
	}
	runtime := ts.b.Connect(bus.Runtime)
	if _, err := runtime.Put(ctx, bus.BucketRuntime, bus.KeyVolumeStats, rec); err != nil {
		t.Fatal(err)
	}

	var pod *statsapi.PodStats
	waitFor(t, 60*time.Second, "the pod's volumes in /stats/summary", func() bool {
		var sum statsapi.Summary
		ts.getJSON("/stats/summary", &sum)
		pod = nil
		for i := range sum.Pods {
			if sum.Pods[i].PodRef.UID == uid {
				pod = &sum.Pods[i]
			}
		}
		return pod != nil && len(pod.VolumeStats) == 3 && len(pod.Containers) == 1 && pod.Containers[0].Rootfs != nil
	})
	if v := pod.VolumeStats[0]; v.Name != "cache" || *v.UsedBytes != 3<<20 || *v.InodesUsed != 4 || v.PVCRef != nil {
		t.Errorf("volume 0: %+v", v)
	}
	if v := pod.VolumeStats[1]; v.Name != "data" || v.PVCRef == nil || *v.PVCRef != *claim {
		t.Errorf("volume 1: %+v", v)
	}
	c := pod.Containers[0]
	wantUsed := *c.Rootfs.UsedBytes + *c.Logs.UsedBytes + 3<<20 + 4096
	if e := pod.EphemeralStorage; e == nil || e.UsedBytes == nil || *e.UsedBytes != wantUsed || e.InodesUsed == nil || *e.InodesUsed < 5 {
		t.Errorf("ephemeral storage %+v, want %d bytes used (writable layer, log, emptyDir and /etc/hosts)", e, wantUsed)
	}

	var fams map[string]*dto.MetricFamily
	waitFor(t, 10*time.Second, "the pod desired: its volumes in nodelet_pod_volume_stats_*", func() bool {
		fams = ts.metrics("/metrics")
		return len(fams["nodelet_pod_volume_stats_used_bytes"].GetMetric()) == 3
	})
	labels := map[string]string{"namespace": ns, "persistentvolumeclaim": "data"}
	for _, prefix := range []string{"kubelet_volume_stats_", "nodelet_volume_stats_"} {
		for name, want := range map[string]float64{
			"capacity_bytes": 1 << 30, "available_bytes": 1<<30 - 5<<20, "used_bytes": 5 << 20,
			"inodes": 1000, "inodes_free": 993, "inodes_used": 7,
		} {
			name = prefix + name
			if v, ok := series(fams, name, labels); !ok || v != want {
				t.Errorf("%s%v = %v %v, want %v", name, labels, v, ok, want)
			}
			if n := len(fams[name].GetMetric()); n != 1 {
				t.Errorf("%s: %d series, want one for the claim", name, n)
			}
		}
	}
	// Every volume of the desired pod, the emptyDir-like "cache" included;
	// the other pod is not desired.
	for vol, want := range map[string]float64{"cache": 3 << 20, "data": 5 << 20, "token": 4096} {
		l := map[string]string{"namespace": ns, "pod": name, "volume": vol}
		if v, ok := series(fams, "nodelet_pod_volume_stats_used_bytes", l); !ok || v != want {
			t.Errorf("nodelet_pod_volume_stats_used_bytes%v = %v %v, want %v", l, v, ok, want)
		}
	}
}
