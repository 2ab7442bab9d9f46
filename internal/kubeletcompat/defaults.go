package kubeletcompat

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-base/featuregate"
	logsapi "k8s.io/component-base/logs/api/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
)

// setDefaults is SetDefaults_KubeletConfiguration of k8s.io/kubernetes
// v1.37.2, pkg/kubelet/apis/config/v1beta1/defaults.go, which the main
// module cannot import: the same defaults in the same order, the two that
// depend on a feature gate decided by gates (the kubelet's, with the
// configuration's featureGates applied).
func setDefaults(obj *kubeletv1beta1.KubeletConfiguration, gates featuregate.FeatureGate) {
	zero := metav1.Duration{}
	dur := func(p *metav1.Duration, d time.Duration) {
		if *p == zero {
			*p = metav1.Duration{Duration: d}
		}
	}
	def := func(p *string, v string) {
		if *p == "" {
			*p = v
		}
	}
	if obj.EnableServer == nil {
		obj.EnableServer = ptr.To(true)
	}
	dur(&obj.SyncFrequency, time.Minute)
	dur(&obj.FileCheckFrequency, 20*time.Second)
	dur(&obj.HTTPCheckFrequency, 20*time.Second)
	def(&obj.Address, "0.0.0.0")
	if obj.Port == 0 {
		obj.Port = 10250 // ports.KubeletPort
	}
	if obj.Authentication.Anonymous.Enabled == nil {
		obj.Authentication.Anonymous.Enabled = ptr.To(false)
	}
	if obj.Authentication.Webhook.Enabled == nil {
		obj.Authentication.Webhook.Enabled = ptr.To(true)
	}
	dur(&obj.Authentication.Webhook.CacheTTL, 2*time.Minute)
	if obj.Authorization.Mode == "" {
		obj.Authorization.Mode = kubeletv1beta1.KubeletAuthorizationModeWebhook
	}
	dur(&obj.Authorization.Webhook.CacheAuthorizedTTL, 5*time.Minute)
	dur(&obj.Authorization.Webhook.CacheUnauthorizedTTL, 30*time.Second)
	if obj.RegistryPullQPS == nil {
		obj.RegistryPullQPS = ptr.To[int32](5)
	}
	if obj.RegistryBurst == 0 {
		obj.RegistryBurst = 10
	}
	if obj.EventRecordQPS == nil {
		obj.EventRecordQPS = ptr.To[int32](50)
	}
	if obj.EventBurst == 0 {
		obj.EventBurst = 100
	}
	if obj.EnableDebuggingHandlers == nil {
		obj.EnableDebuggingHandlers = ptr.To(true)
	}
	if obj.HealthzPort == nil {
		obj.HealthzPort = ptr.To[int32](10248)
	}
	def(&obj.HealthzBindAddress, "127.0.0.1")
	if obj.OOMScoreAdj == nil {
		obj.OOMScoreAdj = ptr.To[int32](-999) // qos.KubeletOOMScoreAdj
	}
	dur(&obj.StreamingConnectionIdleTimeout, 4*time.Hour)
	if obj.NodeStatusReportFrequency == zero {
		// The update frequency when that is set explicitly, for backward compatibility.
		if obj.NodeStatusUpdateFrequency == zero {
			obj.NodeStatusReportFrequency = metav1.Duration{Duration: 5 * time.Minute}
		} else {
			obj.NodeStatusReportFrequency = obj.NodeStatusUpdateFrequency
		}
	}
	dur(&obj.NodeStatusUpdateFrequency, 10*time.Second)
	if obj.NodeLeaseDurationSeconds == 0 {
		obj.NodeLeaseDurationSeconds = 40
	}
	dur(&obj.ImageMinimumGCAge, 2*time.Minute)
	if obj.ImageGCHighThresholdPercent == nil {
		obj.ImageGCHighThresholdPercent = ptr.To[int32](85)
	}
	if obj.ImageGCLowThresholdPercent == nil {
		obj.ImageGCLowThresholdPercent = ptr.To[int32](80)
	}
	dur(&obj.VolumeStatsAggPeriod, time.Minute)
	if obj.CgroupsPerQOS == nil {
		obj.CgroupsPerQOS = ptr.To(true)
	}
	def(&obj.CgroupDriver, "cgroupfs")
	def(&obj.CPUManagerPolicy, "none")
	dur(&obj.CPUManagerReconcilePeriod, 10*time.Second)
	def(&obj.MemoryManagerPolicy, kubeletv1beta1.NoneMemoryManagerPolicy)
	def(&obj.TopologyManagerPolicy, kubeletv1beta1.NoneTopologyManagerPolicy)
	def(&obj.TopologyManagerScope, kubeletv1beta1.ContainerTopologyManagerScope)
	dur(&obj.RuntimeRequestTimeout, 2*time.Minute)
	def(&obj.HairpinMode, kubeletv1beta1.PromiscuousBridge)
	if obj.MaxPods == 0 {
		obj.MaxPods = 110
	}
	if obj.PodPidsLimit == nil || *obj.PodPidsLimit < 0 {
		obj.PodPidsLimit = ptr.To[int64](-1)
	}
	if obj.ResolverConfig == nil {
		obj.ResolverConfig = ptr.To("/etc/resolv.conf") // kubetypes.ResolvConfDefault
	}
	if obj.CPUCFSQuota == nil {
		obj.CPUCFSQuota = ptr.To(true)
	}
	if obj.CPUCFSQuotaPeriod == nil {
		obj.CPUCFSQuotaPeriod = &metav1.Duration{Duration: 100 * time.Millisecond}
	}
	if obj.NodeStatusMaxImages == nil {
		obj.NodeStatusMaxImages = ptr.To[int32](50)
	}
	if obj.MaxOpenFiles == 0 {
		obj.MaxOpenFiles = 1000000
	}
	def(&obj.ContentType, "application/vnd.kubernetes.protobuf")
	if obj.KubeAPIQPS == nil {
		obj.KubeAPIQPS = ptr.To[int32](50)
	}
	if obj.KubeAPIBurst == 0 {
		obj.KubeAPIBurst = 100
	}
	if obj.SerializeImagePulls == nil {
		// True unless maxParallelImagePulls asks for parallel pulls.
		obj.SerializeImagePulls = ptr.To(obj.MaxParallelImagePulls == nil || *obj.MaxParallelImagePulls < 2)
	}
	dur(&obj.EvictionPressureTransitionPeriod, 5*time.Minute)
	if obj.MergeDefaultEvictionSettings == nil {
		obj.MergeDefaultEvictionSettings = ptr.To(false)
	}
	if obj.EnableControllerAttachDetach == nil {
		obj.EnableControllerAttachDetach = ptr.To(true)
	}
	if obj.MakeIPTablesUtilChains == nil {
		obj.MakeIPTablesUtilChains = ptr.To(true)
	}
	if obj.IPTablesMasqueradeBit == nil {
		obj.IPTablesMasqueradeBit = ptr.To[int32](14)
	}
	if obj.IPTablesDropBit == nil {
		obj.IPTablesDropBit = ptr.To[int32](15)
	}
	if obj.FailSwapOn == nil {
		obj.FailSwapOn = ptr.To(true)
	}
	def(&obj.ContainerLogMaxSize, "10Mi")
	if obj.ContainerLogMaxFiles == nil {
		obj.ContainerLogMaxFiles = ptr.To[int32](5)
	}
	if obj.ContainerLogMaxWorkers == nil {
		obj.ContainerLogMaxWorkers = ptr.To[int32](1)
	}
	if obj.ContainerLogMonitorInterval == nil {
		obj.ContainerLogMonitorInterval = &metav1.Duration{Duration: 10 * time.Second}
	}
	if obj.ConfigMapAndSecretChangeDetectionStrategy == "" {
		obj.ConfigMapAndSecretChangeDetectionStrategy = kubeletv1beta1.WatchChangeDetectionStrategy
	}
	if obj.EnforceNodeAllocatable == nil {
		obj.EnforceNodeAllocatable = []string{"pods"}
	}
	def(&obj.VolumePluginDir, "/usr/libexec/kubernetes/kubelet-plugins/volume/exec/")
	logsapi.SetRecommendedLoggingConfiguration(&obj.Logging)
	if obj.EnableSystemLogHandler == nil {
		obj.EnableSystemLogHandler = ptr.To(true)
	}
	if obj.EnableProfilingHandler == nil {
		obj.EnableProfilingHandler = ptr.To(true)
	}
	if obj.EnableDebugFlagsHandler == nil {
		obj.EnableDebugFlagsHandler = ptr.To(true)
	}
	if obj.SeccompDefault == nil {
		obj.SeccompDefault = ptr.To(false)
	}
	if obj.FailCgroupV1 == nil {
		obj.FailCgroupV1 = ptr.To(true)
	}
	if obj.MemoryReservationPolicy == "" {
		obj.MemoryReservationPolicy = kubeletv1beta1.NoneMemoryReservationPolicy
	}
	if obj.RegisterNode == nil {
		obj.RegisterNode = ptr.To(true)
	}
	if obj.LocalStorageCapacityIsolation == nil {
		obj.LocalStorageCapacityIsolation = ptr.To(true)
	}
	def(&obj.ContainerRuntimeEndpoint, "unix:///run/containerd/containerd.sock")
	def(&obj.PodLogsDir, "/var/log/pods")
	if gates.Enabled("KubeletCrashLoopBackOffMax") && obj.CrashLoopBackOff.MaxContainerRestartPeriod == nil {
		obj.CrashLoopBackOff.MaxContainerRestartPeriod = &metav1.Duration{Duration: 300 * time.Second}
	}
	if gates.Enabled("KubeletEnsureSecretPulledImages") && obj.ImagePullCredentialsVerificationPolicy == "" {
		obj.ImagePullCredentialsVerificationPolicy = kubeletv1beta1.NeverVerifyPreloadedImages
	}
}

// applyLegacyDefaults is the kubelet's (cmd/kubelet/app/options): with no
// --config, the command line's historical defaults.
func applyLegacyDefaults(kc *kubeletv1beta1.KubeletConfiguration) {
	kc.Authentication.Anonymous.Enabled = ptr.To(true)
	kc.Authentication.Webhook.Enabled = ptr.To(false)
	kc.Authorization.Mode = kubeletv1beta1.KubeletAuthorizationModeAlwaysAllow
	kc.ReadOnlyPort = 10255 // ports.KubeletReadOnlyPort
}

// defaultEvictionHard is pkg/kubelet/eviction's DefaultEvictionHard (Linux).
func defaultEvictionHard() map[string]string {
	return map[string]string{"memory.available": "100Mi", "nodefs.available": "10%", "nodefs.inodesFree": "5%",
		"imagefs.available": "15%", "imagefs.inodesFree": "5%"}
}
