package config

import (
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	cliflag "k8s.io/component-base/cli/flag"
)

// Validate checks every value and returns the first problem as an *Error.
func (c *Config) Validate() error {
	checks := []func() error{
		func() error { return validateMemory(c.Memory) },
		func() error {
			if errs := validation.IsDNS1123Subdomain(c.Node.Name); len(errs) > 0 {
				return &Error{Key: "node.name", Problem: fmt.Sprintf("%q is not a valid node name: %s", c.Node.Name, strings.Join(errs, "; "))}
			}
			return nil
		},
		func() error { return absPath("node.stateDir", c.Node.StateDir, false) },
		func() error { return absPath("node.podLogsDir", c.Node.PodLogsDir, false) },
		func() error { return positive("node.maxPods", c.Node.MaxPods) },
		func() error { return cidr("node.podCIDR", c.Node.PodCIDR, false) },
		func() error {
			for _, ip := range c.Node.ClusterDNS {
				if net.ParseIP(ip) == nil {
					return &Error{Key: "node.clusterDNS", Problem: fmt.Sprintf("%q is not an IP address", ip)}
				}
			}
			return nil
		},
		func() error {
			if c.Node.Address != "" && net.ParseIP(c.Node.Address) == nil {
				return &Error{Key: "node.address", Problem: fmt.Sprintf("%q is not an IP address", c.Node.Address)}
			}
			return nil
		},
		func() error { _, err := ParseReserved("node.kubeReserved", c.Node.KubeReserved); return err },
		func() error { _, err := ParseReserved("node.systemReserved", c.Node.SystemReserved); return err },
		func() error {
			for i, t := range c.Node.Taints {
				key := fmt.Sprintf("node.taints[%d]", i)
				if errs := validation.IsQualifiedName(t.Key); len(errs) > 0 {
					return &Error{Key: key + ".key", Problem: fmt.Sprintf("%q: %s", t.Key, strings.Join(errs, "; "))}
				}
				switch corev1.TaintEffect(t.Effect) {
				case corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
				default:
					return &Error{Key: key + ".effect", Problem: fmt.Sprintf("%q must be NoSchedule, PreferNoSchedule or NoExecute", t.Effect)}
				}
			}
			return nil
		},
		func() error {
			for k, v := range c.Node.Labels {
				if errs := validation.IsQualifiedName(k); len(errs) > 0 {
					return &Error{Key: "node.labels", Problem: fmt.Sprintf("label key %q: %s", k, strings.Join(errs, "; "))}
				}
				if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
					return &Error{Key: "node.labels", Problem: fmt.Sprintf("label %s value %q: %s", k, v, strings.Join(errs, "; "))}
				}
			}
			return nil
		},
		func() error { return loopback("bus.listen", c.Bus.Listen, false) },
		func() error { return loopback("bus.monitorListen", c.Bus.MonitorListen, true) },
		func() error { return positiveDur("bus.heartbeatInterval", c.Bus.HeartbeatInterval) },
		func() error { return positiveDur("bus.eventsMaxAge", c.Bus.EventsMaxAge) },
		func() error {
			if c.Bus.DeletedKeyRetention < MinDeletedKeyRetention {
				return &Error{Key: "bus.deletedKeyRetention", Problem: fmt.Sprintf("%v is below the %v a bus watch may take to resume", c.Bus.DeletedKeyRetention, MinDeletedKeyRetention)}
			}
			return nil
		},
		func() error { return busSizes(c.Bus) },
		func() error { return endpoint("runtime.endpoint", c.Runtime.Endpoint, false) },
		func() error { return endpoint("runtime.imageEndpoint", c.Runtime.ImageEndpoint, true) },
		func() error {
			if c.Runtime.SandboxImage == "" {
				return &Error{Key: "runtime.sandboxImage", Problem: "must name the pause image"}
			}
			return nil
		},
		func() error { return positiveDur("runtime.relistPeriod", c.Runtime.RelistPeriod) },
		func() error { return positiveDur("runtime.runtimeRequestTimeout", c.Runtime.RuntimeRequestTimeout) },
		func() error {
			return positiveDur("runtime.maxContainerRestartPeriod", c.Runtime.MaxContainerRestartPeriod)
		},
		func() error { return positive("runtime.maxParallelImagePulls", c.Runtime.MaxParallelImagePulls) },
		func() error {
			return nonNegative("runtime.maxConcurrentSandboxCreations", c.Runtime.MaxConcurrentSandboxCreations)
		},
		func() error { return absPath("runtime.cniConfDir", c.Runtime.CNIConfDir, false) },
		func() error {
			if len(c.Runtime.CNIBinDirs) == 0 {
				return &Error{Key: "runtime.cniBinDirs", Problem: "must list at least one directory"}
			}
			for _, d := range c.Runtime.CNIBinDirs {
				if err := absPath("runtime.cniBinDirs", d, false); err != nil {
					return err
				}
			}
			return nil
		},
		func() error {
			if n := len(c.Runtime.CNIBridgeName); n == 0 || n > 15 || strings.ContainsAny(c.Runtime.CNIBridgeName, "/ \t") {
				return &Error{Key: "runtime.cniBridgeName", Problem: fmt.Sprintf("%q must be a Linux interface name of 1 to 15 characters", c.Runtime.CNIBridgeName)}
			}
			if c.Runtime.CNINetworkName == "" {
				return &Error{Key: "runtime.cniNetworkName", Problem: "must not be empty"}
			}
			return nil
		},
		func() error {
			if !strings.HasPrefix(c.Runtime.CgroupRoot, "/") {
				return &Error{Key: "runtime.cgroupRoot", Problem: fmt.Sprintf("%q must start with /", c.Runtime.CgroupRoot)}
			}
			if c.Runtime.CgroupRoot == "/" || strings.Contains(c.Runtime.CgroupRoot, "_") {
				return &Error{Key: "runtime.cgroupRoot", Problem: fmt.Sprintf("%q must name a cgroup below / without \"_\"", c.Runtime.CgroupRoot)}
			}
			return nil
		},
		func() error {
			switch c.Runtime.CgroupDriver {
			case "cgroupfs", "systemd":
				return nil
			}
			return &Error{Key: "runtime.cgroupDriver", Problem: fmt.Sprintf("%q must be cgroupfs or systemd", c.Runtime.CgroupDriver)}
		},
		func() error {
			if c.Runtime.PodPidsLimit == 0 || c.Runtime.PodPidsLimit < -1 {
				return &Error{Key: "runtime.podPidsLimit", Problem: fmt.Sprintf("%d must be positive, or -1 for unlimited", c.Runtime.PodPidsLimit)}
			}
			return nil
		},
		func() error { return enforceNodeAllocatable(&c.Runtime) },
		func() error {
			if r := c.Runtime.SeccompProfileRoot; r != "" && !filepath.IsAbs(r) {
				return &Error{Key: "runtime.seccompProfileRoot", Problem: fmt.Sprintf("%q must be an absolute path", r)}
			}
			return nil
		},
		func() error {
			switch c.Runtime.ConfigMapAndSecretChangeDetectionStrategy {
			case "Watch", "Cache", "Get":
				return nil
			}
			return &Error{Key: "runtime.configMapAndSecretChangeDetectionStrategy", Problem: fmt.Sprintf("%q must be Watch, Cache or Get", c.Runtime.ConfigMapAndSecretChangeDetectionStrategy)}
		},
		func() error { return positiveDur("runtime.syncFrequency", c.Runtime.SyncFrequency) },
		func() error { return positiveDur("sources.fileCheckFrequency", c.Sources.FileCheckFrequency) },
		func() error { return positiveDur("sources.httpCheckFrequency", c.Sources.HTTPCheckFrequency) },
		func() error {
			if c.Sources.ManifestURL == "" {
				return nil
			}
			u, err := url.Parse(c.Sources.ManifestURL)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return &Error{Key: "sources.manifestURL", Problem: fmt.Sprintf("%q is not an http(s) URL", c.Sources.ManifestURL)}
			}
			return nil
		},
		func() error { return absPath("sources.staticPodPath", c.Sources.StaticPodPath, true) },
		func() error { return positiveFloat("sources.kubeAPIQPS", c.Sources.KubeAPIQPS) },
		func() error { return positive("sources.kubeAPIBurst", c.Sources.KubeAPIBurst) },
		func() error { return nonNegative("prober.maxConcurrentProbes", c.Prober.MaxConcurrentProbes) },
		func() error { return loopbackOrAny("status.readOnlyAddress", c.Status.ReadOnlyAddress) },
		func() error {
			return positiveDur("status.nodeStatusUpdateFrequency", c.Status.NodeStatusUpdateFrequency)
		},
		func() error {
			return positiveDur("status.nodeStatusReportFrequency", c.Status.NodeStatusReportFrequency)
		},
		func() error { return positive("status.nodeLeaseDurationSeconds", c.Status.NodeLeaseDurationSeconds) },
		func() error { return positiveFloat("status.eventRecordQPS", c.Status.EventRecordQPS) },
		func() error { return positive("status.eventBurst", c.Status.EventBurst) },
		func() error { return positiveDur("status.heartbeatStaleAfter", c.Status.HeartbeatStaleAfter) },
		func() error {
			if net.ParseIP(c.Server.Address) == nil {
				return &Error{Key: "server.address", Problem: fmt.Sprintf("%q is not an IP address", c.Server.Address)}
			}
			return nil
		},
		func() error { return port("server.port", c.Server.Port, false) },
		func() error { return port("server.readOnlyPort", c.Server.ReadOnlyPort, true) },
		func() error {
			if c.Server.ReadOnlyPort != 0 && c.Status.ReadOnlyAddress != "" {
				return &Error{Key: "status.readOnlyAddress", Problem: "deprecated and set together with server.readOnlyPort; keep server.readOnlyPort only"}
			}
			return nil
		},
		func() error { return absPath("server.tlsCertFile", c.Server.TLSCertFile, true) },
		func() error { return absPath("server.tlsPrivateKeyFile", c.Server.TLSPrivateKeyFile, true) },
		func() error {
			if (c.Server.TLSCertFile == "") != (c.Server.TLSPrivateKeyFile == "") {
				return &Error{Key: "server.tlsCertFile", Problem: "server.tlsCertFile and server.tlsPrivateKeyFile go together"}
			}
			return nil
		},
		c.Server.validateTLS,
		func() error {
			return absPath("server.authentication.x509.clientCAFile", c.Server.Authentication.X509.ClientCAFile, true)
		},
		func() error {
			return positiveDur("server.authentication.webhook.cacheTTL", c.Server.Authentication.Webhook.CacheTTL)
		},
		func() error {
			switch c.Server.Authorization.Mode {
			case "Webhook", "AlwaysAllow":
				return nil
			}
			return &Error{Key: "server.authorization.mode", Problem: fmt.Sprintf("%q must be Webhook or AlwaysAllow", c.Server.Authorization.Mode)}
		},
		func() error {
			return positiveDur("server.authorization.webhook.cacheAuthorizedTTL", c.Server.Authorization.Webhook.CacheAuthorizedTTL)
		},
		func() error {
			return positiveDur("server.authorization.webhook.cacheUnauthorizedTTL", c.Server.Authorization.Webhook.CacheUnauthorizedTTL)
		},
		func() error { return absPath("server.kubeconfig", c.Server.Kubeconfig, true) },
		c.validateIdentity,
		func() error { return positiveDur("gc.containerGCPeriod", c.GC.ContainerGCPeriod) },
		func() error { return nonNegative("gc.maxPerPodContainer", c.GC.MaxPerPodContainer) },
		func() error {
			if c.GC.MaxContainers < -1 {
				return &Error{Key: "gc.maxContainers", Problem: fmt.Sprintf("%d must be -1 (no cap) or more", c.GC.MaxContainers)}
			}
			return nil
		},
		func() error { return nonNegativeDur("gc.minAge", c.GC.MinAge) },
		func() error { return positiveDur("gc.imageGCPeriod", c.GC.ImageGCPeriod) },
		func() error { return percent("gc.imageGCHighThresholdPercent", c.GC.ImageGCHighThresholdPercent) },
		func() error { return percent("gc.imageGCLowThresholdPercent", c.GC.ImageGCLowThresholdPercent) },
		func() error {
			if c.GC.ImageGCLowThresholdPercent > c.GC.ImageGCHighThresholdPercent {
				return &Error{Key: "gc.imageGCLowThresholdPercent", Problem: fmt.Sprintf("%d must not exceed gc.imageGCHighThresholdPercent (%d)", c.GC.ImageGCLowThresholdPercent, c.GC.ImageGCHighThresholdPercent)}
			}
			return nil
		},
		func() error { return nonNegativeDur("gc.imageMinimumGCAge", c.GC.ImageMinimumGCAge) },
		func() error { return nonNegativeDur("gc.imageMaximumGCAge", c.GC.ImageMaximumGCAge) },
		func() error {
			q, err := resource.ParseQuantity(c.GC.ContainerLogMaxSize)
			if err != nil || q.Sign() <= 0 {
				return &Error{Key: "gc.containerLogMaxSize", Problem: fmt.Sprintf("%q is not a positive quantity (e.g. 10Mi)", c.GC.ContainerLogMaxSize)}
			}
			return nil
		},
		func() error {
			if c.GC.ContainerLogMaxFiles < 2 {
				return &Error{Key: "gc.containerLogMaxFiles", Problem: fmt.Sprintf("%d must be at least 2", c.GC.ContainerLogMaxFiles)}
			}
			return nil
		},
		func() error { return positiveDur("gc.containerLogMonitorInterval", c.GC.ContainerLogMonitorInterval) },
		func() error { return thresholds("gc.evictionHard", c.GC.EvictionHard) },
		func() error { return thresholds("gc.evictionSoft", c.GC.EvictionSoft) },
		func() error {
			for sig, d := range c.GC.EvictionSoftGracePeriod {
				if _, ok := c.GC.EvictionSoft[sig]; !ok {
					return &Error{Key: "gc.evictionSoftGracePeriod", Problem: fmt.Sprintf("%s has no gc.evictionSoft threshold", sig)}
				}
				if dd, err := time.ParseDuration(d); err != nil || dd < 0 {
					return &Error{Key: "gc.evictionSoftGracePeriod", Problem: fmt.Sprintf("%s: invalid duration %q", sig, d)}
				}
			}
			for sig := range c.GC.EvictionSoft {
				if _, ok := c.GC.EvictionSoftGracePeriod[sig]; !ok {
					return &Error{Key: "gc.evictionSoftGracePeriod", Problem: fmt.Sprintf("soft threshold %s needs a grace period", sig)}
				}
			}
			return nil
		},
		func() error {
			return nonNegativeDur("gc.evictionPressureTransitionPeriod", c.GC.EvictionPressureTransitionPeriod)
		},
		func() error { return positiveDur("gc.evictionMonitoringPeriod", c.GC.EvictionMonitoringPeriod) },
		func() error { return nonNegativeDur("gc.shutdownGracePeriod", c.GC.ShutdownGracePeriod) },
		func() error {
			return nonNegativeDur("gc.shutdownGracePeriodCriticalPods", c.GC.ShutdownGracePeriodCriticalPods)
		},
		func() error {
			// The kubelet's ValidateKubeletConfiguration.
			if c.GC.ShutdownGracePeriodCriticalPods > c.GC.ShutdownGracePeriod {
				return &Error{Key: "gc.shutdownGracePeriodCriticalPods", Problem: fmt.Sprintf("%v must not exceed gc.shutdownGracePeriod (%v)",
					c.GC.ShutdownGracePeriodCriticalPods, c.GC.ShutdownGracePeriod)}
			}
			if c.GC.ShutdownGracePeriod%time.Second != 0 || c.GC.ShutdownGracePeriodCriticalPods%time.Second != 0 {
				return &Error{Key: "gc.shutdownGracePeriod", Problem: "shutdownGracePeriod and shutdownGracePeriodCriticalPods must be whole seconds"}
			}
			return nil
		},
		func() error { return absPath("supervisor.binDir", c.Supervisor.BinDir, true) },
		func() error { return positiveDur("supervisor.restartBackoff", c.Supervisor.RestartBackoff) },
		func() error { return positiveDur("supervisor.restartBackoffMax", c.Supervisor.RestartBackoffMax) },
		func() error { return positiveDur("supervisor.restartBackoffReset", c.Supervisor.RestartBackoffReset) },
		func() error { return positiveDur("supervisor.readyTimeout", c.Supervisor.ReadyTimeout) },
	}
	for _, check := range checks {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

// EvictionSignals are the signals evictionHard/evictionSoft may name.
var EvictionSignals = []string{"memory.available", "nodefs.available", "nodefs.inodesFree", "imagefs.available", "imagefs.inodesFree", "pid.available"}

func thresholds(key string, m map[string]string) error {
	for sig, v := range m {
		known := false
		for _, s := range EvictionSignals {
			known = known || s == sig
		}
		if !known {
			return &Error{Key: key, Problem: fmt.Sprintf("unknown signal %q (one of %s)", sig, strings.Join(EvictionSignals, ", "))}
		}
		if _, _, err := ParseThreshold(v); err != nil {
			return &Error{Key: key, Problem: fmt.Sprintf("%s: %v", sig, err)}
		}
	}
	return nil
}

// ParseThreshold reads an eviction threshold: a quantity ("100Mi") or a
// percentage ("10%"). It returns either the quantity or the fraction.
func ParseThreshold(v string) (*resource.Quantity, float64, error) {
	v = strings.TrimSpace(v)
	if strings.HasSuffix(v, "%") {
		var p float64
		if _, err := fmt.Sscanf(strings.TrimSuffix(v, "%"), "%g", &p); err != nil || p < 0 || p > 100 {
			return nil, 0, fmt.Errorf("%q is not a percentage between 0%% and 100%%", v)
		}
		return nil, p / 100, nil
	}
	q, err := resource.ParseQuantity(v)
	if err != nil || q.Sign() < 0 {
		return nil, 0, fmt.Errorf("%q is neither a quantity (100Mi) nor a percentage (10%%)", v)
	}
	return &q, 0, nil
}

func absPath(key, p string, optional bool) error {
	if p == "" {
		if optional {
			return nil
		}
		return &Error{Key: key, Problem: "must not be empty"}
	}
	if !filepath.IsAbs(p) {
		return &Error{Key: key, Problem: fmt.Sprintf("%q must be an absolute path", p)}
	}
	return nil
}

func port(key string, n int, zeroOff bool) error {
	if (n == 0 && zeroOff) || (n > 0 && n < 65536) {
		return nil
	}
	return &Error{Key: key, Problem: fmt.Sprintf("%d is not a TCP port (1-65535)", n)}
}

// BusBuckets and BusEventStreams count the streams whose maximum the bus's
// store must hold. bus.Buckets is the source (config cannot import bus); a
// test in bus checks these numbers.
const BusBuckets, BusEventStreams = 11, 2

func busSizes(b BusConfig) error {
	for _, f := range []struct{ key, v string }{
		{"bus.maxStore", b.MaxStore}, {"bus.bucketMaxBytes", b.BucketMaxBytes},
		{"bus.maxValueSize", b.MaxValueSize}, {"bus.eventsMaxBytes", b.EventsMaxBytes},
	} {
		q, err := resource.ParseQuantity(f.v)
		if err != nil || q.Sign() <= 0 {
			return &Error{Key: f.key, Problem: fmt.Sprintf("%q is not a positive size (e.g. 128Mi)", f.v)}
		}
	}
	s := b.Sizes()
	if s.MaxValueSize > 8<<20 {
		return &Error{Key: "bus.maxValueSize", Problem: "must not exceed the bus's 8Mi message limit"}
	}
	if s.MaxValueSize > s.BucketMaxBytes {
		return &Error{Key: "bus.maxValueSize", Problem: "must not exceed bus.bucketMaxBytes"}
	}
	// Every stream reserves its maximum; changing one's limits at start
	// reserves the new maximum before the old is released, so one more
	// stream's worth must fit (measured: without it the bus cannot start).
	need := BusBuckets*s.BucketMaxBytes + BusEventStreams*s.EventsMaxBytes + max(s.BucketMaxBytes, s.EventsMaxBytes)
	if need > s.MaxStore {
		return &Error{Key: "bus.maxStore", Problem: fmt.Sprintf("%s cannot hold %d buckets of bus.bucketMaxBytes and %d events streams of bus.eventsMaxBytes, plus one of them spare (%d bytes)",
			b.MaxStore, BusBuckets, BusEventStreams, need)}
	}
	return nil
}

func positive(key string, n int) error {
	if n <= 0 {
		return &Error{Key: key, Problem: fmt.Sprintf("%d must be positive", n)}
	}
	return nil
}

func nonNegative(key string, n int) error {
	if n < 0 {
		return &Error{Key: key, Problem: fmt.Sprintf("%d must not be negative", n)}
	}
	return nil
}

func positiveFloat(key string, f float64) error {
	if f <= 0 {
		return &Error{Key: key, Problem: fmt.Sprintf("%g must be positive", f)}
	}
	return nil
}

// MinDeletedKeyRetention is bus.MinDeletedKeyRetention (a test holds them
// equal): the config does not import the bus.
const MinDeletedKeyRetention = 10 * time.Minute

func positiveDur(key string, d time.Duration) error {
	if d <= 0 {
		return &Error{Key: key, Problem: fmt.Sprintf("%s must be a positive duration", d)}
	}
	return nil
}

func nonNegativeDur(key string, d time.Duration) error {
	if d < 0 {
		return &Error{Key: key, Problem: fmt.Sprintf("%s must not be negative", d)}
	}
	return nil
}

func percent(key string, p int) error {
	if p < 0 || p > 100 {
		return &Error{Key: key, Problem: fmt.Sprintf("%d must be between 0 and 100", p)}
	}
	return nil
}

func cidr(key, v string, optional bool) error {
	if v == "" && optional {
		return nil
	}
	if _, _, err := net.ParseCIDR(v); err != nil {
		return &Error{Key: key, Problem: fmt.Sprintf("%q is not a CIDR (e.g. 10.88.0.0/16)", v)}
	}
	return nil
}

func endpoint(key, v string, optional bool) error {
	if v == "" && optional {
		return nil
	}
	if strings.HasPrefix(v, "unix:///") || strings.HasPrefix(v, "/") {
		return nil
	}
	return &Error{Key: key, Problem: fmt.Sprintf("%q must be unix:///path/to/socket", v)}
}

func loopback(key, v string, optional bool) error {
	if v == "" && optional {
		return nil
	}
	host, port, err := net.SplitHostPort(v)
	if err != nil {
		return &Error{Key: key, Problem: fmt.Sprintf("%q is not host:port", v)}
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return &Error{Key: key, Problem: fmt.Sprintf("bad port %q", port)}
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return &Error{Key: key, Problem: fmt.Sprintf("%q must be a loopback address", host)}
	}
	return nil
}

func loopbackOrAny(key, v string) error {
	if v == "" {
		return nil
	}
	host, port, err := net.SplitHostPort(v)
	if err != nil {
		return &Error{Key: key, Problem: fmt.Sprintf("%q is not host:port", v)}
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return &Error{Key: key, Problem: fmt.Sprintf("bad port %q", port)}
	}
	if host != "" && host != "localhost" && net.ParseIP(host) == nil {
		return &Error{Key: key, Problem: fmt.Sprintf("%q is not an IP address", host)}
	}
	return nil
}

// validateTLS checks tlsMinVersion and tlsCipherSuites as the kubelet's
// validation does (its names, through component-base's tables).
func (s *ServerConfig) validateTLS() error {
	if _, err := cliflag.TLSVersion(s.TLSMinVersion); err != nil {
		return &Error{Key: "server.tlsMinVersion", Problem: fmt.Sprintf("%q is not one of %s", s.TLSMinVersion, strings.Join(cliflag.TLSPossibleVersions(), ", "))}
	}
	for _, name := range s.TLSCipherSuites {
		if _, err := cliflag.TLSCipherSuites([]string{name}); err != nil {
			return &Error{Key: "server.tlsCipherSuites", Problem: fmt.Sprintf("%q is no cipher suite Go supports (Go's names, as the kubelet's --tls-cipher-suites: e.g. TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256)", name)}
		}
	}
	if s.TLSMinVersion == "VersionTLS13" && len(s.TLSCipherSuites) > 0 {
		return &Error{Key: "server.tlsCipherSuites", Problem: "must be empty with server.tlsMinVersion VersionTLS13: TLS 1.3's cipher suites are not configurable"}
	}
	return nil
}

// ReadOnlyAddress is where nodelet-server serves the read-only API, and the
// key that says so: server.address:server.readOnlyPort, else the deprecated
// status.readOnlyAddress, else "" (off, the kubelet's default).
func (c *Config) ReadOnlyAddress() (addr, key string) {
	switch {
	case c.Server.ReadOnlyPort != 0:
		return net.JoinHostPort(c.Server.Address, strconv.Itoa(c.Server.ReadOnlyPort)), "server.readOnlyPort"
	case c.Status.ReadOnlyAddress != "":
		return c.Status.ReadOnlyAddress, "status.readOnlyAddress"
	}
	return "", ""
}

// Endpoint returns the CRI endpoint as a unix:// URL.
func (c *RuntimeConfig) EndpointURL() string {
	if strings.HasPrefix(c.Endpoint, "/") {
		return "unix://" + c.Endpoint
	}
	return c.Endpoint
}

// SocketPath returns the filesystem path of the CRI socket.
func (c *RuntimeConfig) SocketPath() string {
	return strings.TrimPrefix(c.Endpoint, "unix://")
}

// enforceNodeAllocatable checks runtime.enforceNodeAllocatable as the
// kubelet's ValidateKubeletConfiguration does: known keys, none alone,
// and a reserved cgroup named for each *-reserved key.
func enforceNodeAllocatable(r *RuntimeConfig) error {
	const key = "runtime.enforceNodeAllocatable"
	for _, v := range r.EnforceNodeAllocatable {
		switch v {
		case "pods":
		case "kube-reserved", "kube-reserved-compressible":
			if r.KubeReservedCgroup == "" {
				return &Error{Key: key, Problem: fmt.Sprintf("%q needs runtime.kubeReservedCgroup", v)}
			}
		case "system-reserved", "system-reserved-compressible":
			if r.SystemReservedCgroup == "" {
				return &Error{Key: key, Problem: fmt.Sprintf("%q needs runtime.systemReservedCgroup", v)}
			}
		case "none":
			if len(r.EnforceNodeAllocatable) > 1 {
				return &Error{Key: key, Problem: `"none" cannot be combined with other values`}
			}
		default:
			return &Error{Key: key, Problem: fmt.Sprintf("%q must be pods, kube-reserved, system-reserved, kube-reserved-compressible, system-reserved-compressible or none", v)}
		}
	}
	return nil
}
