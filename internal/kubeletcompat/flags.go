package kubeletcompat

import (
	"sync"
	"time"

	"github.com/spf13/pflag"
	cliflag "k8s.io/component-base/cli/flag"
	logsapi "k8s.io/component-base/logs/api/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
)

// Flags are the kubelet's flags that are not KubeletConfiguration fields:
// KubeletFlags of k8s.io/kubernetes cmd/kubelet/app/options (v1.37.2), its
// global flags, and the removed flags nodelet still accepts.
type Flags struct {
	Config, ConfigDir               string
	Kubeconfig, BootstrapKubeconfig string
	HostnameOverride, NodeIP        string
	CertDir, RootDir                string
	CloudProvider                   string
	SeccompDefault                  bool
	NodeLabels                      map[string]string
	LockFile                        string
	ExitOnLockContention            bool
	RuntimeCgroups                  string
	ImageCredentialProviderConfig   string
	ImageCredentialProviderBinDir   string
	HousekeepingInterval            time.Duration
	// Deprecated in the kubelet, still honoured there.
	MinimumContainerTTL                   time.Duration
	MaxPerPodContainer, MaxContainers     int32
	ExperimentalMounterPath               string
	ExperimentalAllocatableIgnoreEviction bool
	// Removed from the kubelet, accepted by nodelet (see removedFlags).
	PodInfraContainerImage, ContainerRuntime string

	Version versionValue
	Help    bool
}

// DefaultRootDir is the kubelet's --root-dir default.
const DefaultRootDir = "/var/lib/kubelet"

func newFlags() *Flags {
	return &Flags{CertDir: DefaultRootDir + "/pki", RootDir: DefaultRootDir, MaxContainers: -1, MaxPerPodContainer: 1,
		NodeLabels: map[string]string{}, HousekeepingInterval: 10 * time.Second, Version: "false"}
}

// deprecatedConfigFlag is the kubelet's message for every flag that sets
// a KubeletConfiguration field (AddKubeletConfigFlags), but those in
// notDeprecated.
const deprecatedConfigFlag = "This parameter should be set via the config file specified by the Kubelet's --config flag. See https://kubernetes.io/docs/tasks/administer-cluster/kubelet-config-file/ for more information."

var notDeprecated = map[string]bool{"v": true, "vmodule": true, "log-flush-frequency": true, "provider-id": true, "fail-cgroupv1": true}

// removedFlags are flags the kubelet v1.37 no longer has that kubeadm and
// distributions set on nodes made by older releases (kubeadm-flags.env is
// written once, at init or join): nodelet accepts them with a warning,
// doing what the last kubelet that had them did.
var removedFlags = map[string]string{
	"pod-infra-container-image": "removed from the kubelet in v1.35 (ignored since v1.27: the sandbox image is the runtime's); ignored",
	"container-runtime":         `removed from the kubelet in v1.27 (only "remote" was left); ignored when "remote"`,
}

// newFlagSet is the kubelet's command line: f's flags and kc's. Parsing it
// writes the flags given into f and kc.
func newFlagSet(f *Flags, kc *kubeletv1beta1.KubeletConfiguration) *pflag.FlagSet {
	fs := pflag.NewFlagSet("kubelet", pflag.ContinueOnError)
	fs.SetNormalizeFunc(cliflag.WordSepNormalizeFunc)
	f.addFlags(fs)
	addConfigFlags(fs, kc)
	return fs
}

func (f *Flags) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&f.Config, "config", f.Config, "KubeletConfiguration file (kubelet.config.k8s.io/v1beta1); flags override it")
	fs.StringVar(&f.ConfigDir, "config-dir", f.ConfigDir, "directory of KubeletConfiguration drop-ins (*.conf, subdirectories too) merged in lexical order over --config")
	fs.StringVar(&f.Kubeconfig, "kubeconfig", f.Kubeconfig, "kubeconfig of the node's identity (node.kubeconfig)")
	fs.StringVar(&f.BootstrapKubeconfig, "bootstrap-kubeconfig", f.BootstrapKubeconfig, "bootstrap kubeconfig for TLS bootstrap (node.bootstrapKubeconfig)")
	fs.StringVar(&f.HostnameOverride, "hostname-override", f.HostnameOverride, "node name instead of the hostname (node.name)")
	fs.StringVar(&f.NodeIP, "node-ip", f.NodeIP, "the node's IP address (node.address)")
	fs.StringVar(&f.CertDir, "cert-dir", f.CertDir, "TLS certificate directory: <root-dir>/pki only")
	fs.StringVar(&f.CloudProvider, "cloud-provider", f.CloudProvider, `"" or "external" (registers the node tainted node.cloudprovider.kubernetes.io/uninitialized)`)
	fs.StringVar(&f.RootDir, "root-dir", f.RootDir, "the kubelet's directory: nodelet's state directory (node.stateDir)")
	fs.BoolVar(&f.SeccompDefault, "seccomp-default", f.SeccompDefault, "RuntimeDefault seccomp for every container (runtime.seccompDefault)")
	nl := cliflag.ConfigurationMap(f.NodeLabels)
	fs.Var(&nl, "node-labels", "labels key=value,... added when the node registers (node.labels)")
	fs.StringVar(&f.LockFile, "lock-file", f.LockFile, "refused: nodelet's daemons lock their own files")
	fs.BoolVar(&f.ExitOnLockContention, "exit-on-lock-contention", f.ExitOnLockContention, "refused: nodelet's daemons lock their own files")
	fs.StringVar(&f.RuntimeCgroups, "runtime-cgroups", f.RuntimeCgroups, "refused: nodelet does not move the runtime into a cgroup")
	fs.StringVar(&f.ImageCredentialProviderConfig, "image-credential-provider-config", f.ImageCredentialProviderConfig, "a CredentialProviderConfig file or directory (runtime.imageCredentialProviderConfig)")
	fs.StringVar(&f.ImageCredentialProviderBinDir, "image-credential-provider-bin-dir", f.ImageCredentialProviderBinDir, "the credential-provider plugins' directory (runtime.imageCredentialProviderBinDir)")
	fs.DurationVar(&f.HousekeepingInterval, "housekeeping-interval", f.HousekeepingInterval, "cAdvisor's housekeeping interval: 10s only")

	const gcDeprecated = "Use --eviction-hard or --eviction-soft instead. Will be removed in a future version."
	fs.DurationVar(&f.MinimumContainerTTL, "minimum-container-ttl-duration", f.MinimumContainerTTL, "minimum age of a dead container before GC (gc.minAge)")
	fs.MarkDeprecated("minimum-container-ttl-duration", gcDeprecated)
	fs.Int32Var(&f.MaxPerPodContainer, "maximum-dead-containers-per-container", f.MaxPerPodContainer, "dead instances kept per container (gc.maxPerPodContainer)")
	fs.MarkDeprecated("maximum-dead-containers-per-container", gcDeprecated)
	fs.Int32Var(&f.MaxContainers, "maximum-dead-containers", f.MaxContainers, "dead containers kept on the node (gc.maxContainers)")
	fs.MarkDeprecated("maximum-dead-containers", gcDeprecated)
	fs.StringVar(&f.ExperimentalMounterPath, "experimental-mounter-path", f.ExperimentalMounterPath, "refused when set: nodelet mounts with mount(8)")
	fs.MarkDeprecated("experimental-mounter-path", "will be removed in 1.25 or later. in favor of using CSI.")
	fs.BoolVar(&f.ExperimentalAllocatableIgnoreEviction, "experimental-allocatable-ignore-eviction", f.ExperimentalAllocatableIgnoreEviction, "refused when true")
	fs.MarkDeprecated("experimental-allocatable-ignore-eviction", "will be removed in 1.25 or later.")

	fs.StringVar(&f.PodInfraContainerImage, "pod-infra-container-image", f.PodInfraContainerImage, "removed from the kubelet in v1.35; ignored")
	fs.MarkDeprecated("pod-infra-container-image", removedFlags["pod-infra-container-image"])
	fs.StringVar(&f.ContainerRuntime, "container-runtime", f.ContainerRuntime, `removed from the kubelet in v1.27; "remote" only, ignored`)
	fs.MarkDeprecated("container-runtime", removedFlags["container-runtime"])

	fs.Var(&f.Version, "version", "print the version as the kubelet does (Kubernetes v1.37.2+nodelet.<nodelet's version>) and exit; --version=raw for more")
	fs.Lookup("version").NoOptDefVal = "true"
	fs.BoolVarP(&f.Help, "help", "h", false, "help for kubelet")
}

// configFlagFields maps each flag that sets a KubeletConfiguration field
// to the field's path in the field table.
var configFlagFields = sync.OnceValue(func() map[string]string {
	return addConfigFlags(pflag.NewFlagSet("", pflag.ContinueOnError), &kubeletv1beta1.KubeletConfiguration{})
})

// binder registers config flags and records their fields.
type binder struct {
	fs     *pflag.FlagSet
	fields map[string]string
}

func (b binder) v(field, name string, val pflag.Value) *pflag.Flag {
	b.fs.Var(val, name, "KubeletConfiguration "+field)
	b.fields[name] = field
	return b.fs.Lookup(name)
}

func (b binder) boolp(field, name string, p **bool) {
	b.v(field, name, boolPtr{p}).NoOptDefVal = "true"
}
func (b binder) bool(field, name string, p *bool) {
	b.v(field, name, boolValue{p}).NoOptDefVal = "true"
}

func (b binder) str(field, name string, p *string) {
	b.fs.StringVar(p, name, *p, "KubeletConfiguration "+field)
	b.fields[name] = field
}

func (b binder) i32(field, name string, p *int32) {
	b.fs.Int32Var(p, name, *p, "KubeletConfiguration "+field)
	b.fields[name] = field
}

func (b binder) dur(field, name string, p *time.Duration) {
	b.fs.DurationVar(p, name, *p, "KubeletConfiguration "+field)
	b.fields[name] = field
}

func (b binder) strs(field, name string, p *[]string) {
	b.fs.StringSliceVar(p, name, *p, "KubeletConfiguration "+field)
	b.fields[name] = field
}

// addConfigFlags is the kubelet's AddKubeletConfigFlags on v1beta1's
// types: the same names, each writing its field of c. It returns each
// flag's field.
func addConfigFlags(mainfs *pflag.FlagSet, c *kubeletv1beta1.KubeletConfiguration) map[string]string {
	fs := pflag.NewFlagSet("", pflag.ContinueOnError)
	fs.SetNormalizeFunc(cliflag.WordSepNormalizeFunc)
	b := binder{fs, map[string]string{}}
	b.boolp("enableServer", "enable-server", &c.EnableServer)
	b.boolp("failSwapOn", "fail-swap-on", &c.FailSwapOn)
	b.str("staticPodPath", "pod-manifest-path", &c.StaticPodPath)
	b.dur("syncFrequency", "sync-frequency", &c.SyncFrequency.Duration)
	b.dur("fileCheckFrequency", "file-check-frequency", &c.FileCheckFrequency.Duration)
	b.dur("httpCheckFrequency", "http-check-frequency", &c.HTTPCheckFrequency.Duration)
	b.str("staticPodURL", "manifest-url", &c.StaticPodURL)
	b.v("staticPodURLHeader", "manifest-url-header", cliflag.NewColonSeparatedMultimapStringString(&c.StaticPodURLHeader))
	b.v("address", "address", ipVar{&c.Address})
	b.i32("port", "port", &c.Port)
	b.i32("readOnlyPort", "read-only-port", &c.ReadOnlyPort)
	b.boolp("failCgroupV1", "fail-cgroupv1", &c.FailCgroupV1)
	b.str("containerRuntimeEndpoint", "container-runtime-endpoint", &c.ContainerRuntimeEndpoint)
	b.str("imageServiceEndpoint", "image-service-endpoint", &c.ImageServiceEndpoint)
	b.boolp("authentication.anonymous.enabled", "anonymous-auth", &c.Authentication.Anonymous.Enabled)
	b.boolp("authentication.webhook.enabled", "authentication-token-webhook", &c.Authentication.Webhook.Enabled)
	b.dur("authentication.webhook.cacheTTL", "authentication-token-webhook-cache-ttl", &c.Authentication.Webhook.CacheTTL.Duration)
	b.str("authentication.x509.clientCAFile", "client-ca-file", &c.Authentication.X509.ClientCAFile)
	b.str("authorization.mode", "authorization-mode", (*string)(&c.Authorization.Mode))
	b.dur("authorization.webhook.cacheAuthorizedTTL", "authorization-webhook-cache-authorized-ttl", &c.Authorization.Webhook.CacheAuthorizedTTL.Duration)
	b.dur("authorization.webhook.cacheUnauthorizedTTL", "authorization-webhook-cache-unauthorized-ttl", &c.Authorization.Webhook.CacheUnauthorizedTTL.Duration)
	b.str("tlsCertFile", "tls-cert-file", &c.TLSCertFile)
	b.str("tlsPrivateKeyFile", "tls-private-key-file", &c.TLSPrivateKeyFile)
	b.bool("serverTLSBootstrap", "rotate-server-certificates", &c.ServerTLSBootstrap)
	b.strs("tlsCipherSuites", "tls-cipher-suites", &c.TLSCipherSuites)
	b.str("tlsMinVersion", "tls-min-version", &c.TLSMinVersion)
	b.bool("rotateCertificates", "rotate-certificates", &c.RotateCertificates)
	b.v("registryPullQPS", "registry-qps", int32Ptr{&c.RegistryPullQPS})
	b.i32("registryBurst", "registry-burst", &c.RegistryBurst)
	b.v("eventRecordQPS", "event-qps", int32Ptr{&c.EventRecordQPS})
	b.i32("eventBurst", "event-burst", &c.EventBurst)
	b.boolp("enableDebuggingHandlers", "enable-debugging-handlers", &c.EnableDebuggingHandlers)
	b.bool("enableContentionProfiling", "contention-profiling", &c.EnableContentionProfiling)
	b.v("healthzPort", "healthz-port", int32Ptr{&c.HealthzPort})
	b.v("healthzBindAddress", "healthz-bind-address", ipVar{&c.HealthzBindAddress})
	b.v("oomScoreAdj", "oom-score-adj", int32Ptr{&c.OOMScoreAdj})
	b.str("clusterDomain", "cluster-domain", &c.ClusterDomain)
	b.str("volumePluginDir", "volume-plugin-dir", &c.VolumePluginDir)
	b.strs("clusterDNS", "cluster-dns", &c.ClusterDNS)
	b.dur("streamingConnectionIdleTimeout", "streaming-connection-idle-timeout", &c.StreamingConnectionIdleTimeout.Duration)
	b.dur("nodeStatusUpdateFrequency", "node-status-update-frequency", &c.NodeStatusUpdateFrequency.Duration)
	b.dur("imageMinimumGCAge", "minimum-image-ttl-duration", &c.ImageMinimumGCAge.Duration)
	b.v("imageGCHighThresholdPercent", "image-gc-high-threshold", int32Ptr{&c.ImageGCHighThresholdPercent})
	b.v("imageGCLowThresholdPercent", "image-gc-low-threshold", int32Ptr{&c.ImageGCLowThresholdPercent})
	b.dur("volumeStatsAggPeriod", "volume-stats-agg-period", &c.VolumeStatsAggPeriod.Duration)
	b.v("featureGates", "feature-gates", cliflag.NewMapStringBool(&c.FeatureGates))
	b.str("kubeletCgroups", "kubelet-cgroups", &c.KubeletCgroups)
	b.str("systemCgroups", "system-cgroups", &c.SystemCgroups)
	b.str("providerID", "provider-id", &c.ProviderID)
	b.boolp("cgroupsPerQOS", "cgroups-per-qos", &c.CgroupsPerQOS)
	b.str("cgroupDriver", "cgroup-driver", &c.CgroupDriver)
	b.str("cgroupRoot", "cgroup-root", &c.CgroupRoot)
	b.str("cpuManagerPolicy", "cpu-manager-policy", &c.CPUManagerPolicy)
	b.v("cpuManagerPolicyOptions", "cpu-manager-policy-options", cliflag.NewMapStringStringNoSplit(&c.CPUManagerPolicyOptions))
	b.dur("cpuManagerReconcilePeriod", "cpu-manager-reconcile-period", &c.CPUManagerReconcilePeriod.Duration)
	b.v("qosReserved", "qos-reserved", cliflag.NewMapStringString(&c.QOSReserved))
	b.str("topologyManagerPolicy", "topology-manager-policy", &c.TopologyManagerPolicy)
	b.dur("runtimeRequestTimeout", "runtime-request-timeout", &c.RuntimeRequestTimeout.Duration)
	b.str("hairpinMode", "hairpin-mode", &c.HairpinMode)
	b.i32("maxPods", "max-pods", &c.MaxPods)
	b.str("podCIDR", "pod-cidr", &c.PodCIDR)
	b.v("podPidsLimit", "pod-max-pids", int64Ptr{&c.PodPidsLimit})
	b.v("resolvConf", "resolv-conf", stringPtr{&c.ResolverConfig})
	b.bool("runOnce", "runonce", &c.RunOnce)
	b.boolp("cpuCFSQuota", "cpu-cfs-quota", &c.CPUCFSQuota)
	b.v("cpuCFSQuotaPeriod", "cpu-cfs-quota-period", durationPtr{&c.CPUCFSQuotaPeriod})
	b.boolp("enableControllerAttachDetach", "enable-controller-attach-detach", &c.EnableControllerAttachDetach)
	b.boolp("makeIPTablesUtilChains", "make-iptables-util-chains", &c.MakeIPTablesUtilChains)
	b.str("containerLogMaxSize", "container-log-max-size", &c.ContainerLogMaxSize)
	b.v("containerLogMaxFiles", "container-log-max-files", int32Ptr{&c.ContainerLogMaxFiles})
	b.strs("allowedUnsafeSysctls", "allowed-unsafe-sysctls", &c.AllowedUnsafeSysctls)
	b.v("nodeStatusMaxImages", "node-status-max-images", int32Ptr{&c.NodeStatusMaxImages})
	b.bool("kernelMemcgNotification", "kernel-memcg-notification", &c.KernelMemcgNotification)
	b.boolp("localStorageCapacityIsolation", "local-storage-capacity-isolation", &c.LocalStorageCapacityIsolation)
	b.v("maxOpenFiles", "max-open-files", int64Value{&c.MaxOpenFiles})
	b.str("contentType", "kube-api-content-type", &c.ContentType)
	b.v("kubeAPIQPS", "kube-api-qps", int32Ptr{&c.KubeAPIQPS})
	b.i32("kubeAPIBurst", "kube-api-burst", &c.KubeAPIBurst)
	b.boolp("serializeImagePulls", "serialize-image-pulls", &c.SerializeImagePulls)
	b.v("evictionHard", "eviction-hard", cliflag.NewLangleSeparatedMapStringString(&c.EvictionHard))
	b.v("evictionSoft", "eviction-soft", cliflag.NewLangleSeparatedMapStringString(&c.EvictionSoft))
	b.v("evictionSoftGracePeriod", "eviction-soft-grace-period", cliflag.NewMapStringString(&c.EvictionSoftGracePeriod))
	b.dur("evictionPressureTransitionPeriod", "eviction-pressure-transition-period", &c.EvictionPressureTransitionPeriod.Duration)
	b.i32("evictionMaxPodGracePeriod", "eviction-max-pod-grace-period", &c.EvictionMaxPodGracePeriod)
	b.v("evictionMinimumReclaim", "eviction-minimum-reclaim", cliflag.NewMapStringString(&c.EvictionMinimumReclaim))
	b.i32("podsPerCore", "pods-per-core", &c.PodsPerCore)
	b.bool("protectKernelDefaults", "protect-kernel-defaults", &c.ProtectKernelDefaults)
	b.str("reservedSystemCPUs", "reserved-cpus", &c.ReservedSystemCPUs)
	b.str("topologyManagerScope", "topology-manager-scope", &c.TopologyManagerScope)
	b.v("topologyManagerPolicyOptions", "topology-manager-policy-options", cliflag.NewMapStringString(&c.TopologyManagerPolicyOptions))
	b.v("systemReserved", "system-reserved", cliflag.NewMapStringString(&c.SystemReserved))
	b.v("kubeReserved", "kube-reserved", cliflag.NewMapStringString(&c.KubeReserved))
	b.strs("enforceNodeAllocatable", "enforce-node-allocatable", &c.EnforceNodeAllocatable)
	b.str("systemReservedCgroup", "system-reserved-cgroup", &c.SystemReservedCgroup)
	b.str("kubeReservedCgroup", "kube-reserved-cgroup", &c.KubeReservedCgroup)
	b.str("memoryManagerPolicy", "memory-manager-policy", &c.MemoryManagerPolicy)
	b.v("reservedMemory", "reserved-memory", &reservedMemoryVar{p: &c.ReservedMemory})
	b.boolp("registerNode", "register-node", &c.RegisterNode)
	b.v("registerWithTaints", "register-with-taints", taintsVar{&c.RegisterWithTaints})
	// The logging flags (logsapi's): logging.format, flushFrequency,
	// verbosity (-v), vmodule and the format options.
	logsapi.AddFlags(&c.Logging, fs)
	for name, field := range map[string]string{"logging-format": "logging.format", "log-flush-frequency": "logging.flushFrequency",
		"v": "logging.verbosity", "vmodule": "logging.vmodule", "log-text-split-stream": "logging.options",
		"log-text-info-buffer-size": "logging.options"} {
		b.fields[name] = field
	}
	// The kubelet links the JSON format in, and with it these two.
	if fs.Lookup("log-json-split-stream") == nil {
		b.bool("logging.options", "log-json-split-stream", &c.Logging.Options.JSON.SplitStream)
		b.v("logging.options", "log-json-info-buffer-size", &c.Logging.Options.JSON.InfoBufferSize)
	}
	fs.VisitAll(func(f *pflag.Flag) {
		if !notDeprecated[f.Name] {
			f.Deprecated = deprecatedConfigFlag
		}
	})
	mainfs.AddFlagSet(fs)
	return b.fields
}
