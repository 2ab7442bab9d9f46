package volumes

import (
	"context"
	"path/filepath"
	"sort"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// VolumeStats measures the persistent volumes set up for running pods, by
// pod UID, as the kubelet's volume stats calculator: a CSI volume through
// its driver's NodeGetVolumeStats (when the driver has GET_VOLUME_STATS),
// a local volume by statfs. hostPath volumes have no stats, as with the
// kubelet. A volume that cannot be measured is left out.
func (m *Manager) VolumeStats(ctx context.Context) map[string][]statsapi.VolumeStats {
	type vol struct {
		name, path string
		claim      *statsapi.PVCReference
	}
	m.mu.Lock()
	tracked := make(map[string]*podVolumes, len(m.pods))
	for uid, p := range m.pods {
		tracked[string(uid)] = p
	}
	m.mu.Unlock()
	pods := map[string][]vol{}
	for uid, p := range tracked {
		p.mu.Lock()
		pod := p.pod
		for name, path := range p.persistent {
			v := vol{name: name, path: path}
			if pod != nil {
				for i := range pod.Spec.Volumes {
					if pv := &pod.Spec.Volumes[i]; pv.Name == name && (pv.PersistentVolumeClaim != nil || pv.Ephemeral != nil) {
						claim, _, _ := claimOf(pod, pv)
						v.claim = &statsapi.PVCReference{Name: claim, Namespace: pod.Namespace}
					}
				}
			}
			pods[uid] = append(pods[uid], v)
		}
		p.mu.Unlock()
	}
	out := map[string][]statsapi.VolumeStats{}
	for uid, vols := range pods {
		for _, v := range vols {
			fs, ok := m.measure(ctx, v.path)
			if !ok {
				continue
			}
			out[uid] = append(out[uid], statsapi.VolumeStats{Name: v.name, PVCRef: v.claim, FsStats: fs})
		}
		sort.Slice(out[uid], func(i, j int) bool { return out[uid][i].Name < out[uid][j].Name })
	}
	return out
}

func (m *Manager) measure(ctx context.Context, path string) (statsapi.FsStats, bool) {
	now := metav1.NewTime(m.clock.Now())
	switch {
	case filepath.Base(filepath.Dir(filepath.Dir(path))) == pluginCSI:
		data, err := loadVolData(filepath.Dir(path))
		if err != nil {
			return statsapi.FsStats{}, false
		}
		d, err := m.driver(data.DriverName)
		if err != nil || !d.VolumeStats {
			return statsapi.FsStats{}, false
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		resp, err := d.Node.NodeGetVolumeStats(cctx, &csipb.NodeGetVolumeStatsRequest{VolumeId: data.VolumeHandle, VolumePath: path})
		if err != nil {
			m.log.Debug("NodeGetVolumeStats failed", "driver", data.DriverName, "volumeHandle", data.VolumeHandle, "err", err)
			return statsapi.FsStats{}, false
		}
		fs := statsapi.FsStats{Time: now}
		for _, u := range resp.GetUsage() {
			switch u.GetUnit() {
			case csipb.VolumeUsage_BYTES:
				fs.AvailableBytes, fs.CapacityBytes, fs.UsedBytes = nonNeg(u.GetAvailable()), nonNeg(u.GetTotal()), nonNeg(u.GetUsed())
			case csipb.VolumeUsage_INODES:
				fs.InodesFree, fs.Inodes, fs.InodesUsed = nonNeg(u.GetAvailable()), nonNeg(u.GetTotal()), nonNeg(u.GetUsed())
			}
		}
		return fs, true
	case filepath.Base(filepath.Dir(path)) == pluginLocal:
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
	return statsapi.FsStats{}, false
}

func nonNeg(v int64) *uint64 {
	if v < 0 {
		v = 0
	}
	u := uint64(v)
	return &u
}
