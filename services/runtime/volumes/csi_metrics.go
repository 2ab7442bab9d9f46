package volumes

import (
	"context"
	"os"
	"path/filepath"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// volumeStats is the kubelet's CSI metrics provider (csi_metrics.go):
// NodeGetVolumeStats of the volume published at path, when its driver has
// GET_VOLUME_STATS.
func (c *csiPlugin) volumeStats(ctx context.Context, path string, now metav1.Time) (statsapi.FsStats, bool) {
	return c.statsOf(ctx, filepath.Dir(path), path, now)
}

// blockVolumeStats is the same for a raw block volume (the kubelet's
// csiBlockMapper metrics): link is the pod's device link
// (<pod>/volumeDevices/kubernetes.io~csi/<spec>), the driver is asked about
// the device it published there. The kubelet names its global map path
// (<volumeDevices>/<spec>/dev/<podUID>), which nodelet does not make; the
// publish path holds the same device.
func (c *csiPlugin) blockVolumeStats(ctx context.Context, link string, now metav1.Time) (statsapi.FsStats, bool) {
	target, err := os.Readlink(link)
	if err != nil {
		return statsapi.FsStats{}, false
	}
	return c.statsOf(ctx, filepath.Join(volumeDevicesDir(c.stateDir), filepath.Base(link), "data"), target, now)
}

// statsOf asks the driver of the volume whose vol_data.json is in dataDir
// for the stats of path.
func (c *csiPlugin) statsOf(ctx context.Context, dataDir, path string, now metav1.Time) (statsapi.FsStats, bool) {
	data, err := loadVolData(dataDir)
	if err != nil {
		return statsapi.FsStats{}, false
	}
	d, err := c.driver(data.DriverName)
	if err != nil || !d.VolumeStats {
		return statsapi.FsStats{}, false
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := d.Node.NodeGetVolumeStats(cctx, &csipb.NodeGetVolumeStatsRequest{VolumeId: data.VolumeHandle, VolumePath: path})
	if err != nil {
		c.log.Debug("NodeGetVolumeStats failed", "driver", data.DriverName, "volumeHandle", data.VolumeHandle, "err", err)
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
}
