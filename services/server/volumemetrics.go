package server

import (
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodelet/nodelet/schemas"
)

// volumeStatsFamilies are one set of the six volume stats gauges of the
// kubelet's volume stats collector (pkg/kubelet/metrics/collectors/
// volume_stats.go) under one prefix and label names.
type volumeStatsFamilies struct {
	capacity, available, used, inodes, inodesFree, inodesUsed *prometheus.Desc
}

func newVolumeStatsFamilies(prefix, helpPrefix string, labels ...string) volumeStatsFamilies {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(prefix+name, helpPrefix+help, labels, nil)
	}
	return volumeStatsFamilies{
		capacity:   d("capacity_bytes", "Capacity in bytes of the volume"),
		available:  d("available_bytes", "Number of available bytes in the volume"),
		used:       d("used_bytes", "Number of used bytes in the volume"),
		inodes:     d("inodes", "Maximum number of inodes in the volume"),
		inodesFree: d("inodes_free", "Number of free inodes in the volume"),
		inodesUsed: d("inodes_used", "Number of used inodes in the volume"),
	}
}

func (f volumeStatsFamilies) all() []*prometheus.Desc {
	return []*prometheus.Desc{f.capacity, f.available, f.used, f.inodes, f.inodesFree, f.inodesUsed}
}

// emit sends v's six gauges (0 for a figure not measured).
func (f volumeStatsFamilies) emit(ch chan<- prometheus.Metric, v *statsapi.VolumeStats, lv ...string) {
	for _, g := range []struct {
		desc *prometheus.Desc
		v    *uint64
	}{{f.capacity, v.CapacityBytes}, {f.available, v.AvailableBytes}, {f.used, v.UsedBytes},
		{f.inodes, v.Inodes}, {f.inodesFree, v.InodesFree}, {f.inodesUsed, v.InodesUsed}} {
		var val float64
		if g.v != nil {
			val = float64(*g.v)
		}
		ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, val, lv...)
	}
}

var (
	// kubeletVolumeStats are the kubelet's own: kubelet_volume_stats_*
	// {namespace, persistentvolumeclaim}, one series per claim.
	kubeletVolumeStats = newVolumeStatsFamilies("kubelet_volume_stats_", "[ALPHA] ", "namespace", "persistentvolumeclaim")
	// nodeletVolumeStats are the same under nodelet_ names (kept for
	// nodelet's earlier dashboards).
	nodeletVolumeStats = newVolumeStatsFamilies("nodelet_volume_stats_", "", "namespace", "persistentvolumeclaim")
	// podVolumeStats are every volume with stats, emptyDir, configMap,
	// secret, projected and CSI volumes included, by pod and volume name:
	// the kubelet's label names cannot carry a volume without a claim, so
	// these have a family of their own.
	podVolumeStats = newVolumeStatsFamilies("nodelet_pod_volume_stats_", "", "namespace", "pod", "volume")
)

// volumeStatsCollector is the kubelet's volumeStatsCollector over the
// volume stats nodelet-runtime last published: one series per claim (the
// first pod's measure when several pods mount it) in kubelet_volume_stats_*
// and nodelet_volume_stats_*, and one per pod volume in
// nodelet_pod_volume_stats_* (pods that left the desired bucket have none).
type volumeStatsCollector struct {
	stats func() *schemas.PodVolumeStats
	pod   func(uid string) *corev1.Pod
}

func (c volumeStatsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, f := range []volumeStatsFamilies{kubeletVolumeStats, nodeletVolumeStats, podVolumeStats} {
		for _, d := range f.all() {
			ch <- d
		}
	}
}

func (c volumeStatsCollector) Collect(ch chan<- prometheus.Metric) {
	rec := c.stats()
	if rec == nil {
		return
	}
	seen := map[statsapi.PVCReference]bool{}
	for uid, vols := range rec.Pods {
		var pod *corev1.Pod
		if c.pod != nil {
			pod = c.pod(uid)
		}
		for i := range vols {
			v := &vols[i]
			if pod != nil {
				podVolumeStats.emit(ch, v, pod.Namespace, pod.Name, v.Name)
			}
			if v.PVCRef == nil || seen[*v.PVCRef] {
				continue
			}
			seen[*v.PVCRef] = true
			kubeletVolumeStats.emit(ch, v, v.PVCRef.Namespace, v.PVCRef.Name)
			nodeletVolumeStats.emit(ch, v, v.PVCRef.Namespace, v.PVCRef.Name)
		}
	}
}
