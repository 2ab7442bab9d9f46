package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nodelet/nodelet/bus"

	"github.com/spf13/pflag"
	"sigs.k8s.io/yaml"
)

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "nodelet.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDefaults(t *testing.T) {
	cfg, err := LoadFile("")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Sources.FileCheckFrequency != 20*time.Second || cfg.Status.NodeStatusUpdateFrequency != 10*time.Second ||
		cfg.GC.ImageGCHighThresholdPercent != 85 || cfg.Node.MaxPods != 110 || cfg.Bus.Listen != "127.0.0.1:4250" ||
		cfg.Runtime.Endpoint != "unix:///run/containerd/containerd.sock" || cfg.Status.ReadOnlyAddress != "" ||
		cfg.Server.ReadOnlyPort != 0 || !cfg.Server.EnableSystemLogHandler || cfg.Server.Port != 10250 ||
		cfg.Server.HealthzBindAddress != "127.0.0.1" || cfg.Server.HealthzPort != 10248 ||
		cfg.Node.StateDir != "/var/lib/nodelet" || cfg.GC.EvictionHard["memory.available"] != "100Mi" ||
		cfg.Runtime.MaxConcurrentSandboxCreations != 0 {
		t.Fatalf("defaults: %+v", cfg)
	}
	host, _ := os.Hostname()
	if cfg.Node.Name != strings.ToLower(host) {
		t.Fatalf("node.name = %q, want hostname", cfg.Node.Name)
	}
}

func TestExampleConfigLoads(t *testing.T) {
	cfg, err := LoadFile("../../deploy/nodelet.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.Runtime.ManageContainerd || cfg.Sources.StaticPodPath != "/etc/nodelet/manifests" {
		t.Fatalf("example not applied: %+v", cfg.Runtime)
	}
}

// TestReadOnlyAddress: the kubelet's readOnlyPort on server.address, else
// the deprecated status.readOnlyAddress, else off.
func TestReadOnlyAddress(t *testing.T) {
	for _, tc := range []struct {
		input, addr, key string
	}{
		{"", "", ""},
		{"server:\n  address: 127.0.0.1\n  readOnlyPort: 10255\n", "127.0.0.1:10255", "server.readOnlyPort"},
		{"status:\n  readOnlyAddress: 127.0.0.1:10256\n", "127.0.0.1:10256", "status.readOnlyAddress"},
	} {
		cfg, err := LoadFile(writeFile(t, tc.input))
		if err != nil {
			t.Fatal(err)
		}
		if addr, key := cfg.ReadOnlyAddress(); addr != tc.addr || key != tc.key {
			t.Errorf("%q: ReadOnlyAddress() = %q %q, want %q %q", tc.input, addr, key, tc.addr, tc.key)
		}
	}
	cfg, err := LoadFile("../../deploy/nodelet.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if addr, _ := cfg.ReadOnlyAddress(); addr != "127.0.0.1:10255" {
		t.Errorf("deploy/nodelet.yaml serves the read-only API at %q, want 127.0.0.1:10255 (README, scripts/run.sh)", addr)
	}
}

func TestFileErrorsNameTheKey(t *testing.T) {
	for _, tc := range []struct {
		name, input, errContains string
	}{
		{"unknown key", "node:\n  nmae: x\n", "node.nmae: unknown key"},
		{"unknown section", "nodes:\n  name: x\n", "nodes: unknown key"},
		{"bad duration", "sources:\n  fileCheckFrequency: 20 parsecs\n", "sources.fileCheckFrequency: invalid duration"},
		{"duration without unit", "sources:\n  fileCheckFrequency: 20\n", "sources.fileCheckFrequency: invalid duration 20"},
		{"not a number", "node:\n  maxPods: many\n", "node.maxPods"},
		{"read-only port twice", "status:\n  readOnlyAddress: 127.0.0.1:10255\nserver:\n  readOnlyPort: 10255\n",
			"status.readOnlyAddress: deprecated and set together with server.readOnlyPort"},
		{"containerd version", "runtime:\n  containerdVersion: 3\n", "runtime.containerdVersion: 3 must be 1 (Debian's containerd 1.6) or 2 (containerd 2.x)"},
		{"relative containerd binary", "runtime:\n  containerdBinary: bin/containerd\n", "runtime.containerdBinary"},
		{"healthz port out of range", "server:\n  healthzPort: 70000\n", "server.healthzPort: 70000 is not a TCP port"},
		{"healthz address not an IP", "server:\n  healthzBindAddress: localhost\n", `server.healthzBindAddress: "localhost" is not an IP address`},
		{"negative", "node:\n  maxPods: -3\n", "node.maxPods: -3 must be positive"},
		{"bus not loopback", "bus:\n  listen: 0.0.0.0:4250\n", "bus.listen"},
		{"low above high", "gc:\n  imageGCLowThresholdPercent: 90\n", "gc.imageGCLowThresholdPercent"},
		{"bad taint effect", "node:\n  taints: [{key: a, effect: Never}]\n", "node.taints[0].effect"},
		{"bad eviction signal", "gc:\n  evictionHard: {memory.free: 1Gi}\n", "gc.evictionHard: unknown signal"},
		{"bad eviction value", "gc:\n  evictionHard: {memory.available: lots}\n", "gc.evictionHard"},
		{"bad url", "sources:\n  manifestURL: ftp://x\n", "sources.manifestURL"},
		{"bad endpoint", "runtime:\n  endpoint: tcp://1.2.3.4:1\n", "runtime.endpoint"},
		{"bad cgroup driver", "runtime:\n  cgroupDriver: upstart\n", `runtime.cgroupDriver: "upstart" must be cgroupfs or systemd`},
		{"zero pod pids limit", "runtime:\n  podPidsLimit: 0\n", "runtime.podPidsLimit: 0 must be positive, or -1"},
		{"cgroup root with _", "runtime:\n  cgroupRoot: /no_de\n", "runtime.cgroupRoot"},
		{"kube-reserved without its cgroup", "runtime:\n  enforceNodeAllocatable: [pods, kube-reserved]\n",
			`runtime.enforceNodeAllocatable: "kube-reserved" needs runtime.kubeReservedCgroup`},
		{"unknown enforcement", "runtime:\n  enforceNodeAllocatable: [everything]\n", `runtime.enforceNodeAllocatable: "everything"`},
		{"none with others", "runtime:\n  enforceNodeAllocatable: [none, pods]\n", `"none" cannot be combined`},
		{"relative state dir", "node:\n  stateDir: var/lib\n", "node.stateDir"},
		{"relative root dir", "node:\n  rootDir: var/lib/kubelet\n", `node.rootDir: "var/lib/kubelet" must be an absolute path`},
		{"empty root dir", "node:\n  rootDir: \"\"\n", "node.rootDir: must not be empty"},
		{"bad cidr", "node:\n  podCIDR: 10.88/16\n", "node.podCIDR"},
		{"bad quantity", "node:\n  kubeReserved: {cpu: lots}\n", "node.kubeReserved"},
		{"bad bus size", "bus:\n  bucketMaxBytes: big\n", "bus.bucketMaxBytes"},
		{"bus store too small", "bus:\n  maxStore: 1Gi\n", "bus.maxStore"},
		{"value over the bus limit", "bus:\n  maxValueSize: 9Mi\n", "bus.maxValueSize"},
		{"zero events age", "bus:\n  eventsMaxAge: 0s\n", "bus.eventsMaxAge"},
		{"deleted keys kept too briefly", "bus:\n  deletedKeyRetention: 5m\n", "bus.deletedKeyRetention: 5m0s is below the 10m0s"},
		{"critical share over the shutdown period", "gc:\n  shutdownGracePeriod: 10s\n  shutdownGracePeriodCriticalPods: 20s\n", "gc.shutdownGracePeriodCriticalPods: 20s must not exceed gc.shutdownGracePeriod (10s)"},
		{"negative shutdown period", "gc:\n  shutdownGracePeriod: -1s\n", "gc.shutdownGracePeriod"},
		{"not yaml", "node: [\n", "not valid YAML"},
		{"section not a map", "node: 3\n", "node: must be a mapping"},
		{"relative kubeconfig", "node:\n  kubeconfig: kubelet.conf\n", "node.kubeconfig: \"kubelet.conf\" must be an absolute path"},
		{"bootstrap without kubeconfig", "node:\n  bootstrapKubeconfig: /b\n", "node.bootstrapKubeconfig: needs node.kubeconfig"},
		{"bootstrap is the kubeconfig", "node:\n  kubeconfig: /k\n  bootstrapKubeconfig: /k\n", "node.bootstrapKubeconfig: must differ"},
		{"rotation standalone", "node:\n  rotateCertificates: true\n", "node.rotateCertificates: needs node.kubeconfig"},
		{"serving bootstrap standalone", "server:\n  serverTLSBootstrap: true\n", "server.serverTLSBootstrap: needs node.kubeconfig"},
		{"serving bootstrap and files", "node:\n  kubeconfig: /k\nserver:\n  serverTLSBootstrap: true\n  tlsCertFile: /c\n  tlsPrivateKeyFile: /k2\n", "server.serverTLSBootstrap: excludes server.tlsCertFile"},
		{"memory limit of no process", "memory:\n  limits: {kubelet: 64Mi}\n", `memory.limits.kubelet: "kubelet" is not a nodelet process`},
		{"bad memory limit", "memory:\n  limits: {runtime: lots}\n", `memory.limits.runtime: "lots" is not a size`},
		{"memory limit too small", "memory:\n  limits: {gc: 1Mi}\n", "memory.limits.gc: 1Mi is below 8Mi"},
		{"zero gc percent", "memory:\n  gcPercent: 0\n", "memory.gcPercent: 0 must be a positive percentage"},
		{"collection off without limit", "memory:\n  gcPercent: -1\n  limits: {bus: \"0\"}\n", "memory.gcPercent: -1 (collection off) needs a memory limit for every process; bus has none"},
		{"two identities", "node:\n  kubeconfig: /k\nsources:\n  kubeconfig: /other\n", "sources.kubeconfig: \"/other\" differs from node.kubeconfig"},
		{"bad TLS version", "server:\n  tlsMinVersion: TLS1.2\n", `server.tlsMinVersion: "TLS1.2" is not one of VersionTLS10, VersionTLS11, VersionTLS12, VersionTLS13`},
		{"unknown cipher suite", "server:\n  tlsCipherSuites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, TLS_NULL]\n", `server.tlsCipherSuites: "TLS_NULL" is no cipher suite`},
		{"credential provider config without bin dir", "runtime:\n  imageCredentialProviderConfig: /etc/cp.yaml\n", "runtime.imageCredentialProviderBinDir: must be set with runtime.imageCredentialProviderConfig"},
		{"credential provider bin dir without config", "runtime:\n  imageCredentialProviderBinDir: /usr/libexec/cp\n", "runtime.imageCredentialProviderConfig: must be set with runtime.imageCredentialProviderBinDir"},
		{"relative credential provider config", "runtime:\n  imageCredentialProviderConfig: cp.yaml\n  imageCredentialProviderBinDir: /b\n", `runtime.imageCredentialProviderConfig: "cp.yaml" must be an absolute path`},
		{"unknown verification policy", "runtime:\n  imagePullCredentialsVerificationPolicy: Sometimes\n", `runtime.imagePullCredentialsVerificationPolicy: "Sometimes": valid options are NeverVerify`},
		{"allowlist with another policy", "runtime:\n  preloadedImagesVerificationAllowlist: [reg.io/x]\n", "runtime.preloadedImagesVerificationAllowlist: can't be set if runtime.imagePullCredentialsVerificationPolicy is not NeverVerifyAllowlistedImages"},
		{"allowlist with a tag", "runtime:\n  imagePullCredentialsVerificationPolicy: NeverVerifyAllowlistedImages\n  preloadedImagesVerificationAllowlist: [reg.io/x:1]\n", "runtime.preloadedImagesVerificationAllowlist: invalid image pattern: neither tag nor digest is accepted"},
		{"cipher suites with TLS 1.3", "server:\n  tlsMinVersion: VersionTLS13\n  tlsCipherSuites: [TLS_AES_128_GCM_SHA256]\n", "server.tlsCipherSuites: must be empty with server.tlsMinVersion VersionTLS13"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadFile(writeFile(t, tc.input))
			var cerr *Error
			if !errors.As(err, &cerr) {
				t.Fatalf("err = %v, want *Error", err)
			}
			if !strings.Contains(err.Error(), tc.errContains) {
				t.Fatalf("err = %q, want it to contain %q", err, tc.errContains)
			}
		})
	}
}

func TestEnvAndFlagsOverrideFile(t *testing.T) {
	p := writeFile(t, "sources:\n  staticPodPath: /from/file\n  fileCheckFrequency: 5s\nnode:\n  name: filenode\n")
	t.Setenv("NODELET_SOURCES_STATICPODPATH", "/from/env")
	t.Setenv("NODELET_RUNTIME_CNIBINDIRS", "/a, /b")
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	l := NewLoader(fs)
	if err := fs.Parse([]string{"--config", p, "--node.name", "flagnode", "--gc.maxContainers", "7"}); err != nil {
		t.Fatal(err)
	}
	cfg, err := l.Load()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Sources.StaticPodPath != "/from/env" {
		t.Errorf("env did not override: %q", cfg.Sources.StaticPodPath)
	}
	if cfg.Node.Name != "flagnode" || cfg.GC.MaxContainers != 7 {
		t.Errorf("flags did not override: %q %d", cfg.Node.Name, cfg.GC.MaxContainers)
	}
	if cfg.Sources.FileCheckFrequency != 5*time.Second {
		t.Errorf("file value lost: %v", cfg.Sources.FileCheckFrequency)
	}
	if strings.Join(cfg.Runtime.CNIBinDirs, ":") != "/a:/b" {
		t.Errorf("list from env: %v", cfg.Runtime.CNIBinDirs)
	}
}

func TestBadEnvValueNamesKey(t *testing.T) {
	t.Setenv("NODELET_STATUS_NODESTATUSUPDATEFREQUENCY", "often")
	_, err := LoadFile("")
	if err == nil || !strings.Contains(err.Error(), "status.nodeStatusUpdateFrequency") {
		t.Fatalf("err = %v", err)
	}
}

func TestEveryKeyHasADefaultComment(t *testing.T) {
	src, err := os.ReadFile("config.go")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(src), "\n")
	for i, l := range lines {
		if strings.Contains(l, "`mapstructure:\"") && !strings.Contains(l, "Config ") && i > 0 {
			if !strings.Contains(lines[i-1], "Default:") {
				t.Errorf("config.go:%d: field has no comment ending with its default", i+1)
			}
		}
	}
}

func TestToMapRoundTrips(t *testing.T) {
	cfg, err := LoadFile("../../deploy/nodelet.yaml")
	if err != nil {
		t.Fatal(err)
	}
	b, err := yaml.Marshal(ToMap(cfg))
	if err != nil {
		t.Fatal(err)
	}
	again, err := LoadFile(writeFile(t, string(b)))
	if err != nil {
		t.Fatalf("shown config does not load: %v\n%s", err, b)
	}
	if !reflect.DeepEqual(cfg, again) {
		t.Fatalf("round trip changed the config:\n%+v\n%+v", cfg, again)
	}
}

// TestDeprecatedSourcesKubeconfig: the old key still names the node's
// identity, with a deprecation message naming the new key; the new key
// alone says nothing.
func TestDeprecatedSourcesKubeconfig(t *testing.T) {
	cfg, err := LoadFile(writeFile(t, "sources:\n  kubeconfig: /etc/nodelet/node.kubeconfig\n"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.NodeKubeconfig() != "/etc/nodelet/node.kubeconfig" {
		t.Fatalf("NodeKubeconfig() = %q", cfg.NodeKubeconfig())
	}
	if d := cfg.Deprecations(); len(d) != 1 || !strings.Contains(d[0], "sources.kubeconfig is deprecated: use node.kubeconfig") {
		t.Fatalf("deprecations %q", d)
	}
	cfg, err = LoadFile(writeFile(t, "node:\n  kubeconfig: /etc/nodelet/node.kubeconfig\n  bootstrapKubeconfig: /etc/nodelet/bootstrap.kubeconfig\n  rotateCertificates: true\nserver:\n  serverTLSBootstrap: true\n"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.NodeKubeconfig() != "/etc/nodelet/node.kubeconfig" || len(cfg.Deprecations()) != 0 ||
		!cfg.Node.RotateCertificates || !cfg.Server.ServerTLSBootstrap || cfg.Node.BootstrapKubeconfig != "/etc/nodelet/bootstrap.kubeconfig" {
		t.Fatalf("identity keys not applied: %+v %+v %v", cfg.Node, cfg.Server, cfg.Deprecations())
	}
	// Both keys naming the same file are fine (a config being migrated).
	if _, err := LoadFile(writeFile(t, "node:\n  kubeconfig: /k\nsources:\n  kubeconfig: /k\n")); err != nil {
		t.Fatal(err)
	}
}

// The cgroup settings default as KubeletConfiguration's: cgroupfs,
// podPidsLimit -1, enforceNodeAllocatable [pods].
func TestCgroupDefaults(t *testing.T) {
	r := Defaults().Runtime
	if r.CgroupDriver != "cgroupfs" || r.PodPidsLimit != -1 || len(r.EnforceNodeAllocatable) != 1 || r.EnforceNodeAllocatable[0] != "pods" || r.CgroupRoot != "/nodelet" {
		t.Fatalf("cgroup defaults: %+v", r)
	}
}

// node.podCIDR left at its default is told apart from one set by the file
// or the environment: in a cluster the first waits for the Node's range.
func TestPodCIDRDefaulted(t *testing.T) {
	tests := []struct {
		name, file, env string
		want            bool
	}{
		{name: "unset", file: "node:\n  name: n\n", want: true},
		{name: "in the file", file: "node:\n  podCIDR: 10.1.0.0/16\n", want: false},
		{name: "in the file, its default value", file: "node:\n  podCIDR: 10.88.0.0/16\n", want: false},
		{name: "in the environment", file: "node:\n  name: n\n", env: "10.2.0.0/16", want: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env != "" {
				t.Setenv("NODELET_NODE_PODCIDR", tc.env)
			}
			cfg, err := LoadFile(writeFile(t, tc.file))
			if err != nil {
				t.Fatal(err)
			}
			if got := cfg.Node.PodCIDRDefaulted(); got != tc.want {
				t.Errorf("PodCIDRDefaulted() = %v, want %v", got, tc.want)
			}
		})
	}
	if Defaults().Node.PodCIDRDefaulted() {
		t.Error("a Config built in code counts as set")
	}
}

func TestMinDeletedKeyRetentionIsTheBus(t *testing.T) {
	if MinDeletedKeyRetention != bus.MinDeletedKeyRetention {
		t.Fatalf("config's minimum %v, the bus's %v", MinDeletedKeyRetention, bus.MinDeletedKeyRetention)
	}
	if d := Defaults().Bus.DeletedKeyRetention; d != bus.DefaultDeletedKeyRetention {
		t.Fatalf("config's default %v, the bus's %v", d, bus.DefaultDeletedKeyRetention)
	}
}

// Each section validates itself: the defaults pass, and a bad value is
// named with its section's key.
func TestSectionsValidateThemselves(t *testing.T) {
	for _, tc := range []struct {
		section string
		break_  func(c *Config)
		check   func(c *Config) error
		key     string
	}{
		{"node", func(c *Config) { c.Node.MaxPods = 0 }, func(c *Config) error { return c.Node.Validate() }, "node.maxPods"},
		{"bus", func(c *Config) { c.Bus.DeletedKeyRetention = time.Minute }, func(c *Config) error { return c.Bus.Validate() }, "bus.deletedKeyRetention"},
		{"runtime", func(c *Config) { c.Runtime.CgroupDriver = "x" }, func(c *Config) error { return c.Runtime.Validate() }, "runtime.cgroupDriver"},
		{"sources", func(c *Config) { c.Sources.ManifestURL = "ftp://x" }, func(c *Config) error { return c.Sources.Validate() }, "sources.manifestURL"},
		{"prober", func(c *Config) { c.Prober.MaxConcurrentProbes = -1 }, func(c *Config) error { return c.Prober.Validate() }, "prober.maxConcurrentProbes"},
		{"status", func(c *Config) { c.Status.EventBurst = 0 }, func(c *Config) error { return c.Status.Validate() }, "status.eventBurst"},
		{"server", func(c *Config) { c.Server.Authorization.Mode = "x" }, func(c *Config) error { return c.Server.Validate() }, "server.authorization.mode"},
		{"gc", func(c *Config) { c.GC.ContainerLogMaxFiles = 1 }, func(c *Config) error { return c.GC.Validate() }, "gc.containerLogMaxFiles"},
		{"supervisor", func(c *Config) { c.Supervisor.ReadyTimeout = 0 }, func(c *Config) error { return c.Supervisor.Validate() }, "supervisor.readyTimeout"},
	} {
		t.Run(tc.section, func(t *testing.T) {
			c := Defaults()
			if err := tc.check(c); err != nil {
				t.Fatalf("defaults: %v", err)
			}
			tc.break_(c)
			err := tc.check(c)
			var ce *Error
			if !errors.As(err, &ce) || ce.Key != tc.key {
				t.Fatalf("err = %v, want an *Error for %s", err, tc.key)
			}
			if err := c.Validate(); !errors.As(err, &ce) || ce.Key != tc.key {
				t.Fatalf("Config.Validate = %v, want the section's error for %s", err, tc.key)
			}
		})
	}
}
