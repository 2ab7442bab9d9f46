package containerd

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Config is what nodelet sets in containerd's config.toml. Zero fields take
// the defaults named in their comments (see WithDefaults).
type Config struct {
	// Root is containerd's persistent directory (content, snapshots, metadata).
	// Default: /var/lib/nodelet/containerd.
	Root string
	// State is containerd's ephemeral directory (task state, fifos, netns).
	// Default: /run/nodelet/containerd.
	State string
	// Socket is the gRPC (and CRI) socket path. Default: <State>/containerd.sock.
	Socket string
	// TTRPCSocket is the ttrpc socket shims call back on. Default: <Socket>.ttrpc.
	TTRPCSocket string
	// CNIBinDir holds the CNI plugins. Default: /usr/lib/cni (Debian's
	// containernetworking-plugins).
	CNIBinDir string
	// CNIConfDir is where the CRI plugin reads the node's conflist.
	// Default: /etc/nodelet/cni/net.d.
	CNIConfDir string
	// SandboxImage is the pause image. Default: nodelet.local/pause:3.10.
	SandboxImage string
	// Snapshotter for images and containers. Default: overlayfs.
	Snapshotter string
	// LogLevel of containerd. Default: info.
	LogLevel string
	// ConfigFile is where Start writes Render(). Default: <State>/config.toml.
	ConfigFile string
	// Binary is the containerd executable. Default: /usr/bin/containerd.
	Binary string
	// RegistryConfigPath is a hosts directory (<host>/hosts.toml) that maps
	// registries to mirrors, e.g. to a registry on loopback. Default: "" (none).
	RegistryConfigPath string
	// GID is the group of the gRPC (CRI) socket, which containerd then
	// makes 0660: the daemons of their own users that talk to CRI hold it
	// (component.CRIGroup, nodelet-cri). 0: root's alone. Default: 0.
	GID int
	// KillWithParent makes the kernel SIGKILL containerd when the process
	// that started it dies (Pdeathsig): right for tests, wrong for a node.
	// Default: false.
	KillWithParent bool
	// SystemdCgroup makes runc use the systemd cgroup driver (nodelet's
	// runtime.cgroupDriver systemd; needs systemd as init). Default: false
	// (cgroupfs).
	SystemdCgroup bool
	// Namespaces are namespaces containerd (and so its shims and the CNI
	// plugins it calls) runs in, entered with nsenter: a test cluster's
	// node has its own network and UTS namespaces. Default: none (the
	// caller's).
	Namespaces Namespaces
	// Major is containerd's major version, which decides the config's
	// format: 0 or 1 is containerd 1.6 (config version 2), 2 is
	// containerd 2.x (config version 3: the CRI plugin split into
	// io.containerd.cri.v1.images, io.containerd.cri.v1.runtime and
	// io.containerd.grpc.v1.cri). Default: 0 (1.6).
	Major int
	// CDISpecDirs are where containerd 2.x's CRI plugin reads Container
	// Device Interface specs (CDI is always on in 2.x: enable_cdi is
	// ignored): a container's CRI CDIDevices are resolved there (the
	// devices of device plugins and DRA drivers). containerd 1.6 has no
	// CDI. Default: /etc/cdi and /var/run/cdi, containerd's own.
	CDISpecDirs []string
	// ShimBinary is the runc shim (containerd-shim-runc-v2) the runc
	// runtime runs, written as its runtime_path. Default: for Major 2 the
	// one beside Binary (a 2.x build brings its own shim, and PATH would
	// find Debian's 1.6 one first); for 1.6 none (PATH).
	ShimBinary string
	// StatsCollectPeriod is how often, in seconds, the CRI plugin measures
	// snapshot usage (its stats_collect_period): the writable layers'
	// figures of ListContainerStats, which the eviction manager ranks pods
	// by under image filesystem pressure, are at most this old. Default: 0
	// (containerd's, 10).
	StatsCollectPeriod int
}

// Namespaces name existing namespaces by their bind-mounted paths (e.g.
// /run/netns/<name>).
type Namespaces struct {
	Net, UTS string
}

// Command is name with args, run in ns: through nsenter when ns names any
// namespace (nsenter execs the program, so the pid is the program's).
func (ns Namespaces) Command(name string, args ...string) *exec.Cmd {
	var enter []string
	if ns.Net != "" {
		enter = append(enter, "--net="+ns.Net)
	}
	if ns.UTS != "" {
		enter = append(enter, "--uts="+ns.UTS)
	}
	if len(enter) == 0 {
		return exec.Command(name, args...)
	}
	return exec.Command("nsenter", append(append(enter, "--", name), args...)...)
}

// Defaults of Config.
const (
	DefaultRoot         = "/var/lib/nodelet/containerd"
	DefaultState        = "/run/nodelet/containerd"
	DefaultCNIBinDir    = "/usr/lib/cni"
	DefaultCNIConfDir   = "/etc/nodelet/cni/net.d"
	DefaultSandboxImage = "nodelet.local/pause:3.10"
	DefaultSnapshotter  = "overlayfs"
	DefaultBinary       = "/usr/bin/containerd"

	// DefaultRoot2 is containerd 2.x's root: not 1.6's, so that the two
	// never share content, snapshots or metadata and a node can go back and
	// forth between them.
	DefaultRoot2 = "/var/lib/nodelet/containerd2"
	// DefaultBinary2 is where scripts/setup.sh (by default) installs the
	// containerd 2.x it built (with containerd-shim-runc-v2 and ctr beside it).
	DefaultBinary2 = "/usr/local/libexec/nodelet/containerd2/containerd"
	// Version2 is the containerd 2.x that scripts/containerd2.sh builds
	// (scripts/containerd2/go.mod).
	Version2 = "v2.4.2"
)

// WithDefaults returns c with every empty field set to its default.
func (c Config) WithDefaults() Config {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	if c.Major >= 2 {
		def(&c.Root, DefaultRoot2)
		def(&c.Binary, DefaultBinary2)
		def(&c.ShimBinary, filepath.Join(filepath.Dir(c.Binary), "containerd-shim-runc-v2"))
	}
	def(&c.Root, DefaultRoot)
	def(&c.State, DefaultState)
	def(&c.Socket, filepath.Join(c.State, "containerd.sock"))
	def(&c.TTRPCSocket, c.Socket+".ttrpc")
	def(&c.CNIBinDir, DefaultCNIBinDir)
	def(&c.CNIConfDir, DefaultCNIConfDir)
	def(&c.SandboxImage, DefaultSandboxImage)
	def(&c.Snapshotter, DefaultSnapshotter)
	def(&c.LogLevel, "info")
	def(&c.ConfigFile, filepath.Join(c.State, "config.toml"))
	def(&c.Binary, DefaultBinary)
	if len(c.CDISpecDirs) == 0 {
		c.CDISpecDirs = []string{"/etc/cdi", "/var/run/cdi"}
	}
	return c
}

// disabledPlugins are plugins nodelet never uses; some of them (aufs, btrfs,
// zfs, devmapper) probe the host at start, which costs time. The legacy
// io.containerd.runtime.v1.linux stays: 1.6's tasks service requires it.
var disabledPlugins = []string{
	"io.containerd.internal.v1.opt",
	"io.containerd.internal.v1.tracing",
	"io.containerd.snapshotter.v1.aufs",
	"io.containerd.snapshotter.v1.btrfs",
	"io.containerd.snapshotter.v1.devmapper",
	"io.containerd.snapshotter.v1.zfs",
	"io.containerd.tracing.processor.v1.otlp",
}

// grpcGID is the [grpc] gid line: containerd chowns its socket to the
// group and makes it 0660.
func grpcGID(gid int) string {
	if gid <= 0 {
		return ""
	}
	return fmt.Sprintf("\n  gid = %d", gid)
}

// CRIGroupGID is the gid of group (component.CRIGroup) when it exists,
// else 0: containerd's socket then stays root's alone.
func CRIGroupGID(group string) (int, error) {
	g, err := user.LookupGroup(group)
	var unknown user.UnknownGroupError
	if errors.As(err, &unknown) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(g.Gid)
}

// disabledPlugins2 are those of containerd 2.x that nodelet never uses, on
// top of disabledPlugins. NRI's would listen on /var/run/nri/nri.sock,
// one path for every containerd on the machine (tests run several at once);
// erofs and blockfile probe the host at start.
var disabledPlugins2 = []string{
	"io.containerd.nri.v1.nri",
	"io.containerd.snapshotter.v1.blockfile",
	"io.containerd.snapshotter.v1.erofs",
}

// Render returns the config.toml for c with defaults applied: version 2
// (containerd 1.6) or, with Major 2, version 3 (containerd 2.x).
func (c Config) Render() string {
	c = c.WithDefaults()
	if c.Major >= 2 {
		return c.render3()
	}
	q := strconv.Quote
	var b strings.Builder
	b.WriteString(c.renderHead(2, disabledPlugins))
	fmt.Fprintf(&b, `  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = %s
    restrict_oom_score_adj = true
    netns_mounts_under_state_dir = true
    disable_tcp_service = true
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
    enable_selinux = false
    max_container_log_line_size = 16384%s

    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = %s
      default_runtime_name = "runc"
      disable_snapshot_annotations = true

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"

        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          SystemdCgroup = %t

    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = %s
      conf_dir = %s
      max_conf_num = 1
%s`, q(c.SandboxImage), statsCollectPeriod(c.StatsCollectPeriod, "    "), q(c.Snapshotter), c.SystemdCgroup, q(c.CNIBinDir), q(c.CNIConfDir), registry(c.RegistryConfigPath))
	return b.String()
}

// render3 is Render for containerd 2.x: config version 3. What 1.6 had in
// io.containerd.grpc.v1.cri is in three plugins there: images (snapshotter,
// the sandbox image as pinned_images.sandbox, registry), runtime (runtimes,
// CNI, restrict_oom_score_adj, netns and log settings) and the gRPC
// service itself (streaming server). See containerd's docs/cri/config.md.
// Version 3 is what every 2.x reads; 2.4 is at version 4 (the [grpc],
// [ttrpc], [debug] and [metrics] sections moved into server plugins) and
// migrates a version-3 file in memory at start, logging a warning once.
func (c Config) render3() string {
	q := strconv.Quote
	var reg string
	if c.RegistryConfigPath != "" {
		reg = fmt.Sprintf(`
    [plugins."io.containerd.cri.v1.images".registry]
      config_path = %s
`, q(c.RegistryConfigPath))
	}
	var shim string
	if c.ShimBinary != "" {
		shim = "\n        runtime_path = " + q(c.ShimBinary)
	}
	var b strings.Builder
	b.WriteString(c.renderHead(3, append(slices.Clone(disabledPlugins), disabledPlugins2...)))
	fmt.Fprintf(&b, `  [plugins."io.containerd.cri.v1.images"]
    snapshotter = %s
    disable_snapshot_annotations = true%s

    [plugins."io.containerd.cri.v1.images".pinned_images]
      sandbox = %s
%s
  [plugins."io.containerd.cri.v1.runtime"]
    cdi_spec_dirs = [%s]
    restrict_oom_score_adj = true
    netns_mounts_under_state_dir = true
    enable_selinux = false
    max_container_log_line_size = 16384

    [plugins."io.containerd.cri.v1.runtime".containerd]
      default_runtime_name = "runc"

      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"%s

        [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
          SystemdCgroup = %t

    [plugins."io.containerd.cri.v1.runtime".cni]
      bin_dirs = [%s]
      conf_dir = %s
      max_conf_num = 1

  [plugins."io.containerd.grpc.v1.cri"]
    disable_tcp_service = true
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
`, q(c.Snapshotter), statsCollectPeriod(c.StatsCollectPeriod, "    "), q(c.SandboxImage), reg, quoteAll(c.CDISpecDirs), shim, c.SystemdCgroup, q(c.CNIBinDir), q(c.CNIConfDir))
	return b.String()
}

// renderHead is what both config versions start with: version, root,
// state, the disabled plugins and the grpc, ttrpc, debug and metrics
// sections, up to [plugins].
func (c Config) renderHead(version int, disabled []string) string {
	q := strconv.Quote
	return fmt.Sprintf(`# Written by nodelet (internal/containerd); changes are overwritten.
version = %d
root = %s
state = %s
oom_score = 0
disabled_plugins = [%s]

[grpc]
  address = %s%s

[ttrpc]
  address = %s

[debug]
  address = ""
  level = %s

[metrics]
  address = ""

[plugins]
`, version, q(c.Root), q(c.State), quoteAll(disabled), q(c.Socket), grpcGID(c.GID), q(c.TTRPCSocket), q(c.LogLevel))
}

// statsCollectPeriod is the CRI plugin's stats_collect_period line (with
// its leading newline and indent), or nothing for containerd's default.
func statsCollectPeriod(seconds int, indent string) string {
	if seconds <= 0 {
		return ""
	}
	return fmt.Sprintf("\n%sstats_collect_period = %d", indent, seconds)
}

// quoteAll is a TOML array's items.
func quoteAll(ss []string) string {
	var out []string
	for _, s := range ss {
		out = append(out, strconv.Quote(s))
	}
	return strings.Join(out, ", ")
}

func registry(configPath string) string {
	if configPath == "" {
		return ""
	}
	return fmt.Sprintf(`
    [plugins."io.containerd.grpc.v1.cri".registry]
      config_path = %s
`, strconv.Quote(configPath))
}

// WriteConfig writes cfg.Render() to path atomically.
func WriteConfig(cfg Config, path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return writeFile(path, []byte(cfg.Render()))
}

func writeFile(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
