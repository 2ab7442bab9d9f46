package config

import (
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	cliflag "k8s.io/component-base/cli/flag"
)

// Validate checks every value and returns the first problem as an *Error:
// each section validates itself, then what only two sections together can
// tell.
func (c *Config) Validate() error {
	return firstError(
		func() error { return validateMemory(c.Memory) },
		c.Node.Validate,
		c.Bus.Validate,
		c.Runtime.Validate,
		c.Sources.Validate,
		c.Prober.Validate,
		c.Status.Validate,
		c.Server.Validate,
		// status.readOnlyAddress is the deprecated spelling of
		// server.readOnlyPort: set together they disagree.
		func() error {
			if c.Server.ReadOnlyPort != 0 && c.Status.ReadOnlyAddress != "" {
				return &Error{Key: "status.readOnlyAddress", Problem: "deprecated and set together with server.readOnlyPort; keep server.readOnlyPort only"}
			}
			return nil
		},
		// The node's identity: node.kubeconfig and its bootstrap decide
		// what server.serverTLSBootstrap and the deprecated
		// sources.kubeconfig may say.
		c.validateIdentity,
		c.GC.Validate,
		c.Supervisor.Validate,
	)
}

// firstError runs checks in order and returns the first error.
func firstError(checks ...func() error) error {
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
const BusBuckets, BusEventStreams = 12, 2

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
