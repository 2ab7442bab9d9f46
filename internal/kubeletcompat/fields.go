package kubeletcompat

import (
	"fmt"
	"reflect"
	"strings"
	"time"

	libcgroups "github.com/opencontainers/cgroups"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/internal/config"
)

// Class is what nodelet does with a KubeletConfiguration field.
type Class int

const (
	// Honoured: the field sets a nodelet key (Field.Key).
	Honoured Class = iota
	// Refused: nodelet has no such setting; the field is accepted at the
	// kubelet's default and refused by name at any other value.
	Refused
	// Accepted: any value is taken and nodelet logs it with a warning when
	// not the default; only the kubelet's own diagnostics (log verbosity)
	// are here, never a behaviour the cluster sees.
	Accepted
)

func (c Class) String() string { return [...]string{"honoured", "refused", "accepted"}[c] }

// Field is one KubeletConfiguration field in the table.
type Field struct {
	// Path is the field's JSON path: authentication.webhook.enabled. A
	// struct's path covers all of it.
	Path  string
	Class Class
	// Key is the nodelet key an honoured field sets.
	Key string
	// Note says how (honoured), or why not and what nodelet does (refused).
	Note string
	set  func(kc *kubeletv1beta1.KubeletConfiguration, c *config.Config) error
	// check replaces the comparison with the default for a refused field.
	check func(kc *kubeletv1beta1.KubeletConfiguration) error
	// get writes the field from nodelet's configuration for /configz
	// where the generic conversion of Key's value cannot (Configz).
	get func(c *config.Config, kc *kubeletv1beta1.KubeletConfiguration)
}

func h(path, key, note string, set func(*kubeletv1beta1.KubeletConfiguration, *config.Config) error) Field {
	return Field{Path: path, Class: Honoured, Key: key, Note: note, set: set}
}

func withGet(f Field, get func(*config.Config, *kubeletv1beta1.KubeletConfiguration)) Field {
	f.get = get
	return f
}

func r(path, why string) Field { return Field{Path: path, Class: Refused, Note: why} }

func a(path, why string) Field { return Field{Path: path, Class: Accepted, Note: why} }

func d(m metav1.Duration) time.Duration { return m.Duration }

type kconf = kubeletv1beta1.KubeletConfiguration

// Table is every field of KubeletConfiguration (v1beta1, k8s.io/kubelet
// v0.37.2) classified; TestTableCoversKubeletConfiguration fails for a
// field it lacks, so an upgrade of k8s.io/kubelet is classified here
// before it builds green.
var Table = []Field{
	r("enableServer", "nodelet-server always serves the kubelet API"),
	h("staticPodPath", "sources.staticPodPath", "", func(k *kconf, c *config.Config) error { c.Sources.StaticPodPath = k.StaticPodPath; return nil }),
	h("podLogsDir", "node.podLogsDir", "", func(k *kconf, c *config.Config) error { c.Node.PodLogsDir = k.PodLogsDir; return nil }),
	h("syncFrequency", "runtime.syncFrequency", "", func(k *kconf, c *config.Config) error { c.Runtime.SyncFrequency = d(k.SyncFrequency); return nil }),
	h("fileCheckFrequency", "sources.fileCheckFrequency", "", func(k *kconf, c *config.Config) error {
		c.Sources.FileCheckFrequency = d(k.FileCheckFrequency)
		return nil
	}),
	h("httpCheckFrequency", "sources.httpCheckFrequency", "", func(k *kconf, c *config.Config) error {
		c.Sources.HTTPCheckFrequency = d(k.HTTPCheckFrequency)
		return nil
	}),
	h("staticPodURL", "sources.manifestURL", "", func(k *kconf, c *config.Config) error { c.Sources.ManifestURL = k.StaticPodURL; return nil }),
	h("staticPodURLHeader", "sources.manifestURLHeader", "", func(k *kconf, c *config.Config) error { c.Sources.ManifestURLHeader = k.StaticPodURLHeader; return nil }),
	h("address", "server.address", "", func(k *kconf, c *config.Config) error { c.Server.Address = k.Address; return nil }),
	h("port", "server.port", "", func(k *kconf, c *config.Config) error { c.Server.Port = int(k.Port); return nil }),
	h("readOnlyPort", "server.readOnlyPort", "10255 without --config, as the kubelet's command line", func(k *kconf, c *config.Config) error { c.Server.ReadOnlyPort = int(k.ReadOnlyPort); return nil }),
	h("tlsCertFile", "server.tlsCertFile", "", func(k *kconf, c *config.Config) error { c.Server.TLSCertFile = k.TLSCertFile; return nil }),
	h("tlsPrivateKeyFile", "server.tlsPrivateKeyFile", "", func(k *kconf, c *config.Config) error { c.Server.TLSPrivateKeyFile = k.TLSPrivateKeyFile; return nil }),
	h("tlsCipherSuites", "server.tlsCipherSuites", "", func(k *kconf, c *config.Config) error { c.Server.TLSCipherSuites = k.TLSCipherSuites; return nil }),
	r("tlsCurvePreferences", "nodelet-server offers Go's default curves"),
	h("tlsMinVersion", "server.tlsMinVersion", "", func(k *kconf, c *config.Config) error { c.Server.TLSMinVersion = k.TLSMinVersion; return nil }),
	h("rotateCertificates", "node.rotateCertificates", "", func(k *kconf, c *config.Config) error { c.Node.RotateCertificates = k.RotateCertificates; return nil }),
	h("serverTLSBootstrap", "server.serverTLSBootstrap", "", func(k *kconf, c *config.Config) error { c.Server.ServerTLSBootstrap = k.ServerTLSBootstrap; return nil }),
	h("authentication.x509.clientCAFile", "server.authentication.x509.clientCAFile", "", func(k *kconf, c *config.Config) error {
		c.Server.Authentication.X509.ClientCAFile = k.Authentication.X509.ClientCAFile
		return nil
	}),
	h("authentication.webhook.enabled", "server.authentication.webhook.enabled", "false without --config, as the kubelet's command line", func(k *kconf, c *config.Config) error {
		c.Server.Authentication.Webhook.Enabled = *k.Authentication.Webhook.Enabled
		return nil
	}),
	h("authentication.webhook.cacheTTL", "server.authentication.webhook.cacheTTL", "", func(k *kconf, c *config.Config) error {
		c.Server.Authentication.Webhook.CacheTTL = d(k.Authentication.Webhook.CacheTTL)
		return nil
	}),
	h("authentication.anonymous.enabled", "server.authentication.anonymous.enabled", "true without --config, as the kubelet's command line", func(k *kconf, c *config.Config) error {
		c.Server.Authentication.Anonymous.Enabled = *k.Authentication.Anonymous.Enabled
		return nil
	}),
	h("authorization.mode", "server.authorization.mode", "AlwaysAllow without --config, as the kubelet's command line", func(k *kconf, c *config.Config) error {
		c.Server.Authorization.Mode = string(k.Authorization.Mode)
		return nil
	}),
	h("authorization.webhook.cacheAuthorizedTTL", "server.authorization.webhook.cacheAuthorizedTTL", "", func(k *kconf, c *config.Config) error {
		c.Server.Authorization.Webhook.CacheAuthorizedTTL = d(k.Authorization.Webhook.CacheAuthorizedTTL)
		return nil
	}),
	h("authorization.webhook.cacheUnauthorizedTTL", "server.authorization.webhook.cacheUnauthorizedTTL", "", func(k *kconf, c *config.Config) error {
		c.Server.Authorization.Webhook.CacheUnauthorizedTTL = d(k.Authorization.Webhook.CacheUnauthorizedTTL)
		return nil
	}),
	r("registryPullQPS", "nodelet does not rate-limit image pulls (runtime.maxParallelImagePulls bounds them)"),
	r("registryBurst", "nodelet does not rate-limit image pulls (runtime.maxParallelImagePulls bounds them)"),
	h("imagePullCredentialsVerificationPolicy", "runtime.imagePullCredentialsVerificationPolicy", "ensure-secret-pulled-images, with the kubelet's pull records (under the root dir's image_manager/, as the kubelet's)", func(k *kconf, c *config.Config) error {
		if k.ImagePullCredentialsVerificationPolicy != "" {
			c.Runtime.ImagePullCredentialsVerificationPolicy = string(k.ImagePullCredentialsVerificationPolicy)
		}
		return nil
	}),
	h("preloadedImagesVerificationAllowlist", "runtime.preloadedImagesVerificationAllowlist", "", func(k *kconf, c *config.Config) error {
		c.Runtime.PreloadedImagesVerificationAllowlist = k.PreloadedImagesVerificationAllowlist
		return nil
	}),
	h("eventRecordQPS", "status.eventRecordQPS", "0 (no limit) is refused: nodelet's limit must be positive", func(k *kconf, c *config.Config) error {
		if *k.EventRecordQPS == 0 {
			return fmt.Errorf("eventRecordQPS: 0 (no limit) has no nodelet equivalent (status.eventRecordQPS must be positive)")
		}
		c.Status.EventRecordQPS = float64(*k.EventRecordQPS)
		return nil
	}),
	h("eventBurst", "status.eventBurst", "", func(k *kconf, c *config.Config) error { c.Status.EventBurst = int(k.EventBurst); return nil }),
	r("enableDebuggingHandlers", "nodelet-server always serves logs, exec, attach and port-forward"),
	h("enableContentionProfiling", "server.enableContentionProfiling", "nodelet-server's block profile", func(k *kconf, c *config.Config) error {
		c.Server.EnableContentionProfiling = k.EnableContentionProfiling
		return nil
	}),
	h("healthzPort", "server.healthzPort", "served by nodelet-server with the checks of its /healthz", func(k *kconf, c *config.Config) error {
		c.Server.HealthzPort = int(*k.HealthzPort)
		return nil
	}),
	h("healthzBindAddress", "server.healthzBindAddress", "", func(k *kconf, c *config.Config) error {
		c.Server.HealthzBindAddress = k.HealthzBindAddress
		return nil
	}),
	r("oomScoreAdj", "nodelet's processes keep the OOM score their units give them"),
	h("clusterDomain", "node.clusterDomain", "", func(k *kconf, c *config.Config) error { c.Node.ClusterDomain = k.ClusterDomain; return nil }),
	h("clusterDNS", "node.clusterDNS", "", func(k *kconf, c *config.Config) error { c.Node.ClusterDNS = k.ClusterDNS; return nil }),
	r("streamingConnectionIdleTimeout", "nodelet-server's streams have no idle timeout setting"),
	h("nodeStatusUpdateFrequency", "status.nodeStatusUpdateFrequency", "", func(k *kconf, c *config.Config) error {
		c.Status.NodeStatusUpdateFrequency = d(k.NodeStatusUpdateFrequency)
		return nil
	}),
	h("nodeStatusReportFrequency", "status.nodeStatusReportFrequency", "", func(k *kconf, c *config.Config) error {
		c.Status.NodeStatusReportFrequency = d(k.NodeStatusReportFrequency)
		return nil
	}),
	h("nodeLeaseDurationSeconds", "status.nodeLeaseDurationSeconds", "", func(k *kconf, c *config.Config) error {
		c.Status.NodeLeaseDurationSeconds = int(k.NodeLeaseDurationSeconds)
		return nil
	}),
	h("imageMinimumGCAge", "gc.imageMinimumGCAge", "", func(k *kconf, c *config.Config) error { c.GC.ImageMinimumGCAge = d(k.ImageMinimumGCAge); return nil }),
	h("imageMaximumGCAge", "gc.imageMaximumGCAge", "", func(k *kconf, c *config.Config) error { c.GC.ImageMaximumGCAge = d(k.ImageMaximumGCAge); return nil }),
	h("imageGCHighThresholdPercent", "gc.imageGCHighThresholdPercent", "", func(k *kconf, c *config.Config) error {
		c.GC.ImageGCHighThresholdPercent = int(*k.ImageGCHighThresholdPercent)
		return nil
	}),
	h("imageGCLowThresholdPercent", "gc.imageGCLowThresholdPercent", "", func(k *kconf, c *config.Config) error {
		c.GC.ImageGCLowThresholdPercent = int(*k.ImageGCLowThresholdPercent)
		return nil
	}),
	r("volumeStatsAggPeriod", "nodelet measures volumes on its own period"),
	r("kubeletCgroups", "nodelet's daemons stay in the cgroups of their units"),
	r("systemCgroups", "nodelet does not move system processes"),
	r(`cgroupRoot`, `nodelet's pods go under runtime.cgroupRoot (/nodelet), which is the kubelet's kubepods cgroup, not its parent; only "" (the kubelet's default) is taken`),
	r("cgroupsPerQOS", "nodelet always makes the QoS cgroups"),
	h("cgroupDriver", "runtime.cgroupDriver", "", func(k *kconf, c *config.Config) error { c.Runtime.CgroupDriver = k.CgroupDriver; return nil }),
	r("cpuManagerPolicy", "no CPU manager: only none"),
	r("singleProcessOOMKill", "nodelet leaves memory.oom.group to the runtime's default"),
	r("cpuManagerPolicyOptions", "no CPU manager"),
	r("cpuManagerReconcilePeriod", "no CPU manager"),
	r("memoryManagerPolicy", "no memory manager: only None"),
	r("topologyManagerPolicy", "no topology manager: only none"),
	r("topologyManagerScope", "no topology manager"),
	r("topologyManagerPolicyOptions", "no topology manager"),
	r("qosReserved", "no QoS memory reservation"),
	h("runtimeRequestTimeout", "runtime.runtimeRequestTimeout", "", func(k *kconf, c *config.Config) error {
		c.Runtime.RuntimeRequestTimeout = d(k.RuntimeRequestTimeout)
		return nil
	}),
	r("hairpinMode", "the CNI configuration decides hairpin mode"),
	h("maxPods", "node.maxPods", "", func(k *kconf, c *config.Config) error { c.Node.MaxPods = int(k.MaxPods); return nil }),
	h("podCIDR", "node.podCIDR", "", func(k *kconf, c *config.Config) error {
		if k.PodCIDR != "" {
			c.Node.PodCIDR = k.PodCIDR
		}
		return nil
	}),
	h("podPidsLimit", "runtime.podPidsLimit", "", func(k *kconf, c *config.Config) error { c.Runtime.PodPidsLimit = *k.PodPidsLimit; return nil }),
	h("resolvConf", "node.resolvConf", "", func(k *kconf, c *config.Config) error { c.Node.ResolvConf = *k.ResolverConfig; return nil }),
	r("runOnce", "nodelet runs until stopped"),
	r("cpuCFSQuota", "nodelet always enforces CPU limits with CFS quota"),
	r("cpuCFSQuotaPeriod", "nodelet uses the kernel's default period (100ms)"),
	r("nodeStatusMaxImages", "nodelet-status reports the images its own way"),
	r("maxOpenFiles", "nodelet's processes keep the limit of their units"),
	r("contentType", "nodelet's API clients choose their encoding"),
	h("kubeAPIQPS", "sources.kubeAPIQPS", "0 is 50, as the kubelet's; each daemon's client has this limit (the kubelet has one client, nodelet one a daemon)", func(k *kconf, c *config.Config) error {
		c.Sources.KubeAPIQPS = float64(*k.KubeAPIQPS)
		if *k.KubeAPIQPS == 0 {
			c.Sources.KubeAPIQPS = 50
		}
		return nil
	}),
	h("kubeAPIBurst", "sources.kubeAPIBurst", "each daemon's client", func(k *kconf, c *config.Config) error { c.Sources.KubeAPIBurst = int(k.KubeAPIBurst); return nil }),
	withGet(h("serializeImagePulls", "runtime.maxParallelImagePulls", "true is 1", imagePulls), func(c *config.Config, k *kconf) {
		k.SerializeImagePulls = ptr.To(c.Runtime.MaxParallelImagePulls == 1)
	}),
	h("maxParallelImagePulls", "runtime.maxParallelImagePulls", "unset with serializeImagePulls false (the kubelet: no bound) keeps nodelet's default, 5", imagePulls),
	h("evictionHard", "gc.evictionHard", "", func(k *kconf, c *config.Config) error { c.GC.EvictionHard = k.EvictionHard; return nil }),
	h("evictionSoft", "gc.evictionSoft", "", func(k *kconf, c *config.Config) error { c.GC.EvictionSoft = k.EvictionSoft; return nil }),
	h("evictionSoftGracePeriod", "gc.evictionSoftGracePeriod", "", func(k *kconf, c *config.Config) error {
		c.GC.EvictionSoftGracePeriod = k.EvictionSoftGracePeriod
		return nil
	}),
	h("evictionPressureTransitionPeriod", "gc.evictionPressureTransitionPeriod", "", func(k *kconf, c *config.Config) error {
		c.GC.EvictionPressureTransitionPeriod = d(k.EvictionPressureTransitionPeriod)
		return nil
	}),
	r("evictionMaxPodGracePeriod", "nodelet's soft evictions give each pod its own grace period"),
	r("evictionMinimumReclaim", "nodelet reclaims down to the threshold"),
	// /configz: false, as the evictionHard it shows is complete.
	withGet(h("mergeDefaultEvictionSettings", "gc.evictionHard", "applied while loading, as the kubelet does", func(*kconf, *config.Config) error { return nil }),
		func(*config.Config, *kconf) {}),
	r("podsPerCore", "nodelet bounds pods with node.maxPods only"),
	r("enableControllerAttachDetach", "nodelet never attaches volumes itself: the attach/detach controller does"),
	r("protectKernelDefaults", "nodelet does not check kernel tunables"),
	r("makeIPTablesUtilChains", "nodelet makes no iptables chains (kube-proxy and the CNI plugins do what they need)"),
	r("iptablesMasqueradeBit", "nodelet makes no iptables chains"),
	r("iptablesDropBit", "nodelet makes no iptables chains"),
	{Path: "featureGates", Class: Refused, Note: "validated against the kubelet v1.37.2's gates (an unknown gate is an error naming it, as a locked one set otherwise); a gate at its default is taken, any other value refused by name, but KubeletCrashLoopBackOffMax (it changes a default only)",
		check: func(k *kconf) error {
			if g := changedGates(k.FeatureGates); len(g) > 0 {
				return fmt.Errorf("featureGates: %s: nodelet does not implement the kubelet's behaviour under these gates", strings.Join(g, ", "))
			}
			return nil
		}},
	r("failSwapOn", "nodelet does not check for swap"),
	r("memorySwap", "no swap for pods (NoSwap)"),
	h("containerLogMaxSize", "gc.containerLogMaxSize", "", func(k *kconf, c *config.Config) error { c.GC.ContainerLogMaxSize = k.ContainerLogMaxSize; return nil }),
	h("containerLogMaxFiles", "gc.containerLogMaxFiles", "", func(k *kconf, c *config.Config) error {
		c.GC.ContainerLogMaxFiles = int(*k.ContainerLogMaxFiles)
		return nil
	}),
	r("containerLogMaxWorkers", "nodelet-gc rotates logs with one worker"),
	h("containerLogMonitorInterval", "gc.containerLogMonitorInterval", "", func(k *kconf, c *config.Config) error {
		c.GC.ContainerLogMonitorInterval = d(*k.ContainerLogMonitorInterval)
		return nil
	}),
	h("configMapAndSecretChangeDetectionStrategy", "runtime.configMapAndSecretChangeDetectionStrategy", "", func(k *kconf, c *config.Config) error {
		c.Runtime.ConfigMapAndSecretChangeDetectionStrategy = string(k.ConfigMapAndSecretChangeDetectionStrategy)
		return nil
	}),
	h("systemReserved", "node.systemReserved", "", func(k *kconf, c *config.Config) error { c.Node.SystemReserved = k.SystemReserved; return nil }),
	h("kubeReserved", "node.kubeReserved", "", func(k *kconf, c *config.Config) error { c.Node.KubeReserved = k.KubeReserved; return nil }),
	r("reservedSystemCPUs", "no CPU manager"),
	r("showHiddenMetricsForVersion", "nodelet's metrics have no hidden ones"),
	h("systemReservedCgroup", "runtime.systemReservedCgroup", "", func(k *kconf, c *config.Config) error {
		c.Runtime.SystemReservedCgroup = k.SystemReservedCgroup
		return nil
	}),
	h("kubeReservedCgroup", "runtime.kubeReservedCgroup", "", func(k *kconf, c *config.Config) error {
		c.Runtime.KubeReservedCgroup = k.KubeReservedCgroup
		return nil
	}),
	h("enforceNodeAllocatable", "runtime.enforceNodeAllocatable", "", func(k *kconf, c *config.Config) error {
		c.Runtime.EnforceNodeAllocatable = k.EnforceNodeAllocatable
		return nil
	}),
	h("allowedUnsafeSysctls", "admission.allowedUnsafeSysctls", "", func(k *kconf, c *config.Config) error {
		c.Admission.AllowedUnsafeSysctls = k.AllowedUnsafeSysctls
		return nil
	}),
	r("defaultPodSysctls", "nodelet adds no sysctls to pods"),
	r("volumePluginDir", "no FlexVolume plugins"),
	r("providerID", "nodelet does not set the Node's spec.providerID"),
	r("kernelMemcgNotification", "nodelet-gc polls memory"),
	r("logging.format", "nodelet logs text (slog)"),
	a("logging.flushFrequency", "nodelet's logs are not buffered"),
	a("logging.verbosity", "the kubelet's log detail (--v); nodelet's daemons log at info (their --log-level)"),
	a("logging.vmodule", "the kubelet's per-file log detail; nodelet has none"),
	r("logging.options", "nodelet logs one stream, unbuffered"),
	h("enableSystemLogHandler", "server.enableSystemLogHandler", "", func(k *kconf, c *config.Config) error {
		c.Server.EnableSystemLogHandler = *k.EnableSystemLogHandler
		return nil
	}),
	r("enableSystemLogQuery", "no node log query"),
	h("shutdownGracePeriod", "gc.shutdownGracePeriod", "", func(k *kconf, c *config.Config) error {
		c.GC.ShutdownGracePeriod = d(k.ShutdownGracePeriod)
		return nil
	}),
	h("shutdownGracePeriodCriticalPods", "gc.shutdownGracePeriodCriticalPods", "", func(k *kconf, c *config.Config) error {
		c.GC.ShutdownGracePeriodCriticalPods = d(k.ShutdownGracePeriodCriticalPods)
		return nil
	}),
	r("shutdownGracePeriodByPodPriority", "graceful shutdown by pod priority: not yet (gc.shutdownGracePeriod and shutdownGracePeriodCriticalPods only)"),
	h("crashLoopBackOff.maxContainerRestartPeriod", "runtime.maxContainerRestartPeriod", "", func(k *kconf, c *config.Config) error {
		if p := k.CrashLoopBackOff.MaxContainerRestartPeriod; p != nil {
			c.Runtime.MaxContainerRestartPeriod = p.Duration
		}
		return nil
	}),
	r("reservedMemory", "no memory manager"),
	h("enableProfilingHandler", "server.enableProfilingHandler", "nodelet-server's profiles, and each daemon's with ?daemon=", func(k *kconf, c *config.Config) error {
		c.Server.EnableProfilingHandler = *k.EnableProfilingHandler
		return nil
	}),
	r("enableDebugFlagsHandler", "nodelet has no /debug/flags/v"),
	h("seccompDefault", "runtime.seccompDefault", "or --seccomp-default", func(k *kconf, c *config.Config) error { c.Runtime.SeccompDefault = *k.SeccompDefault; return nil }),
	r("memoryThrottlingFactor", "no memory QoS (memory.high)"),
	r("memoryReservationPolicy", "no memory reservation: only None"),
	withGet(h("registerWithTaints", "node.taints", "", func(k *kconf, c *config.Config) error {
		for _, t := range k.RegisterWithTaints {
			c.Node.Taints = append(c.Node.Taints, config.Taint{Key: t.Key, Value: t.Value, Effect: string(t.Effect)})
		}
		return nil
	}), func(c *config.Config, k *kconf) {
		k.RegisterWithTaints = nil
		for _, t := range c.Node.Taints {
			k.RegisterWithTaints = append(k.RegisterWithTaints, corev1.Taint{Key: t.Key, Value: t.Value, Effect: corev1.TaintEffect(t.Effect)})
		}
	}),
	r("registerNode", "nodelet registers its Node whenever it has a kubeconfig"),
	r("tracing", "nodelet exports no traces"),
	r("localStorageCapacityIsolation", "nodelet always accounts ephemeral storage"),
	h("containerRuntimeEndpoint", "runtime.endpoint", "", func(k *kconf, c *config.Config) error { c.Runtime.Endpoint = k.ContainerRuntimeEndpoint; return nil }),
	h("imageServiceEndpoint", "runtime.imageEndpoint", "", func(k *kconf, c *config.Config) error { c.Runtime.ImageEndpoint = k.ImageServiceEndpoint; return nil }),
	r("userNamespaces", "nodelet uses the runtime's ID range for user namespaces"),
	// The kubelet's own check, not a setting: validateKubeletOSConfiguration
	// (pkg/kubelet/apis/config/validation/validation_linux.go).
	h("failCgroupV1", "", "the kubelet's check: true (its default since v1.35) refuses to start on a cgroup v1 host, with the kubelet's message; false runs there (nodelet runs on cgroup v1 and v2 alike)", func(k *kconf, c *config.Config) error {
		if ptr.Deref(k.FailCgroupV1, true) && cgroupV1Host() {
			return fmt.Errorf("KubeletConfiguration failCgroupV1 is true (the default): kubelet is configured to not run on a host using cgroup v1. cgroup v1 support is unsupported and will be removed in a future release")
		}
		return nil
	}),
}

// cgroupV1Host says this host mounts cgroup v1 (not the unified
// hierarchy alone), as the kubelet asks libcontainer; a variable for tests.
var cgroupV1Host = func() bool { return !libcgroups.IsCgroup2UnifiedMode() }

// imagePulls maps serializeImagePulls and maxParallelImagePulls together.
func imagePulls(k *kconf, c *config.Config) error {
	switch {
	case *k.SerializeImagePulls:
		c.Runtime.MaxParallelImagePulls = 1
	case k.MaxParallelImagePulls != nil:
		c.Runtime.MaxParallelImagePulls = int(*k.MaxParallelImagePulls)
	}
	return nil
}

// lookupField is the field at a table path in v (a KubeletConfiguration).
func lookupField(v reflect.Value, path string) (reflect.Value, bool) {
	return walkField(v, path, false)
}

// walkField follows a table path from v. A nil pointer on the way is
// allocated with alloc (v must be settable), else the field is unset: the
// invalid Value, found.
func walkField(v reflect.Value, path string, alloc bool) (reflect.Value, bool) {
	for _, name := range strings.Split(path, ".") {
		for v.Kind() == reflect.Pointer {
			if v.IsNil() {
				if !alloc {
					return reflect.Value{}, true // unset: compares as empty
				}
				v.Set(reflect.New(v.Type().Elem()))
			}
			v = v.Elem()
		}
		if v.Kind() != reflect.Struct {
			return reflect.Value{}, false
		}
		found := false
		for i := 0; i < v.NumField(); i++ {
			if jsonName(v.Type().Field(i)) == name {
				v, found = v.Field(i), true
				break
			}
		}
		if !found {
			return reflect.Value{}, false
		}
	}
	return v, true
}

func jsonName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	return name
}

// same compares a field with its default: nil and empty are the same.
func same(a, b reflect.Value) bool {
	if empty(a) && empty(b) {
		return true
	}
	if !a.IsValid() || !b.IsValid() {
		return false
	}
	return reflect.DeepEqual(a.Interface(), b.Interface())
}

func empty(v reflect.Value) bool {
	if !v.IsValid() {
		return true
	}
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		return v.IsNil()
	case reflect.Map, reflect.Slice:
		return v.Len() == 0
	}
	return false
}
