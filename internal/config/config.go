// Package config is nodelet's node configuration: one YAML file with a
// section per component, overridden by NODELET_<SECTION>_<KEY> environment
// variables and --<section>.<key> flags (through viper), validated before
// any daemon starts. Field names and defaults follow KubeletConfiguration
// where the same setting exists.
package config

import (
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
)

// Config is the whole node configuration.
type Config struct {
	Node       NodeConfig       `mapstructure:"node"`
	Bus        BusConfig        `mapstructure:"bus"`
	Runtime    RuntimeConfig    `mapstructure:"runtime"`
	Sources    SourcesConfig    `mapstructure:"sources"`
	Admission  AdmissionConfig  `mapstructure:"admission"`
	Prober     ProberConfig     `mapstructure:"prober"`
	Status     StatusConfig     `mapstructure:"status"`
	Server     ServerConfig     `mapstructure:"server"`
	GC         GCConfig         `mapstructure:"gc"`
	Supervisor SupervisorConfig `mapstructure:"supervisor"`
	Memory     MemoryConfig     `mapstructure:"memory"`
}

// Taint is a node taint as written in the config file.
type Taint struct {
	// Key of the taint. Default: none.
	Key string `mapstructure:"key"`
	// Value of the taint. Default: "".
	Value string `mapstructure:"value"`
	// Effect: NoSchedule, PreferNoSchedule or NoExecute. Default: none.
	Effect string `mapstructure:"effect"`
}

// PodCIDRDefaulted says node.podCIDR was left at its default: in a
// cluster, the Node's spec.podCIDR is then the only pod range (the
// kubelet's podCIDR setting is "only used in standalone mode").
func (n NodeConfig) PodCIDRDefaulted() bool { return n.podCIDRDefaulted }

// SetPodCIDRDefaulted is for code that builds a Config itself (tests): true
// treats node.podCIDR as not set.
func (n *NodeConfig) SetPodCIDRDefaulted(v bool) { n.podCIDRDefaulted = v }

// NodeConfig describes the node itself.
type NodeConfig struct {
	// Name of the node. Default: the hostname.
	Name string `mapstructure:"name"`
	// StateDir holds the bus store, credentials and pod volumes. Default: /var/lib/nodelet.
	StateDir string `mapstructure:"stateDir"`
	// RootDir is the kubelet's --root-dir: the directory layout drivers' DaemonSets mount by hostPath,
	// <rootDir>/device-plugins/kubelet.sock (the device plugin Registration service, nodelet-devices)
	// and its checkpoint beside it, <rootDir>/plugins_registry (CSI and DRA plugin registration:
	// nodelet-runtime and nodelet-devices) and <rootDir>/plugins (the plugins' own sockets).
	// Default: /var/lib/kubelet.
	RootDir string `mapstructure:"rootDir"`
	// Labels added to the node's own (kubernetes.io/hostname, os, arch). Default: none.
	Labels map[string]string `mapstructure:"labels"`
	// Taints registered with the node (registerWithTaints). Default: none.
	Taints []Taint `mapstructure:"taints"`
	// KubeReserved resources (cpu, memory, ephemeral-storage, pid) kept from pods. Default: none.
	KubeReserved map[string]string `mapstructure:"kubeReserved"`
	// SystemReserved resources kept from pods. Default: none.
	SystemReserved map[string]string `mapstructure:"systemReserved"`
	// MaxPods is the number of pods the node can run. Default: 110.
	MaxPods int `mapstructure:"maxPods"`
	// PodCIDR is the pod range standalone, and with an API server whose Node has none when set explicitly (a cluster without node IPAM); left at its default, a node of a cluster waits for the pod CIDR its Node is given, as the kubelet does. Default: 10.88.0.0/16.
	PodCIDR string `mapstructure:"podCIDR"`
	// podCIDRDefaulted: PodCIDR was not set by the file, the environment
	// or a flag (load sets it; a Config built in code counts as set).
	podCIDRDefaulted bool
	// ClusterDNS servers for ClusterFirst pods. Default: none (node's resolv.conf).
	ClusterDNS []string `mapstructure:"clusterDNS"`
	// ClusterDomain for DNS search paths. Default: cluster.local.
	ClusterDomain string `mapstructure:"clusterDomain"`
	// ResolvConf is the file used for dnsPolicy Default. Default: /etc/resolv.conf.
	ResolvConf string `mapstructure:"resolvConf"`
	// PodLogsDir holds container logs, <ns>_<name>_<uid>/. Default: /var/log/pods.
	PodLogsDir string `mapstructure:"podLogsDir"`
	// Address is the node's InternalIP; empty picks the first non-loopback one. Default: "".
	Address string `mapstructure:"address"`
	// Kubeconfig is the node's identity towards kube-apiserver (the kubelet's --kubeconfig), used by
	// every daemon that talks to it; with BootstrapKubeconfig the node writes it itself, pointing at
	// <stateDir>/pki/kubelet-client-current.pem. Empty runs standalone. Default: "".
	Kubeconfig string `mapstructure:"kubeconfig"`
	// BootstrapKubeconfig (the kubelet's --bootstrap-kubeconfig) holds a bootstrap token: when
	// Kubeconfig is missing or its certificate expired, nodelet-status asks for a client certificate
	// (CSR, signer kubernetes.io/kube-apiserver-client-kubelet) with it. Empty turns TLS bootstrap off. Default: "".
	BootstrapKubeconfig string `mapstructure:"bootstrapKubeconfig"`
	// RotateCertificates renews the client certificate before it expires (KubeletConfiguration
	// rotateCertificates), through nodelet-status; every daemon picks up the new one without a restart. Default: false.
	RotateCertificates bool `mapstructure:"rotateCertificates"`
}

// BusConfig configures nodelet-bus and every client's connection.
type BusConfig struct {
	// Listen address of the bus, loopback only. Default: 127.0.0.1:4250.
	Listen string `mapstructure:"listen"`
	// MonitorListen enables nats-server monitoring on a loopback address. Default: "" (off).
	MonitorListen string `mapstructure:"monitorListen"`
	// HeartbeatInterval between daemon heartbeats. Default: 5s.
	HeartbeatInterval time.Duration `mapstructure:"heartbeatInterval"`
	// MaxStore bounds the bus's whole JetStream store on disk; it must hold
	// every bucket's and both events streams' maximum (each reserves it)
	// plus one spare. Default: 2Gi.
	MaxStore string `mapstructure:"maxStore"`
	// BucketMaxBytes bounds each KV bucket, history included (110 pods of
	// 100 KiB with 10 revisions fit 10 times over); a full bucket refuses
	// writes. Default: 128Mi.
	BucketMaxBytes string `mapstructure:"bucketMaxBytes"`
	// MaxValueSize bounds one bucket value, as etcd bounds an object: a pod
	// larger than this is rejected with an event. Default: 1536Ki.
	MaxValueSize string `mapstructure:"maxValueSize"`
	// EventsMaxBytes bounds the events streams together: each producer's
	// holds an equal share, status's copies as much again; a producer's
	// oldest events go first, and only to make room for its own. Default: 128Mi.
	EventsMaxBytes string `mapstructure:"eventsMaxBytes"`
	// EventsMaxAge is how long events are kept. Default: 24h.
	EventsMaxAge time.Duration `mapstructure:"eventsMaxAge"`
	// DeletedKeyRetention is how long a deleted key's history (a gone
	// pod's revisions, what `nodelet explain` reads) stays in its bucket
	// before the bus drops it; at least 10m. Default: 1h.
	DeletedKeyRetention time.Duration `mapstructure:"deletedKeyRetention"`
}

// BusSizes are the byte sizes of the bus's limits, parsed.
type BusSizes struct {
	MaxStore, BucketMaxBytes, MaxValueSize, EventsMaxBytes int64
}

// Sizes parses the bus's size limits (Validate has checked them).
func (b BusConfig) Sizes() BusSizes {
	v := func(s string) int64 {
		q, err := resource.ParseQuantity(s)
		if err != nil {
			return 0
		}
		return q.Value()
	}
	return BusSizes{v(b.MaxStore), v(b.BucketMaxBytes), v(b.MaxValueSize), v(b.EventsMaxBytes)}
}

// RuntimeConfig configures nodelet-runtime and how daemons reach CRI.
type RuntimeConfig struct {
	// Endpoint of the CRI runtime. Default: unix:///run/containerd/containerd.sock.
	Endpoint string `mapstructure:"endpoint"`
	// ImageEndpoint of the CRI image service. Default: "" (same as Endpoint).
	ImageEndpoint string `mapstructure:"imageEndpoint"`
	// ManageContainerd makes `nodelet up` start (first) and stop (last) a private containerd. Default: false.
	ManageContainerd bool `mapstructure:"manageContainerd"`
	// ContainerdConfig is the config file scripts/setup.sh wrote. Default: /etc/nodelet/containerd/config.toml.
	ContainerdConfig string `mapstructure:"containerdConfig"`
	// ContainerdVersion is the major version of the containerd manageContainerd starts: 2, the containerd 2.x scripts/setup.sh installs (/usr/local/libexec/nodelet/containerd2/containerd, root /var/lib/nodelet/containerd2, config version 3), or 1, Debian's 1.6 that scripts/setup.sh --containerd=1 configures (/usr/bin/containerd, root /var/lib/nodelet/containerd, config version 2). Default: 2.
	ContainerdVersion int `mapstructure:"containerdVersion"`
	// ContainerdBinary is the containerd manageContainerd runs (for version 2 its runc shim is the containerd-shim-runc-v2 beside it); empty is the version's. Default: "".
	ContainerdBinary string `mapstructure:"containerdBinary"`
	// SandboxImage is the pause image. Default: nodelet.local/pause:3.10.
	SandboxImage string `mapstructure:"sandboxImage"`
	// RelistPeriod of the pod lifecycle event generator. Default: 1s.
	RelistPeriod time.Duration `mapstructure:"relistPeriod"`
	// RuntimeRequestTimeout bounds every CRI call but image pulls. Default: 2m.
	RuntimeRequestTimeout time.Duration `mapstructure:"runtimeRequestTimeout"`
	// MaxContainerRestartPeriod caps CrashLoopBackOff. Default: 300s.
	MaxContainerRestartPeriod time.Duration `mapstructure:"maxContainerRestartPeriod"`
	// MaxParallelImagePulls across different images. Default: 5.
	MaxParallelImagePulls int `mapstructure:"maxParallelImagePulls"`
	// MaxConcurrentSandboxCreations bounds the pods making a new sandbox at once (a first
	// sandbox's pod cgroup, volumes and RunPodSandbox); 0 = unbounded, as the kubelet. A
	// bound of the node's CPUs lowers the median start of a burst of new pods (on 2 CPUs
	// scripts/bench.sh recommended 2 in three runs), but caps the sandboxes a node makes a
	// minute: in scripts/soak.sh's churn at 110 pods it doubled every pod's start (p50 115 s
	// at 2 against 55 s unbounded, docs/soak.md). Default: 0.
	MaxConcurrentSandboxCreations int `mapstructure:"maxConcurrentSandboxCreations"`
	// CNIConfDir is where nodelet renders the conflist containerd reads. Default: /etc/nodelet/cni/net.d.
	CNIConfDir string `mapstructure:"cniConfDir"`
	// CNIBinDirs hold the CNI plugins. Default: [/usr/lib/cni, /opt/cni/bin].
	CNIBinDirs []string `mapstructure:"cniBinDirs"`
	// ManageCNIConfig makes the runtime render the conflist for the pod CIDR. Default: true.
	ManageCNIConfig bool `mapstructure:"manageCNIConfig"`
	// CNIBridgeName is the Linux bridge of the rendered conflist. Default: nodelet0.
	CNIBridgeName string `mapstructure:"cniBridgeName"`
	// CNINetworkName is the network name of the rendered conflist. Default: nodelet.
	CNINetworkName string `mapstructure:"cniNetworkName"`
	// CgroupRoot is the parent of every pod cgroup, the kubelet's kubepods: Guaranteed pods
	// directly under it, the others under burstable/ and besteffort/. Default: /nodelet.
	CgroupRoot string `mapstructure:"cgroupRoot"`
	// CgroupDriver names and makes cgroups with cgroupfs or systemd; it must be containerd's
	// (SystemdCgroup = true is systemd), checked at start. Default: cgroupfs.
	CgroupDriver string `mapstructure:"cgroupDriver"`
	// PodPidsLimit caps the processes of each pod (its pod cgroup); -1 = unlimited. Default: -1.
	PodPidsLimit int64 `mapstructure:"podPidsLimit"`
	// EnforceNodeAllocatable lists what is enforced with cgroups: pods (cgroupRoot limited to
	// capacity less node.kubeReserved and node.systemReserved), kube-reserved and
	// system-reserved (node.kubeReserved/systemReserved on kubeReservedCgroup/systemReservedCgroup),
	// kube-reserved-compressible and system-reserved-compressible (CPU only), or none. Default: [pods].
	EnforceNodeAllocatable []string `mapstructure:"enforceNodeAllocatable"`
	// KubeReservedCgroup is the existing cgroup of the node agent's daemons, in the driver's
	// form, where kube-reserved is enforced. Default: "".
	KubeReservedCgroup string `mapstructure:"kubeReservedCgroup"`
	// SystemReservedCgroup is the existing cgroup of the system's daemons, where
	// system-reserved is enforced. Default: "".
	SystemReservedCgroup string `mapstructure:"systemReservedCgroup"`
	// ConfigMapAndSecretChangeDetectionStrategy: Watch, Cache or Get. Default: Watch.
	ConfigMapAndSecretChangeDetectionStrategy string `mapstructure:"configMapAndSecretChangeDetectionStrategy"`
	// AllowHostPathForStaticPods: when false, static pods may not use hostPath volumes. Default: true.
	AllowHostPathForStaticPods bool `mapstructure:"allowHostPathForStaticPods"`
	// SeccompProfileRoot is where Localhost seccomp profiles are looked up: a pod's
	// localhostProfile is a path relative to it (KubeletConfiguration seccompProfileRoot,
	// kubelet flag --seccomp-profile-root). Default: "" (<node.stateDir>/seccomp).
	SeccompProfileRoot string `mapstructure:"seccompProfileRoot"`
	// SeccompDefault runs every container without a seccompProfile under the runtime's
	// default profile (RuntimeDefault) instead of Unconfined (KubeletConfiguration
	// seccompDefault). Default: false.
	SeccompDefault bool `mapstructure:"seccompDefault"`
	// ImageCredentialProviderConfig is a CredentialProviderConfig file
	// (kubelet.config.k8s.io), or a directory of them merged in lexical order,
	// naming the exec credential-provider plugins that give image pulls
	// credentials (kubelet --image-credential-provider-config); set with
	// imageCredentialProviderBinDir. Default: "" (no plugins).
	ImageCredentialProviderConfig string `mapstructure:"imageCredentialProviderConfig"`
	// ImageCredentialProviderBinDir holds the plugins' executables, each named
	// as its provider (kubelet --image-credential-provider-bin-dir). Default: "".
	ImageCredentialProviderBinDir string `mapstructure:"imageCredentialProviderBinDir"`
	// ImagePullCredentialsVerificationPolicy says when a pod may use an image
	// already on the node without credentials that could pull it
	// (KubeletConfiguration imagePullCredentialsVerificationPolicy): NeverVerify,
	// NeverVerifyPreloadedImages (images nodelet did not pull), NeverVerifyAllowlistedImages
	// (those of preloadedImagesVerificationAllowlist) or AlwaysVerify.
	// Default: NeverVerifyPreloadedImages.
	ImagePullCredentialsVerificationPolicy string `mapstructure:"imagePullCredentialsVerificationPolicy"`
	// PreloadedImagesVerificationAllowlist names the images (no tag or digest;
	// "<prefix>/*" for all under it) that NeverVerifyAllowlistedImages lets any pod
	// use (KubeletConfiguration preloadedImagesVerificationAllowlist). Default: none.
	PreloadedImagesVerificationAllowlist []string `mapstructure:"preloadedImagesVerificationAllowlist"`
	// SyncFrequency is the longest a configMap, secret, downwardAPI or projected volume goes without being rewritten from its sources (Watch rewrites on every change at once), and the TTL of the Cache strategy. Default: 1m.
	SyncFrequency time.Duration `mapstructure:"syncFrequency"`
}

// DevicePluginsDir is <node.rootDir>/device-plugins, the kubelet's
// DevicePluginPath: kubelet.sock and the plugins' own sockets.
func (c *Config) DevicePluginsDir() string {
	return filepath.Join(c.Node.RootDir, "device-plugins")
}

// PluginsRegistryDir is <node.rootDir>/plugins_registry, the kubelet's
// plugin-registration directory (CSI and DRA plugins' registration
// sockets, pluginwatcher).
func (c *Config) PluginsRegistryDir() string {
	return filepath.Join(c.Node.RootDir, "plugins_registry")
}

// SeccompRoot is runtime.seccompProfileRoot, or <stateDir>/seccomp when unset.
func (c *Config) SeccompRoot() string {
	if c.Runtime.SeccompProfileRoot != "" {
		return c.Runtime.SeccompProfileRoot
	}
	return filepath.Join(c.Node.StateDir, "seccomp")
}

// SourcesConfig configures nodelet-sources.
type SourcesConfig struct {
	// StaticPodPath is a directory or file of pod manifests. Default: "" (off).
	StaticPodPath string `mapstructure:"staticPodPath"`
	// FileCheckFrequency is the full re-list period of StaticPodPath. Default: 20s.
	FileCheckFrequency time.Duration `mapstructure:"fileCheckFrequency"`
	// ManifestURL serves a Pod or PodList. Default: "" (off).
	ManifestURL string `mapstructure:"manifestURL"`
	// ManifestURLHeader is sent with every manifest request. Default: none.
	ManifestURLHeader map[string][]string `mapstructure:"manifestURLHeader"`
	// HTTPCheckFrequency is the poll period of ManifestURL. Default: 20s.
	HTTPCheckFrequency time.Duration `mapstructure:"httpCheckFrequency"`
	// Kubeconfig is deprecated: use node.kubeconfig, which it sets when that is empty. Default: "".
	Kubeconfig string `mapstructure:"kubeconfig"`
	// KubeAPIQPS towards the API server, for each daemon's client (the kubelet's kubeAPIQPS; events
	// have status.eventRecordQPS). Default: 50.
	KubeAPIQPS float64 `mapstructure:"kubeAPIQPS"`
	// KubeAPIBurst towards the API server, for each daemon's client. Default: 100.
	KubeAPIBurst int `mapstructure:"kubeAPIBurst"`
}

// AdmissionConfig configures nodelet-admission.
type AdmissionConfig struct {
	// Disabled admits every pod (debugging only). Default: false.
	Disabled bool `mapstructure:"disabled"`
	// AllowedUnsafeSysctls are sysctls (or "prefix*" patterns) pods may set beyond the
	// kubelet's safe set; others are refused SysctlForbidden (KubeletConfiguration
	// allowedUnsafeSysctls). Default: none.
	AllowedUnsafeSysctls []string `mapstructure:"allowedUnsafeSysctls"`
}

// ProberConfig configures nodelet-prober.
type ProberConfig struct {
	// MaxConcurrentProbes in flight; 0 = unbounded. Default: 0.
	MaxConcurrentProbes int `mapstructure:"maxConcurrentProbes"`
}

// StatusConfig configures nodelet-status.
type StatusConfig struct {
	// ReadOnlyAddress is deprecated: use server.readOnlyPort. When set (host:port, loopback or any), nodelet-server
	// serves the read-only API there and warns at start; setting both is an error. Default: "".
	ReadOnlyAddress string `mapstructure:"readOnlyAddress"`
	// NodeStatusUpdateFrequency: node status computed and written when changed. Default: 10s.
	NodeStatusUpdateFrequency time.Duration `mapstructure:"nodeStatusUpdateFrequency"`
	// NodeStatusReportFrequency: node status written even when unchanged. Default: 5m.
	NodeStatusReportFrequency time.Duration `mapstructure:"nodeStatusReportFrequency"`
	// NodeLeaseDurationSeconds of the node's Lease, renewed every quarter of it. Default: 40.
	NodeLeaseDurationSeconds int `mapstructure:"nodeLeaseDurationSeconds"`
	// EventRecordQPS towards the API server. Default: 50.
	EventRecordQPS float64 `mapstructure:"eventRecordQPS"`
	// EventBurst towards the API server. Default: 100.
	EventBurst int `mapstructure:"eventBurst"`
	// HeartbeatStaleAfter marks a daemon unhealthy in nodelet-server's /healthz. Default: 30s.
	HeartbeatStaleAfter time.Duration `mapstructure:"heartbeatStaleAfter"`
}

// ServerConfig configures nodelet-server, the kubelet API. Names and defaults
// are KubeletConfiguration's (address, port, tlsCertFile, readOnlyPort,
// authentication, authorization).
type ServerConfig struct {
	// Address the kubelet API listens on. Default: 0.0.0.0.
	Address string `mapstructure:"address"`
	// Port of the kubelet API (HTTPS). Default: 10250.
	Port int `mapstructure:"port"`
	// TLSCertFile is the serving certificate; empty makes a self-signed one for the node's names and addresses under the state dir. Default: "".
	TLSCertFile string `mapstructure:"tlsCertFile"`
	// TLSPrivateKeyFile is the key of TLSCertFile. Default: "".
	TLSPrivateKeyFile string `mapstructure:"tlsPrivateKeyFile"`
	// TLSMinVersion is the lowest TLS version the kubelet API accepts, by the kubelet's names (VersionTLS10, VersionTLS11, VersionTLS12, VersionTLS13); empty is VersionTLS12, as the kubelet's. Default: "".
	TLSMinVersion string `mapstructure:"tlsMinVersion"`
	// TLSCipherSuites are the cipher suites the kubelet API offers up to TLS 1.2, by Go's names as the kubelet takes them (insecure ones are logged); empty is Go's default set. TLS 1.3's suites are not configurable, so not with tlsMinVersion VersionTLS13. Default: none.
	TLSCipherSuites []string `mapstructure:"tlsCipherSuites"`
	// ReadOnlyPort serves the read-only API (/pods, /healthz, /spec/, /stats/summary, /metrics, /metrics/cadvisor, /metrics/probes, /metrics/resource) over plain HTTP on Address without authentication; 0 = off. Default: 0.
	ReadOnlyPort int `mapstructure:"readOnlyPort"`
	// HealthzBindAddress is where the kubelet's healthz answers (the kubelet's healthzBindAddress), over plain HTTP without authentication. Default: 127.0.0.1.
	HealthzBindAddress string `mapstructure:"healthzBindAddress"`
	// HealthzPort of the kubelet's healthz (GET /healthz: "ok", or 500 naming each failing check, as on server.port), which kubeadm and monitoring poll; 0 = off. Default: 10248.
	HealthzPort int `mapstructure:"healthzPort"`
	// EnableProfilingHandler serves the Go runtime's profiles at /debug/pprof/ on the kubelet API, authorized as the kubelet's (nodes/proxy): nodelet-server's own, or with ?daemon=<name> (sources, admission, runtime, prober, status, gc, bus) that daemon's, through its metrics socket; false answers 405. Default: true.
	EnableProfilingHandler bool `mapstructure:"enableProfilingHandler"`
	// EnableContentionProfiling records every blocking event in nodelet-server's block profile (runtime.SetBlockProfileRate(1)), as the kubelet's. Default: false.
	EnableContentionProfiling bool `mapstructure:"enableContentionProfiling"`
	// EnableSystemLogHandler serves /var/log under /logs/ (the kubelet's enableSystemLogHandler); false answers 405. Default: true.
	EnableSystemLogHandler bool `mapstructure:"enableSystemLogHandler"`
	// Authentication of requests to the kubelet API. Default: x509 off, webhook on, anonymous off.
	Authentication ServerAuthenticationConfig `mapstructure:"authentication"`
	// Authorization of requests to the kubelet API. Default: mode Webhook.
	Authorization ServerAuthorizationConfig `mapstructure:"authorization"`
	// Kubeconfig for TokenReview and SubjectAccessReview; empty uses the node's identity (node.kubeconfig). Default: "".
	Kubeconfig string `mapstructure:"kubeconfig"`
	// ServerTLSBootstrap: the serving certificate comes from a kubernetes.io/kubelet-serving CSR
	// (CN system:node:<name>, the node's addresses and hostname as SANs), kept under
	// <stateDir>/pki/kubelet-server-current.pem and renewed before it expires; an admin or an
	// approver must approve each CSR (kube-controller-manager does not). Needs node.kubeconfig;
	// excludes tlsCertFile. Default: false.
	ServerTLSBootstrap bool `mapstructure:"serverTLSBootstrap"`
}

// ServerAuthenticationConfig is KubeletAuthentication.
type ServerAuthenticationConfig struct {
	// X509 client certificate authentication. Default: off.
	X509 ServerX509Config `mapstructure:"x509"`
	// Webhook bearer token authentication through TokenReview. Default: enabled, cacheTTL 2m.
	Webhook ServerWebhookAuthnConfig `mapstructure:"webhook"`
	// Anonymous requests. Default: disabled.
	Anonymous ServerAnonymousConfig `mapstructure:"anonymous"`
}

// ServerX509Config is KubeletX509Authentication.
type ServerX509Config struct {
	// ClientCAFile: client certificates signed by these CAs authenticate as their CN (user) and O (groups). Default: "" (off).
	ClientCAFile string `mapstructure:"clientCAFile"`
}

// ServerWebhookAuthnConfig is KubeletWebhookAuthentication.
type ServerWebhookAuthnConfig struct {
	// Enabled: bearer tokens are checked with the API server's TokenReview (needs a kubeconfig). Default: true.
	Enabled bool `mapstructure:"enabled"`
	// CacheTTL of TokenReview answers. Default: 2m.
	CacheTTL time.Duration `mapstructure:"cacheTTL"`
}

// ServerAnonymousConfig is KubeletAnonymousAuthentication.
type ServerAnonymousConfig struct {
	// Enabled: requests without credentials run as system:anonymous, group system:unauthenticated. Default: false.
	Enabled bool `mapstructure:"enabled"`
}

// ServerAuthorizationConfig is KubeletAuthorization.
type ServerAuthorizationConfig struct {
	// Mode: Webhook (SubjectAccessReview) or AlwaysAllow. Default: Webhook.
	Mode string `mapstructure:"mode"`
	// Webhook caches SubjectAccessReview answers. Default: authorized 5m, unauthorized 30s.
	Webhook ServerWebhookAuthzConfig `mapstructure:"webhook"`
	// StrictStreamingVerbs authorizes /exec, /attach, /portForward and /run with the verb create whatever the HTTP method; otherwise the verb follows the method, as the kubelet's, and a WebSocket upgrade (a GET) needs only get on nodes/proxy. kube-apiserver's own client (system:kubelet-api-admin) holds create. Default: false.
	StrictStreamingVerbs bool `mapstructure:"strictStreamingVerbs"`
}

// ServerWebhookAuthzConfig is KubeletWebhookAuthorization.
type ServerWebhookAuthzConfig struct {
	// CacheAuthorizedTTL of allowed answers. Default: 5m.
	CacheAuthorizedTTL time.Duration `mapstructure:"cacheAuthorizedTTL"`
	// CacheUnauthorizedTTL of denied answers. Default: 30s.
	CacheUnauthorizedTTL time.Duration `mapstructure:"cacheUnauthorizedTTL"`
}

// GCConfig configures nodelet-gc.
type GCConfig struct {
	// ContainerGCPeriod between container GC passes. Default: 1m.
	ContainerGCPeriod time.Duration `mapstructure:"containerGCPeriod"`
	// MaxPerPodContainer dead instances kept per container. Default: 1.
	MaxPerPodContainer int `mapstructure:"maxPerPodContainer"`
	// MaxContainers dead containers kept on the node; -1 = no cap. Default: -1.
	MaxContainers int `mapstructure:"maxContainers"`
	// MinAge before a dead container may be removed. Default: 0s.
	MinAge time.Duration `mapstructure:"minAge"`
	// ImageGCPeriod between image GC passes. Default: 5m.
	ImageGCPeriod time.Duration `mapstructure:"imageGCPeriod"`
	// ImageGCHighThresholdPercent of image fs usage that starts image GC. Default: 85.
	ImageGCHighThresholdPercent int `mapstructure:"imageGCHighThresholdPercent"`
	// ImageGCLowThresholdPercent image GC frees down to. Default: 80.
	ImageGCLowThresholdPercent int `mapstructure:"imageGCLowThresholdPercent"`
	// ImageMinimumGCAge: younger unused images are kept. Default: 2m.
	ImageMinimumGCAge time.Duration `mapstructure:"imageMinimumGCAge"`
	// ImageMaximumGCAge: unused longer than this, removed regardless of usage; 0 = off. Default: 0s.
	ImageMaximumGCAge time.Duration `mapstructure:"imageMaximumGCAge"`
	// ContainerLogMaxSize before rotation. Default: 10Mi.
	ContainerLogMaxSize string `mapstructure:"containerLogMaxSize"`
	// ContainerLogMaxFiles kept per container, current one included. Default: 5.
	ContainerLogMaxFiles int `mapstructure:"containerLogMaxFiles"`
	// ContainerLogMonitorInterval between log size checks. Default: 10s.
	ContainerLogMonitorInterval time.Duration `mapstructure:"containerLogMonitorInterval"`
	// EvictionHard thresholds. Default: memory.available<100Mi, nodefs.available<10%, imagefs.available<15%, nodefs.inodesFree<5%.
	EvictionHard map[string]string `mapstructure:"evictionHard"`
	// EvictionSoft thresholds. Default: none.
	EvictionSoft map[string]string `mapstructure:"evictionSoft"`
	// EvictionSoftGracePeriod per soft signal. Default: none.
	EvictionSoftGracePeriod map[string]string `mapstructure:"evictionSoftGracePeriod"`
	// EvictionPressureTransitionPeriod a condition is held after pressure ends. Default: 5m.
	EvictionPressureTransitionPeriod time.Duration `mapstructure:"evictionPressureTransitionPeriod"`
	// EvictionMonitoringPeriod between signal measurements. Default: 10s.
	EvictionMonitoringPeriod time.Duration `mapstructure:"evictionMonitoringPeriod"`
	// ShutdownGracePeriod is how long a node shutdown waits for the pods
	// (systemd-logind's delay inhibitor lock): non-critical pods get it
	// minus shutdownGracePeriodCriticalPods, then critical ones the rest;
	// 0 = graceful node shutdown off. Default: 0s.
	ShutdownGracePeriod time.Duration `mapstructure:"shutdownGracePeriod"`
	// ShutdownGracePeriodCriticalPods is the share of shutdownGracePeriod
	// kept for critical pods (static, mirror, system-critical priority). Default: 0s.
	ShutdownGracePeriodCriticalPods time.Duration `mapstructure:"shutdownGracePeriodCriticalPods"`
}

// SupervisorConfig configures `nodelet up`.
type SupervisorConfig struct {
	// BinDir holds the nodelet-* binaries; empty = next to the nodelet binary. Default: "".
	BinDir string `mapstructure:"binDir"`
	// RestartBackoff is the first restart delay, doubled per failure. Default: 1s.
	RestartBackoff time.Duration `mapstructure:"restartBackoff"`
	// RestartBackoffMax caps the restart delay. Default: 30s.
	RestartBackoffMax time.Duration `mapstructure:"restartBackoffMax"`
	// RestartBackoffReset: a daemon that ran this long restarts with the first delay again. Default: 60s.
	RestartBackoffReset time.Duration `mapstructure:"restartBackoffReset"`
	// ReadyTimeout to wait for a daemon's READY=1 before starting its dependents. Default: 30s.
	ReadyTimeout time.Duration `mapstructure:"readyTimeout"`
	// ComponentUsers: as root, run each daemon that needs no capability here (bus, sources,
	// admission, prober, status, server) as its own user nodelet-<name> in group nodelet with
	// its unit's groups (nodelet-cri for CRI, nodelet-api for the certificates), as the systemd
	// units do (the users of deploy/systemd/sysusers.d/nodelet.conf, which scripts/setup.sh
	// makes; a missing one stops `nodelet up`); gc and the runtime stay root. The config file,
	// the binaries and the state dir's parents must be readable by them, and the CRI socket
	// usable by group nodelet-cri (the managed containerd does that). Off, every daemon runs as
	// the supervisor's user. Default: false.
	ComponentUsers bool `mapstructure:"componentUsers"`
}
