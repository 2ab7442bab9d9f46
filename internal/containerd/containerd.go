// Package containerd configures and runs a containerd for nodelet.
//
// Config renders the config.toml that nodelet needs, for containerd 1.6
// (version 2, Debian's package, the default) or, with Major 2, for
// containerd 2.x (version 3, built from its Go module by
// scripts/containerd2.sh): the CRI plugin with restrict_oom_score_adj (root lacks
// CAP_SYS_RESOURCE on the machines nodelet is tested on, and without it every
// sandbox fails with "can't get final child's PID from pipe"), cgroupfs unless
// SystemdCgroup, overlayfs, the node's CNI dirs and sandbox image, and no debug or
// metrics listener. Start runs /usr/bin/containerd with it and returns once
// the CRI socket answers; Stop ends it. The supervisor (`nodelet up` with
// runtime.manageContainerd) and the test environment both use them.
package containerd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
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

// Process is a running containerd started by Start.
type Process struct {
	cfg  Config
	cmd  *exec.Cmd
	done chan struct{}
	err  error // exit status, valid once done is closed
}

// Start writes cfg's config file, starts containerd with its output appended
// to logFile (<State>/containerd.log when empty) and returns once the CRI
// plugin answers Version and reports RuntimeReady. It refuses to start when
// something already answers on cfg.Socket. Cancelling ctx aborts the wait
// (and kills the process); it does not stop a containerd that started.
func Start(ctx context.Context, cfg Config, logFile string) (*Process, error) {
	cfg = cfg.WithDefaults()
	if logFile == "" {
		logFile = filepath.Join(cfg.State, "containerd.log")
	}
	if c, err := net.DialTimeout("unix", cfg.Socket, time.Second); err == nil {
		c.Close()
		return nil, fmt.Errorf("a containerd already answers on %s", cfg.Socket)
	}
	for _, d := range []string{cfg.Root, cfg.State, filepath.Dir(cfg.Socket),
		filepath.Dir(cfg.ConfigFile), filepath.Dir(logFile)} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			return nil, err
		}
	}
	if err := writeFile(cfg.ConfigFile, []byte(cfg.Render())); err != nil {
		return nil, err
	}
	log, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer log.Close()

	cmd := cfg.Namespaces.Command(cfg.Binary, "--config", cfg.ConfigFile)
	cmd.Stdout, cmd.Stderr = log, log
	// Its own process group: a ^C at the operator's terminal is for the
	// supervisor, which then stops containerd (or not) itself.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if cfg.KillWithParent {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	// Shims find runc and containerd-shim-runc-v2 through PATH.
	cmd.Env = withPath(os.Environ())
	start := cmd.Start
	if cfg.KillWithParent {
		start = func() error { return StartOnLockedThread(cmd) }
	}
	if err := start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", cfg.Binary, err)
	}
	p := &Process{cfg: cfg, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	if err := p.waitReady(ctx); err != nil {
		_ = cmd.Process.Kill()
		<-p.done
		return nil, fmt.Errorf("containerd did not become ready: %w%s", err, logTail(logFile))
	}
	return p, nil
}

// Config is the configuration p runs with (defaults applied).
func (p *Process) Config() Config { return p.cfg }

// Pid of the containerd process.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Done is closed when containerd has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Stop sends SIGTERM and waits for containerd to exit; after 10 seconds it
// sends SIGKILL. Running containers and their shims survive, as they must.
func (p *Process) Stop() error {
	select {
	case <-p.done:
		return nil
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		return errors.New("containerd ignored SIGTERM for 10s and was killed")
	}
}

func (p *Process) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	wait := func() error {
		select {
		case <-p.done:
			return fmt.Errorf("containerd exited: %v", p.err)
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			return nil
		}
	}
	// The socket first: a gRPC client that dials too early backs off for a second.
	for {
		if c, err := net.Dial("unix", p.cfg.Socket); err == nil {
			c.Close()
			break
		}
		if err := wait(); err != nil {
			return err
		}
	}
	conn, err := Dial(p.cfg.Socket)
	if err != nil {
		return err
	}
	defer conn.Close()
	var last error
	for {
		if last = RuntimeReady(ctx, conn); last == nil {
			return nil
		}
		// gRPC services are all registered before containerd serves: no CRI
		// service now means the CRI plugin failed to load (see the log).
		if status.Code(last) == codes.Unimplemented {
			return fmt.Errorf("the CRI plugin is not loaded: %w", last)
		}
		if err := wait(); err != nil {
			return fmt.Errorf("%w (last: %v)", err, last)
		}
	}
}

// Dial opens a gRPC client connection to the CRI socket at path (a path or
// a unix:// endpoint). The connection is lazy; calls carry their deadline.
func Dial(path string) (*grpc.ClientConn, error) {
	path = strings.TrimPrefix(path, "unix://")
	return grpc.NewClient("unix://"+path,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(16<<20)))
}

// RuntimeReady asks CRI for Version and Status and returns nil when the
// runtime reports RuntimeReady (network readiness is not required: the CNI
// config may come later).
func RuntimeReady(ctx context.Context, conn *grpc.ClientConn) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	rt := runtimeapi.NewRuntimeServiceClient(conn)
	if _, err := rt.Version(ctx, &runtimeapi.VersionRequest{}); err != nil {
		return err
	}
	st, err := rt.Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		return err
	}
	for _, c := range st.GetStatus().GetConditions() {
		if c.Type == runtimeapi.RuntimeReady {
			if c.Status {
				return nil
			}
			return fmt.Errorf("runtime not ready: %s: %s", c.Reason, c.Message)
		}
	}
	return errors.New("runtime reports no RuntimeReady condition")
}

// NetworkReady returns nil when CRI reports NetworkReady (a valid CNI config
// is loaded), else the reason.
func NetworkReady(ctx context.Context, conn *grpc.ClientConn) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	st, err := runtimeapi.NewRuntimeServiceClient(conn).Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		return err
	}
	for _, c := range st.GetStatus().GetConditions() {
		if c.Type == runtimeapi.NetworkReady {
			if c.Status {
				return nil
			}
			return fmt.Errorf("network not ready: %s: %s", c.Reason, c.Message)
		}
	}
	return errors.New("runtime reports no NetworkReady condition")
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

// withPath makes sure /usr/sbin (runc) and /usr/bin (shims) are on PATH.
func withPath(env []string) []string {
	const need = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	for i, e := range env {
		if v, ok := strings.CutPrefix(e, "PATH="); ok {
			env[i] = "PATH=" + v + ":" + need
			return env
		}
	}
	return append(env, "PATH="+need)
}

// logTail returns, for error messages, the errors in containerd's log (and
// the CRI plugins' failures to load, only warnings there), else its last lines.
func logTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil || len(b) == 0 {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	var important []string
	for _, l := range lines {
		if strings.Contains(l, "level=error") || strings.Contains(l, "level=fatal") || criLoadFailure(l) {
			important = append(important, l)
		}
	}
	what := " ends with"
	if len(important) > 0 {
		lines, what = important, " says"
	}
	if len(lines) > 8 {
		lines = lines[len(lines)-8:]
	}
	return "\n" + path + what + ":\n" + strings.Join(lines, "\n")
}

// criLoadFailure tells whether a log line says a CRI plugin failed to load:
// 1.6 names io.containerd.grpc.v1.cri in the message, 2.x logs
// `msg="failed to load plugin"` with the plugin's id (the root cause is on
// the line of io.containerd.cri.v1.images or .runtime).
func criLoadFailure(l string) bool {
	if strings.Contains(l, `failed to load plugin io.containerd.grpc.v1.cri"`) {
		return true
	}
	return strings.Contains(l, `msg="failed to load plugin"`) &&
		(strings.Contains(l, "id=io.containerd.grpc.v1.cri ") || strings.Contains(l, "id=io.containerd.cri.v1."))
}

// Pdeathsig fires when the thread that forked the child exits, not when the
// process does, and Go may retire threads. Children that must die with us are
// therefore forked from one goroutine locked to its thread for the life of
// the process.
var spawner struct {
	once sync.Once
	reqs chan spawnRequest
}

type spawnRequest struct {
	cmd  *exec.Cmd
	done chan error
}

// StartOnLockedThread starts cmd from that goroutine, so that its
// Pdeathsig holds for the life of this process (testenv's children use it
// too).
func StartOnLockedThread(cmd *exec.Cmd) error {
	spawner.once.Do(func() {
		spawner.reqs = make(chan spawnRequest)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread lives as long as the process
			for r := range spawner.reqs {
				r.done <- r.cmd.Start()
			}
		}()
	})
	done := make(chan error, 1)
	spawner.reqs <- spawnRequest{cmd: cmd, done: done}
	return <-done
}

// Binaries2 are the programs of a containerd 2.x build.
type Binaries2 struct {
	Dir        string // the directory they are in
	Containerd string
	Shim       string // containerd-shim-runc-v2
	Ctr        string
}

// Cached2 is where scripts/containerd2.sh builds containerd Version2:
// ${NODELET_CACHE:-$HOME/.cache/nodelet}/containerd-<Version2>/. The files
// may not be there (yet): Present tells.
func Cached2() Binaries2 {
	base := os.Getenv("NODELET_CACHE")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil || home == "" {
			home = os.TempDir()
		}
		base = filepath.Join(home, ".cache", "nodelet")
	}
	return binaries2(filepath.Join(base, "containerd-"+Version2))
}

func binaries2(dir string) Binaries2 {
	return Binaries2{
		Dir:        dir,
		Containerd: filepath.Join(dir, "containerd"),
		Shim:       filepath.Join(dir, "containerd-shim-runc-v2"),
		Ctr:        filepath.Join(dir, "ctr"),
	}
}

// Present tells whether every program of b is an executable file.
func (b Binaries2) Present() bool {
	for _, p := range []string{b.Containerd, b.Shim, b.Ctr} {
		if st, err := os.Stat(p); err != nil || !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0 {
			return false
		}
	}
	return true
}
