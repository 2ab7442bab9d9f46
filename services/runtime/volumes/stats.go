package volumes

import (
	"context"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/hostinfo"
)

// PodStats are a pod's volume stats as the kubelet's volume stats
// calculator and makePodStorageStats make them.
type PodStats struct {
	// Volumes: its local ephemeral volumes (emptyDir on disk, configMap),
	// then the others, each group by name.
	Volumes []statsapi.VolumeStats
	// Ephemeral is what its local ephemeral volumes and its /etc/hosts
	// file use (UsedBytes, InodesUsed), part of the pod's
	// ephemeral-storage use beside its containers' writable layers and
	// logs.
	Ephemeral statsapi.FsStats
}

// statsCalculator is the kubelet's volume stats calculator
// (pkg/kubelet/server/stats/volume_stat_calculator.go) with the metrics
// providers of the volume plugins: it measures the volumes the pods have
// mounted (pods.go), a CSI volume through its driver (csi_metrics.go).
type statsCalculator struct {
	stateDir string
	clock    clock.PassiveClock
	pods     mountedVolumeLister
	csi      csiStatser
}

// mountedVolumeLister lists the volumes set up for each pod, by pod UID,
// with the pods' specs (trackedPods).
type mountedVolumeLister interface {
	mountedVolumes() (map[string][]mountedVolume, map[string]*corev1.Pod)
}

// mountedVolume is a pod's volume and its host path.
type mountedVolume struct {
	spec corev1.Volume
	path string
}

// csiStatser measures a published CSI volume through its driver
// (csi_metrics.go).
type csiStatser interface {
	volumeStats(ctx context.Context, path string, now metav1.Time) (statsapi.FsStats, bool)
	blockVolumeStats(ctx context.Context, link string, now metav1.Time) (statsapi.FsStats, bool)
}

var (
	_ mountedVolumeLister = (*trackedPods)(nil)
	_ csiStatser          = (*csiPlugin)(nil)
)

// podStats measures the volumes set up for the pods, by pod UID, as the
// kubelet's volume stats calculator: emptyDir, configMap, secret,
// downwardAPI and projected volumes by walking them (du) and statfs of
// their filesystem (its MetricsDu), a CSI volume through its driver's
// NodeGetVolumeStats (when the driver has GET_VOLUME_STATS; a raw block
// volume too, its capacity as the driver tells it), a local volume by
// statfs. hostPath volumes (and hostPath PVs) have no stats, as
// with the kubelet. A volume that cannot be measured is left out.
func (s *statsCalculator) podStats(ctx context.Context) map[string]PodStats {
	pods, specs := s.pods.mountedVolumes()
	out := map[string]PodStats{}
	for uid, vols := range pods {
		pod := specs[uid]
		var st PodStats
		var ephemeral, others []statsapi.VolumeStats
		for _, v := range vols {
			fs, ok := s.measure(ctx, &v.spec, v.path)
			if !ok {
				continue
			}
			vs := statsapi.VolumeStats{Name: v.spec.Name, FsStats: fs}
			if v.spec.PersistentVolumeClaim != nil || v.spec.Ephemeral != nil {
				claim, _, _ := claimOf(pod, &v.spec)
				vs.PVCRef = &statsapi.PVCReference{Name: claim, Namespace: pod.Namespace}
			}
			if localEphemeral(&v.spec) {
				ephemeral = append(ephemeral, vs)
				st.Ephemeral.UsedBytes = add(st.Ephemeral.UsedBytes, fs.UsedBytes)
				st.Ephemeral.InodesUsed = add(st.Ephemeral.InodesUsed, fs.InodesUsed)
			} else {
				others = append(others, vs)
			}
		}
		// The kubelet's getPodEtcHostsStats.
		if b, n, err := hostinfo.DiskUsage(filepath.Join(PodDir(s.stateDir, uid), "etc-hosts")); err == nil {
			st.Ephemeral.UsedBytes, st.Ephemeral.InodesUsed = add(st.Ephemeral.UsedBytes, &b), add(st.Ephemeral.InodesUsed, &n)
		}
		byName := func(a, b statsapi.VolumeStats) int { return strings.Compare(a.Name, b.Name) }
		slices.SortFunc(ephemeral, byName)
		slices.SortFunc(others, byName)
		st.Volumes = append(ephemeral, others...)
		if len(st.Volumes) > 0 || st.Ephemeral.UsedBytes != nil {
			st.Ephemeral.Time = metav1.NewTime(s.clock.Now())
			out[uid] = st
		}
	}
	return out
}

// localEphemeral is the kubelet's IsLocalEphemeralVolume: the volumes
// counted in a pod's ephemeral storage (gitRepo, which nodelet refuses,
// aside).
func localEphemeral(v *corev1.Volume) bool {
	return (v.EmptyDir != nil && v.EmptyDir.Medium == corev1.StorageMediumDefault) || v.ConfigMap != nil
}

func add(sum, v *uint64) *uint64 {
	if v == nil {
		return sum
	}
	var s uint64
	if sum != nil {
		s = *sum
	}
	s += *v
	return &s
}

// measure is the volume's metrics provider: MetricsDu, MetricsStatFS (local
// volumes) or the CSI driver's; hostPath has none.
func (s *statsCalculator) measure(ctx context.Context, v *corev1.Volume, path string) (statsapi.FsStats, bool) {
	now := metav1.NewTime(s.clock.Now())
	switch {
	case v.EmptyDir != nil, v.ConfigMap != nil, v.Secret != nil, v.DownwardAPI != nil, v.Projected != nil:
		used, inodesUsed, err := hostinfo.DiskUsage(path)
		if err != nil {
			return statsapi.FsStats{}, false
		}
		fs, ok := statfs(path, now)
		if !ok {
			return statsapi.FsStats{}, false
		}
		fs.UsedBytes, fs.InodesUsed = &used, &inodesUsed
		return fs, true
	case filepath.Base(filepath.Dir(filepath.Dir(path))) == pluginCSI:
		return s.csi.volumeStats(ctx, path, now)
	case filepath.Base(filepath.Dir(path)) == pluginCSIDevices:
		return s.csi.blockVolumeStats(ctx, path, now)
	case filepath.Base(filepath.Dir(path)) == pluginLocal:
		return statfs(path, now)
	}
	return statsapi.FsStats{}, false
}

// statfs is the kubelet's MetricsStatFS: the filesystem's figures.
func statfs(path string, now metav1.Time) (statsapi.FsStats, bool) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return statsapi.FsStats{}, false
	}
	bs := uint64(st.Bsize)
	capacity, avail, used := st.Blocks*bs, st.Bavail*bs, (st.Blocks-st.Bfree)*bs
	inodes, free := st.Files, st.Ffree
	usedInodes := inodes - free
	return statsapi.FsStats{Time: now, CapacityBytes: &capacity, AvailableBytes: &avail, UsedBytes: &used,
		Inodes: &inodes, InodesFree: &free, InodesUsed: &usedInodes}, true
}

func nonNeg(v int64) *uint64 {
	if v < 0 {
		v = 0
	}
	u := uint64(v)
	return &u
}
