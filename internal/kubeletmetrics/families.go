package kubeletmetrics

// Required are the kubelet's families nodelet's /metrics must have on a
// cluster node that runs a pod with an emptyDir volume (issue 36): the
// e2e test TestKubeletAPI fails when one is missing. Families that exist
// only with a claim, with certificate rotation or after an eviction are
// in RequiredWith, checked where those happen.
var Required = []string{
	"kubelet_running_pods",
	"kubelet_running_containers",
	"kubelet_pod_start_duration_seconds",
	"kubelet_pod_start_sli_duration_seconds",
	"kubelet_pod_start_total_duration_seconds",
	"kubelet_pod_worker_duration_seconds",
	"kubelet_pod_status_sync_duration_seconds",
	"kubelet_pleg_relist_duration_seconds",
	"kubelet_pleg_relist_interval_seconds",
	"kubelet_pleg_last_seen_seconds",
	"kubelet_evictions",
	"kubelet_node_name",
	"kubelet_runtime_operations_total",
	"kubelet_runtime_operations_duration_seconds",
	"kubelet_runtime_operations_errors_total",
	"kubelet_run_podsandbox_duration_seconds",
	"kubelet_started_pods_total",
	"kubelet_started_containers_total",
	"kubelet_http_requests_total",
	"kubelet_http_requests_duration_seconds",
	"kubelet_http_inflight_requests",
	"rest_client_requests_total",
	"rest_client_request_duration_seconds",
	"storage_operation_duration_seconds",
}

// RequiredWith are the families that need a condition the kubelet's need
// too, by the test that checks them.
var RequiredWith = map[string][]string{
	// A pod pulling an image that is not on the node.
	"an image pull": {"kubelet_image_pull_duration_seconds"},
	// A claim with stats (services/server TestVolumeStatsInSummaryAndMetrics).
	"a persistent volume claim": {"kubelet_volume_stats_capacity_bytes", "kubelet_volume_stats_available_bytes",
		"kubelet_volume_stats_used_bytes", "kubelet_volume_stats_inodes", "kubelet_volume_stats_inodes_free",
		"kubelet_volume_stats_inodes_used"},
	// node.rotateCertificates and server.serverTLSBootstrap
	// (internal/e2e TestTLSBootstrapRotation).
	"certificate rotation": {"kubelet_certificate_manager_client_ttl_seconds",
		"kubelet_certificate_manager_client_expiration_renew_errors", "kubelet_certificate_manager_server_ttl_seconds",
		"kubelet_certificate_manager_server_rotation_seconds", "kubelet_server_expiration_renew_errors"},
}
