package composerun

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/cni"
	"github.com/nodelet/nodelet/internal/containerd"
	"github.com/nodelet/nodelet/internal/images"
	"github.com/nodelet/nodelet/internal/testenv"
	"github.com/nodelet/nodelet/internal/testenv/eventually"
)

// node is the test's namespaces: the engine and the node's containerd run
// in a mount and a network namespace held by one process.
type node struct {
	dir       string // <testRoot>/<pid>: this run's scratch tree
	holder    *exec.Cmd
	pid       int
	dataRoot  string
	sock      string // the engine's socket (a host path)
	criSock   string // the node's containerd socket (a host path)
	dockerEnv []string
	procs     []*exec.Cmd
}

// path is where p of the namespace is on the host.
func (n *node) path(p string) string { return filepath.Join(n.dir, "root", p) }

// enter runs name in the namespaces.
func (n *node) enter(name string, args ...string) *exec.Cmd {
	return exec.Command("nsenter", append([]string{"--target", strconv.Itoa(n.pid), "--mount", "--net", "--", name}, args...)...)
}

func startNode(t *testing.T, dataRoot string) *node {
	t.Helper()
	n := &node{dir: filepath.Join(testRoot, strconv.Itoa(os.Getpid())), dataRoot: dataRoot}
	_ = os.RemoveAll(n.dir) // a crashed run of the same pid; its namespace died with it
	for _, p := range hostPaths {
		if err := os.MkdirAll(n.path(p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _ = os.RemoveAll(n.dir) })

	n.holder = exec.Command("unshare", "--mount", "--net", "--propagation", "private", "sleep", "infinity")
	n.holder.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := containerd.StartOnLockedThread(n.holder); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		n.stop(t)
	})
	eventually.True(t, 10*time.Second, "unshare's namespaces", func() bool {
		self, _ := os.Readlink("/proc/self/ns/mnt")
		its, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", n.holder.Process.Pid))
		return err == nil && its != self
	})
	n.pid = n.holder.Process.Pid

	var script strings.Builder
	script.WriteString("set -e\n")
	for _, p := range hostPaths {
		fmt.Fprintf(&script, "mkdir -p %s && mount --bind %s %s\n", p, n.path(p), p)
	}
	// Shared within the namespace: the runtime's container binds
	// /var/lib/nodelet rshared, so that containerd sees its tmpfs mounts.
	script.WriteString("mount --make-rshared /\nip link set lo up\n")
	// The node's own address (node status reports it; a host has one): a
	// veth pair of the namespace's, in TEST-NET-2.
	script.WriteString("ip link add eth0 type veth peer name eth0-peer && ip addr add 198.51.100.10/24 dev eth0 && ip link set eth0-peer up && ip link set eth0 up\n")
	n.mustRun(t, nil, "nsenter", "--target", strconv.Itoa(n.pid), "--mount", "--net", "--", "sh", "-c", script.String())

	n.startContainerd(t)
	n.startDockerd(t)
	return n
}

// startContainerd starts the node's containerd as scripts/setup.sh --containerd=1
// configures it (its paths, the conflist of bridge nodelet0 for
// 10.88.0.0/16, the local images), in the namespaces.
func (n *node) startContainerd(t *testing.T) {
	t.Helper()
	cfg := containerd.Config{ConfigFile: "/etc/nodelet/containerd/config.toml"}.WithDefaults()
	if err := containerd.WriteConfig(cfg, n.path(cfg.ConfigFile)); err != nil {
		t.Fatal(err)
	}
	conf, err := cni.Render(cni.Options{BridgeName: "nodelet0", Subnet: "10.88.0.0/16"})
	if err != nil {
		t.Fatal(err)
	}
	if err := cni.WriteAtomic(n.path(cfg.CNIConfDir), cni.DefaultFileName, conf); err != nil {
		t.Fatal(err)
	}
	n.criSock = n.path(cfg.Socket)
	n.start(t, "containerd", cfg.Binary, "--config", cfg.ConfigFile)
	conn, err := containerd.Dial(n.criSock)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	eventually.Nil(t, 30*time.Second, "the node's containerd ready", func() error {
		return containerd.RuntimeReady(t.Context(), conn)
	})
	tars, err := images.EnsureImages(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	for _, tar := range tars {
		if err := images.Import(t.Context(), n.criSock, "k8s.io", tar.Path); err != nil {
			t.Fatal(err)
		}
	}
}

// startDockerd starts the engine in the namespaces with a config of its
// own: no iptables rules, no bridge (every service uses the host's
// network, here the namespace's), its data in the cache.
func (n *node) startDockerd(t *testing.T) {
	t.Helper()
	n.sock = filepath.Join(n.dir, "docker.sock")
	cfg := map[string]any{
		"iptables":       false,
		"ip6tables":      false,
		"bridge":         "none",
		"data-root":      n.dataRoot,
		"exec-root":      filepath.Join(n.dir, "dx"),
		"pidfile":        filepath.Join(n.dir, "docker.pid"),
		"hosts":          []string{"unix://" + n.sock},
		"log-level":      "warn",
		"storage-driver": "overlay2",
	}
	b, _ := json.Marshal(cfg)
	cfgFile := filepath.Join(n.dir, "daemon.json")
	if err := os.WriteFile(cfgFile, b, 0o600); err != nil {
		t.Fatal(err)
	}
	n.dockerEnv = []string{"DOCKER_HOST=unix://" + n.sock, "DOCKER_CONFIG=" + filepath.Join(n.dir, "docker-config")}
	n.start(t, "dockerd", dockerd, "--config-file", cfgFile)
	eventually.Nil(t, 60*time.Second, "dockerd answering", func() error {
		out, err := n.dockerOut(nil, "version", "-f", "{{.Server.Version}}")
		if err != nil {
			return fmt.Errorf("%w: %s", err, out)
		}
		return nil
	})
	// What a crashed earlier run left in the shared data dir.
	if ids, _ := n.dockerOut(nil, "ps", "-aq"); ids != "" {
		_, _ = n.dockerOut(nil, append([]string{"rm", "-f"}, strings.Fields(ids)...)...)
	}
}

// start runs a daemon in the namespaces, its output in <dir>/<name>.log.
func (n *node) start(t *testing.T, name, bin string, args ...string) {
	t.Helper()
	log, err := os.Create(filepath.Join(n.dir, name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := n.enter(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = append(os.Environ(), "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := containerd.StartOnLockedThread(cmd); err != nil {
		t.Fatal(err)
	}
	n.procs = append(n.procs, cmd)
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(log.Name())
			if len(b) > 4000 {
				b = b[len(b)-4000:]
			}
			t.Logf("%s log (tail):\n%s", name, b)
		}
		log.Close()
	})
}

// stop stops dockerd and containerd (the last started first), kills what
// is left in the namespace (nothing, when the test passed) and the holder.
func (n *node) stop(t *testing.T) {
	for i := len(n.procs) - 1; i >= 0; i-- {
		p := n.procs[i]
		_ = p.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = p.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = p.Process.Kill()
			<-done
		}
	}
	if n.holder == nil || n.holder.Process == nil {
		return
	}
	if n.pid != 0 {
		mine, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", n.pid))
		for _, pid := range pidsInNamespace(mine) {
			if pid != n.pid {
				t.Logf("killing process %d left in the test's namespace", pid)
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	_ = n.holder.Process.Kill()
	_ = n.holder.Wait()
	// Cgroups are not namespaced: the node's cgroup root with its QoS
	// levels (which outlive the agent, as the kubelet's kubepods do) and
	// the engine's /docker parent, both empty now; rmdir leaves any that
	// is not.
	dirs, _ := filepath.Glob("/sys/fs/cgroup/*/" + cgroupRoot + "/*")
	more, _ := filepath.Glob("/sys/fs/cgroup/*/" + cgroupRoot)
	docker, _ := filepath.Glob("/sys/fs/cgroup/*/docker")
	for _, d := range append(append(dirs, more...), docker...) {
		if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			_ = syscall.Rmdir(d)
		}
	}
}

func pidsInNamespace(ns string) []int {
	if ns == "" {
		return nil
	}
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if l, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", pid)); err == nil && l == ns {
			out = append(out, pid)
		}
	}
	return out
}

func (n *node) dockerOut(env []string, args ...string) (string, error) {
	cmd := exec.Command(dockerCLI, args...)
	cmd.Env = append(append(os.Environ(), n.dockerEnv...), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return strings.TrimSpace(out.String()), err
}

func (n *node) docker(t *testing.T, env []string, args ...string) string {
	t.Helper()
	out, err := n.dockerOut(env, args...)
	if err != nil {
		t.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func (n *node) mustRun(t *testing.T, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// forwardPolicy is the host's FORWARD policy line (-P FORWARD ACCEPT).
func forwardPolicy(t *testing.T) string {
	t.Helper()
	for _, l := range strings.Split(run(t, "iptables", "-S", "FORWARD"), "\n") {
		if strings.HasPrefix(l, "-P ") {
			return l
		}
	}
	t.Fatal("iptables -S FORWARD printed no policy")
	return ""
}

// baseImage imports the Debian 12 root the systemd-nspawn tests make with
// debootstrap (cached) as baseImage, once per data dir.
func (n *node) baseImage(t *testing.T) {
	t.Helper()
	if out, err := n.dockerOut(nil, "image", "inspect", "-f", "{{index .Config.Labels \"org.nodelet.base\"}}", baseImage); err == nil &&
		"org.nodelet.base="+out == baseRecipe {
		return
	}
	rootfs, err := testenv.NspawnRoot()
	if err != nil {
		t.Fatalf("no Debian 12 root for the base image (debootstrap, which scripts/setup.sh installs): %v", err)
	}
	tar := exec.Command("tar", "-C", rootfs, "--exclude=./.nodelet-recipe", "-c", ".")
	imp := exec.Command(dockerCLI, "import", "--change", "LABEL "+baseRecipe, "-", baseImage)
	imp.Env = append(os.Environ(), n.dockerEnv...)
	pipe, err := tar.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	imp.Stdin = pipe
	var out bytes.Buffer
	imp.Stdout, imp.Stderr = &out, &out
	if err := tar.Start(); err != nil {
		t.Fatal(err)
	}
	if err := imp.Run(); err != nil {
		t.Fatalf("docker import %s: %v\n%s", rootfs, err, out.String())
	}
	if err := tar.Wait(); err != nil {
		t.Fatalf("tar %s: %v", rootfs, err)
	}
}

func (n *node) cri(t *testing.T) *testenv.CRI {
	t.Helper()
	conn, err := containerd.Dial(n.criSock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &testenv.CRI{
		Runtime: runtimeapi.NewRuntimeServiceClient(conn),
		Image:   runtimeapi.NewImageServiceClient(conn),
		Conn:    conn,
	}
}

// mounts lists the namespace's mounts under the host paths, the engine's
// data and the run's dir (beyond the binds themselves): the containers'
// rootfs, the runtime's tmpfs volumes, the pods' netns and shm, if any.
func (n *node) mounts(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", n.pid))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 5 {
			continue
		}
		mp := f[4]
		if mp == filepath.Join(n.dir, "dx", "netns", "default") {
			// dockerd's handle on its own network namespace, made with the
			// first container of network_mode host, kept while dockerd runs.
			continue
		}
		for _, p := range append(slices.Clone(hostPaths), n.dataRoot, n.dir) {
			if strings.HasPrefix(mp, p+"/") {
				out = append(out, mp)
				break
			}
		}
	}
	slices.Sort(out)
	return out
}

// hostMounts are the host's mounts under the paths the run uses.
func hostMounts(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 5 {
			continue
		}
		for _, p := range append(slices.Clone(hostPaths), testRoot) {
			if f[4] == p || strings.HasPrefix(f[4], p+"/") {
				out = append(out, f[4])
				break
			}
		}
	}
	slices.Sort(out)
	return out
}

// copyRepo copies the files git tracks (as they are in the work tree) to
// dst: what a fresh clone has.
func copyRepo(t *testing.T, root, dst string) {
	t.Helper()
	cmd := exec.Command("git", "-C", root, "ls-files", "-z")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	for _, f := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		if f == "" {
			continue
		}
		if err := copyFile(filepath.Join(root, f), filepath.Join(dst, f)); err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue // deleted in the work tree
			}
			t.Fatal(err)
		}
	}
}

func copyFile(src, dst string) error {
	fi, err := os.Lstat(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	if fi.Mode()&os.ModeSymlink != 0 {
		target, err := os.Readlink(src)
		if err != nil {
			return err
		}
		return os.Symlink(target, dst)
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	o, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, fi.Mode().Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(o, in); err != nil {
		o.Close()
		return err
	}
	return o.Close()
}

func editConfig(t *testing.T, path, old, new string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(old)) {
		t.Fatalf("%s has no %q", path, old)
	}
	if err := os.WriteFile(path, bytes.Replace(b, []byte(old), []byte(new), 1), 0o644); err != nil {
		t.Fatal(err)
	}
}
