package server

import (
	"github.com/prometheus/client_golang/prometheus"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodelet/nodelet/schemas"
)

// volumeStatsDescs are the kubelet's volume stats gauges
// (pkg/kubelet/metrics/collectors/volume_stats.go,
// kubelet_volume_stats_*), under nodelet_ names, by namespace and claim.
var volumeStatsDescs = struct {
	capacity, available, used, inodes, inodesFree, inodesUsed *prometheus.Desc
}{
	capacity:   volumeStatsDesc("capacity_bytes", "Capacity in bytes of the volume"),
	available:  volumeStatsDesc("available_bytes", "Number of available bytes in the volume"),
	used:       volumeStatsDesc("used_bytes", "Number of used bytes in the volume"),
	inodes:     volumeStatsDesc("inodes", "Maximum number of inodes in the volume"),
	inodesFree: volumeStatsDesc("inodes_free", "Number of free inodes in the volume"),
	inodesUsed: volumeStatsDesc("inodes_used", "Number of used inodes in the volume"),
}

func volumeStatsDesc(name, help string) *prometheus.Desc {
	return prometheus.NewDesc("nodelet_volume_stats_"+name, help, []string{"namespace", "persistentvolumeclaim"}, nil)
}

// volumeStatsCollector is the kubelet's volumeStatsCollector over the
// volume stats nodelet-runtime last published: one series per claim (the
// first pod's measure when several pods mount it); volumes without a
// claim have none.
type volumeStatsCollector struct {
	stats func() *schemas.PodVolumeStats
}

func (c volumeStatsCollector) Describe(ch chan<- *prometheus.Desc) {
	d := volumeStatsDescs
	for _, x := range []*prometheus.Desc{d.capacity, d.available, d.used, d.inodes, d.inodesFree, d.inodesUsed} {
		ch <- x
	}
}

func (c volumeStatsCollector) Collect(ch chan<- prometheus.Metric) {
	rec := c.stats()
	if rec == nil {
		return
	}
	seen := map[statsapi.PVCReference]bool{}
	d := volumeStatsDescs
	for _, vols := range rec.Pods {
		for _, v := range vols {
			if v.PVCRef == nil || seen[*v.PVCRef] {
				continue
			}
			seen[*v.PVCRef] = true
			for _, g := range []struct {
				desc *prometheus.Desc
				v    *uint64
			}{{d.capacity, v.CapacityBytes}, {d.available, v.AvailableBytes}, {d.used, v.UsedBytes},
				{d.inodes, v.Inodes}, {d.inodesFree, v.InodesFree}, {d.inodesUsed, v.InodesUsed}} {
				var val float64
				if g.v != nil {
					val = float64(*g.v)
				}
				ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, val, v.PVCRef.Namespace, v.PVCRef.Name)
			}
		}
	}
}
