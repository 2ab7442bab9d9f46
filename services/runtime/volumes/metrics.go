package volumes

import (
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/kubeletmetrics"
)

// StorageOperationDuration is the kubelet's storage_operation_duration_seconds
// (pkg/volume/util/metrics.go storageOperationMetric): one observation per
// volume mount (MountVolume.SetUp of a volume not yet mounted, as the
// kubelet's operation executor records volume_mount) and per pod's volumes
// torn down (volume_unmount, plugin "" as nodelet unmounts a pod's
// directory at once), status success or fail-unknown, migrated false.
// nodelet-runtime registers it.
var StorageOperationDuration = kubeletmetrics.HistogramVec("storage_operation_duration_seconds",
	"Storage operation duration", kubeletmetrics.StorageOpBuckets, "volume_plugin", "operation_name", "status", "migrated")

// recordStorageOperation is the kubelet's OperationCompleteHook.
func recordStorageOperation(plugin, op string, start time.Time, err error) {
	status := "success"
	if err != nil {
		status = "fail-unknown"
	}
	StorageOperationDuration.WithLabelValues(plugin, op, status, "false").Observe(time.Since(start).Seconds())
}

// pluginName is the kubelet's name of v's volume plugin.
func pluginName(v *corev1.Volume) string {
	switch {
	case v.HostPath != nil:
		return "kubernetes.io/host-path"
	case v.EmptyDir != nil:
		return "kubernetes.io/empty-dir"
	case v.ConfigMap != nil:
		return "kubernetes.io/configmap"
	case v.Secret != nil:
		return "kubernetes.io/secret"
	case v.DownwardAPI != nil:
		return "kubernetes.io/downward-api"
	case v.Projected != nil:
		return "kubernetes.io/projected"
	case v.CSI != nil:
		return "kubernetes.io/csi:" + v.CSI.Driver
	}
	// A claim's plugin is its PersistentVolume's (CSI or local).
	return "kubernetes.io/csi"
}
