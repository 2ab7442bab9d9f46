package machine_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/internal/component"
	"github.com/nodelet/nodelet/internal/e2e"
	"github.com/nodelet/nodelet/internal/testenv"
	"github.com/nodelet/nodelet/internal/testenv/eventually"
	"github.com/nodelet/nodelet/internal/tools/units"
)

// unitState is what systemd says of one unit.
type unitState struct {
	active   string
	mainPID  int
	restarts int
	// started is when its main process started, ready when it said
	// READY=1 (the unit became active); monotonic µs.
	started, ready int64
}

func showUnits(t *testing.T, m *testenv.Machine) map[string]unitState {
	t.Helper()
	out := map[string]unitState{}
	for _, c := range component.StartOrder() {
		text := m.MustRun(t, "systemctl", "show", "-p", "ActiveState,MainPID,NRestarts,ExecMainStartTimestampMonotonic,ActiveEnterTimestampMonotonic", units.UnitName(c))
		var s unitState
		for _, l := range strings.Split(text, "\n") {
			k, v, _ := strings.Cut(strings.TrimSpace(l), "=")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "ActiveState":
				s.active = v
			case "MainPID":
				s.mainPID = int(n)
			case "NRestarts":
				s.restarts = int(n)
			case "ExecMainStartTimestampMonotonic":
				s.started = n
			case "ActiveEnterTimestampMonotonic":
				s.ready = n
			}
		}
		out[c.Name] = s
	}
	return out
}

// capNames are the kernel's capability numbers, as setpriv names them.
var capNames = []string{"chown", "dac_override", "dac_read_search", "fowner", "fsetid", "kill", "setgid",
	"setuid", "setpcap", "linux_immutable", "net_bind_service", "net_broadcast", "net_admin", "net_raw",
	"ipc_lock", "ipc_owner", "sys_module", "sys_rawio", "sys_chroot", "sys_ptrace", "sys_pacct", "sys_admin",
	"sys_boot", "sys_nice", "sys_resource", "sys_time", "sys_tty_config", "mknod", "lease", "audit_write",
	"audit_control", "setfcap", "mac_override", "mac_admin", "syslog", "wake_alarm", "block_suspend",
	"audit_read", "perfmon", "bpf", "checkpoint_restore"}

// identity is a process's credentials as /proc/<pid>/status shows them.
type identity struct {
	uid, gid string
	groups   []string
	caps     []string // effective
}

func procIdentity(t *testing.T, m *testenv.Machine, pid int) identity {
	t.Helper()
	var id identity
	for _, l := range strings.Split(m.MustRun(t, "cat", fmt.Sprintf("/proc/%d/status", pid)), "\n") {
		k, v, _ := strings.Cut(l, ":")
		f := strings.Fields(v)
		switch k {
		case "Uid":
			id.uid = f[1] // effective
		case "Gid":
			id.gid = f[1]
		case "Groups":
			id.groups = f
		case "CapEff":
			bits, err := strconv.ParseUint(f[0], 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			for i, name := range capNames {
				if bits&(1<<i) != 0 {
					id.caps = append(id.caps, name)
				}
			}
		}
	}
	return id
}

// canRead tries to read path as the process pid: in its mount namespace,
// with its user, groups and effective capabilities.
func canRead(t *testing.T, m *testenv.Machine, pid int, id identity, path string) bool {
	t.Helper()
	caps := "-all"
	for _, c := range id.caps {
		caps += ",+" + c
	}
	args := []string{"nsenter", "-t", strconv.Itoa(pid), "-m", "--", "setpriv", "--reuid", id.uid, "--regid", id.gid}
	if len(id.groups) > 0 {
		args = append(args, "--groups", strings.Join(id.groups, ","))
	} else {
		args = append(args, "--clear-groups")
	}
	args = append(args, "--bounding-set", caps, "--inh-caps", caps)
	if id.uid != "0" {
		args = append(args, "--ambient-caps", caps)
	}
	out, err := m.Run(append(args, "--", "head", "-c", "2", path)...)
	if err == nil && strings.HasPrefix(out, "SU") {
		return true
	}
	if err != nil && !strings.Contains(out, "Permission denied") && !strings.Contains(out, "No such file") {
		t.Fatalf("reading %s as pid %d: %v: %s", path, pid, err, out)
	}
	return false
}

// TestUnitsUnderSystemd boots Debian 12 with its own systemd as PID 1
// (systemd-nspawn), installs the generated users and units, and starts
// nodelet.target against the test containerd on the host (its socket and
// the node's state and log dirs are bound in at the same paths, so the
// paths the runtime gives containerd mean the same on both sides). Then:
// the units started in the declaration's order, each once what it requires was
// ready; a static pod and a pod from kube-apiserver run (sources, of its
// own user, reads the node's root-only kubeconfig); each daemon runs as
// its own user (bus, sources, admission) or as root as its unit says, and
// can read its own seed and no other; SIGKILL
// of the prober restarts the prober alone; a restart of the bus restarts
// no other unit, every daemon comes back on the bus; no container
// restarts.
func TestUnitsUnderSystemd(t *testing.T) {
	root := testenv.RequiresNspawn(t)
	_, stateDir, logsDir := nodeDirs(t, "nspawn")
	// The machine's non-root daemons reach the config through its bind
	// mount, which keeps the host dir's mode.
	etc := t.TempDir()
	if err := os.MkdirAll(filepath.Join(etc, "manifests"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(etc, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e2e.RemovePodSandboxes(t, ctrd) })
	busListen := fmt.Sprintf("127.0.0.1:%d", e2e.FreePort(t))
	serverPort := e2e.FreePort(t)
	cfg := fmt.Sprintf(`node:
  name: %s
  kubeconfig: %s
  stateDir: %s
  podLogsDir: %s
  podCIDR: %s
bus:
  listen: %s
  heartbeatInterval: 1s
runtime:
  endpoint: %s
  cniConfDir: %s
  cgroupRoot: /nodelet-e2e
  cniBridgeName: %s
  cniNetworkName: %s
  manageCNIConfig: false
sources:
  staticPodPath: /etc/nodelet/manifests
  fileCheckFrequency: 5s
status:
  readOnlyAddress: 127.0.0.1:%d
server:
  address: 127.0.0.1
  port: %d
`, nodeName, "/etc/nodelet/identity/node.kubeconfig", stateDir, logsDir, ctrd.Subnet, busListen, ctrd.Endpoint, ctrd.CNIConfDir, ctrd.BridgeName, ctrd.NetworkName,
		e2e.FreePort(t), serverPort)
	// The node's kubeconfig, root's and 0600 in a 0700 directory, as
	// kubeadm writes kubelet.conf: sources, of its own user, reads it with
	// CAP_DAC_READ_SEARCH.
	kc, err := os.ReadFile(cp.NodeKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(etc, "identity"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(etc, "identity", "node.kubeconfig"), kc, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(etc, "nodelet.yaml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(etc, "manifests", "sleeper.yaml"), []byte(e2e.SleeperManifest("sleeper")), 0o644); err != nil {
		t.Fatal(err)
	}

	binds := []string{stateDir, logsDir, ctrd.Dir}
	bindRO := []string{binDir + ":/usr/local/bin", etc + ":/etc/nodelet"}
	if _, err := os.Stat(ctrd.CNIBinDir); err == nil {
		bindRO = append(bindRO, ctrd.CNIBinDir)
	}
	began := time.Now()
	m := testenv.BootMachine(t, root, binds, bindRO)
	t.Logf("machine booted in %s", time.Since(began).Round(time.Millisecond))
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := m.Run("journalctl", "--no-pager", "-n", "150", "-u", "nodelet-*")
			t.Logf("journal:\n%s", out)
		}
	})

	o := units.Defaults()
	o.StateDir, o.PodLogsDir, o.CgroupRoot = stateDir, logsDir, "/nodelet-e2e"
	criGID := installUnits(t, m, o)
	shareSocket(t, ctrd.Address, criGID)
	// The machine stands for a host, whose cgroup controllers the runtime
	// writes (pod cgroups, node allocatable); nspawn mounts them read-only.
	t.Cleanup(func() { e2e.RemoveCgroupDirs("/nodelet-e2e") })
	m.MustRun(t, "sh", "-c", `for d in /sys/fs/cgroup/*; do
		case $d in */systemd|*/unified) continue;; esac
		[ -L "$d" ] || mount -o remount,bind,rw "$d" || exit 1
	done`)
	m.MustRun(t, "systemctl", "daemon-reload")
	began = time.Now()
	m.MustRun(t, "systemctl", "start", "nodelet.target")
	t.Logf("nodelet.target started in %s", time.Since(began).Round(time.Millisecond))

	// In order: each unit's process started only once everything it
	// requires had said READY=1.
	st := showUnits(t, m)
	for _, c := range component.StartOrder() {
		s := st[c.Name]
		if s.active != "active" || s.mainPID == 0 {
			t.Fatalf("%s: %+v", units.UnitName(c), s)
		}
		for _, r := range c.Requires {
			if s.started < st[r].ready {
				t.Errorf("%s started at %d µs, before %s was ready at %d µs", c.Name, s.started, r, st[r].ready)
			}
		}
	}

	// A static pod, and a pod from kube-apiserver: sources, of its own
	// user, read the node's kubeconfig.
	ns := cp.Namespace(t)
	admin := cp.AdminClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	created, err := admin.CoreV1().Pods(ns).Create(ctx, e2e.APIPod(nodeName, ns, "api-sleeper", ""), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// The static pod's mirror, which status made.
		_ = admin.CoreV1().Pods(metav1.NamespaceDefault).Delete(context.Background(), "sleeper-"+nodeName,
			metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	})
	// Only this test's two pods count: API pods other tests of the package
	// left on the node's name (in namespaces kube-apiserver cannot finish
	// deleting without kube-controller-manager) run here too.
	var pods map[string]*e2e.CRIPod
	eventually.True(t, 90*time.Second, "the static and the API pod's containers running", func() bool {
		pods = map[string]*e2e.CRIPod{}
		all := e2e.CRIView(t, ctrd)
		for _, uid := range []string{string(created.UID), staticPodUID(t, "sleeper-"+nodeName)} {
			if p := all[uid]; p != nil && uid != "" {
				pods[uid] = p
			}
		}
		running := 0
		for _, p := range pods {
			if p.Running == 1 {
				running++
			}
		}
		return running == 2
	})

	// status, of its own user, reports the API pod running and ready (CRI
	// through group nodelet-cri, the API with the root-only kubeconfig).
	eventually.True(t, 60*time.Second, "status reporting the API pod running and ready", func() bool {
		p, err := admin.CoreV1().Pods(ns).Get(ctx, created.Name, metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning && e2e.PodReady(p)
	})
	// The server, of its own user, serves the kubelet API with the
	// certificate it made in the shared pki: setgid, root's, group
	// nodelet-api, 2770; the certificate its own and that group's.
	apiGID := strings.Split(m.MustRun(t, "getent", "group", component.APIGroup), ":")[2]
	serverUID := strings.TrimSpace(m.MustRun(t, "id", "-u", "nodelet-server"))
	if got := strings.TrimSpace(m.MustRun(t, "stat", "-c", "%a %u %g", filepath.Join(stateDir, component.SharedDir))); got != "2770 0 "+apiGID {
		t.Errorf("%s: mode, owner, group %q, want 2770 0 %s", component.SharedDir, got, apiGID)
	}
	eventually.True(t, 30*time.Second, "the server's TLS handshake on its port", func() bool {
		c, err := tls.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", serverPort), &tls.Config{InsecureSkipVerify: true})
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	var owned bool
	pki, err := os.ReadDir(filepath.Join(stateDir, component.SharedDir))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range pki {
		fi, err := e.Info()
		if err != nil || e.Type()&os.ModeSymlink != 0 {
			continue
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && strconv.Itoa(int(st.Uid)) == serverUID && strconv.Itoa(int(st.Gid)) == apiGID {
			owned = true
		}
	}
	if !owned {
		t.Errorf("no file in %s is nodelet-server's (uid %s) and group nodelet-api's (gid %s): %v", component.SharedDir, serverUID, apiGID, pki)
	}

	// Each its own user, each its own seed.
	// The seeds on disk: one per client, none for the bus's own admin
	// key, which lives in its memory only.
	credDir := filepath.Join(stateDir, "credentials")
	ents, err := os.ReadDir(credDir)
	if err != nil {
		t.Fatal(err)
	}
	var seeds, onDisk, wantOnDisk []string
	for _, e := range ents {
		onDisk = append(onDisk, e.Name())
		seeds = append(seeds, filepath.Join(credDir, e.Name()))
	}
	for _, c := range component.StartOrder() {
		if c.Name != bus.BusAdmin {
			wantOnDisk = append(wantOnDisk, c.Name+".nk")
			seeds = append(seeds, "/run/credentials/"+units.UnitName(c)+"/bus-seed")
		}
	}
	wantOnDisk = append(wantOnDisk, bus.Supervisor+".nk", bus.Tap+".nk")
	slices.Sort(wantOnDisk)
	if !slices.Equal(onDisk, wantOnDisk) {
		t.Errorf("%s holds %v, want exactly %v (no key of the bus's own)", credDir, onDisk, wantOnDisk)
	}
	uids := map[string]string{}
	hostNS := strings.TrimSpace(m.MustRun(t, "readlink", "/proc/1/ns/mnt"))
	for _, c := range component.StartOrder() {
		pid := st[c.Name].mainPID
		id := procIdentity(t, m, pid)
		if c.User() == "" {
			// Root, as its unit says why, without the capabilities that
			// pass file modes.
			if id.uid != "0" {
				t.Errorf("%s runs as uid %s, want root", c.Name, id.uid)
			}
			for _, cp := range []string{"dac_override", "dac_read_search"} {
				if slices.Contains(id.caps, cp) {
					t.Errorf("%s (root) holds cap_%s", c.Name, cp)
				}
			}
		} else {
			want := strings.TrimSpace(m.MustRun(t, "id", "-u", c.User()))
			if id.uid != want || id.uid == "0" {
				t.Errorf("%s runs as uid %s, want %s (%s)", c.Name, id.uid, want, c.User())
			}
			if other, ok := uids[id.uid]; ok {
				t.Errorf("%s and %s share uid %s", c.Name, other, id.uid)
			}
			uids[id.uid] = c.Name
		}
		t.Logf("%s: uid %s, groups %v, caps %v", c.Name, id.uid, id.groups, id.caps)
		if c.Systemd.HostMounts {
			// The runtime's tmpfs volumes must reach containerd.
			if ns := strings.TrimSpace(m.MustRun(t, "readlink", fmt.Sprintf("/proc/%d/ns/mnt", pid))); ns != hostNS {
				t.Errorf("%s is in mount namespace %s, not the host's %s", c.Name, ns, hostNS)
			}
		}
		var readable []string
		for _, p := range seeds {
			if canRead(t, m, pid, id, p) {
				readable = append(readable, p)
			}
		}
		var want []string
		if c.Name == bus.BusAdmin {
			// The bus makes every seed: it reads them all, and no other
			// unit's credentials.
			for _, p := range seeds {
				if strings.HasPrefix(p, credDir) {
					want = append(want, p)
				}
			}
		} else {
			want = []string{"/run/credentials/" + units.UnitName(c) + "/bus-seed"}
		}
		if !slices.Equal(readable, want) {
			t.Errorf("%s (uid %s, caps %v) can read %v, want %v", c.Name, id.uid, id.caps, readable, want)
		}
	}

	// SIGKILL of the prober restarts the prober alone.
	before := showUnits(t, m)
	m.MustRun(t, "systemctl", "kill", "-s", "KILL", "nodelet-prober")
	var after map[string]unitState
	eventually.True(t, 60*time.Second, "the prober restarted and ready", func() bool {
		after = showUnits(t, m)
		p := after[bus.Prober]
		return p.active == "active" && p.mainPID != 0 && p.mainPID != before[bus.Prober].mainPID
	})
	if got := after[bus.Prober].restarts; got != before[bus.Prober].restarts+1 {
		t.Errorf("prober NRestarts %d → %d", before[bus.Prober].restarts, got)
	}
	sameExcept(t, before, after, bus.Prober)

	// A restart of the bus restarts no other unit: every daemon comes back
	// on the new bus by itself (its heartbeat, seen through tap's
	// credential), with the same process.
	before = after
	m.MustRun(t, "systemctl", "restart", "nodelet-bus")
	beats := map[string]bool{}
	conn, err := bus.Connect(bus.ConnectOptions{URL: bus.URLFor(busListen), Component: bus.Tap, StateDir: stateDir})
	if err != nil {
		t.Fatalf("tap on the restarted bus: %v", err)
	}
	defer conn.Close()
	seen := make(chan string, 64)
	sub, err := conn.NC.Subscribe(bus.SubjectHealthAll, func(msg *nats.Msg) {
		seen <- strings.TrimPrefix(msg.Subject, strings.TrimSuffix(bus.SubjectHealthAll, ">"))
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	deadline := time.After(60 * time.Second)
	for len(beats) < len(component.Declared.Processes())-1 {
		select {
		case c := <-seen:
			beats[c] = true
		case <-deadline:
			t.Fatalf("after the bus restart, heartbeats only from %v", beats)
		}
	}
	after = showUnits(t, m)
	if after[bus.BusAdmin].mainPID == before[bus.BusAdmin].mainPID {
		t.Errorf("the bus kept pid %d through its restart", after[bus.BusAdmin].mainPID)
	}
	sameExcept(t, before, after, bus.BusAdmin)

	// No container restarted through any of it.
	now := e2e.CRIView(t, ctrd)
	for uid, p := range pods {
		if n := now[uid]; n == nil || n.Running != 1 || n.ContainerID != p.ContainerID || n.RestartCount != 0 || n.Sandboxes != 1 {
			t.Errorf("pod %s changed: before %+v, now %+v", uid, p, n)
		}
	}
}

// installUnits writes the generated users and units for o into the
// machine, makes the users (systemd-sysusers) and returns the gid of
// group nodelet-cri, the CRI socket's group (shareSocket).
func installUnits(t *testing.T, m *testenv.Machine, o units.Options) int {
	t.Helper()
	files, err := units.SystemdUnits(component.Declared, o)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		switch {
		case f.Name == units.SysusersFile:
			m.WriteFile(t, "/etc/sysusers.d/nodelet.conf", f.Data, 0o644)
		case strings.HasSuffix(f.Name, ".service") || strings.HasSuffix(f.Name, ".target"):
			m.WriteFile(t, "/etc/systemd/system/"+f.Name, f.Data, 0o644)
		}
	}
	m.MustRun(t, "systemd-sysusers")
	// The CRI socket as containerd's [grpc] gid leaves it (the managed
	// containerd and scripts/setup.sh's config set it to nodelet-cri's gid):
	// 0660, that group's, in directories others may pass through.
	criGID, err := strconv.Atoi(strings.Split(m.MustRun(t, "getent", "group", component.CRIGroup), ":")[2])
	if err != nil {
		t.Fatal(err)
	}
	return criGID
}

// shareSocket gives the CRI socket at path to group gid, 0660, as
// containerd does with [grpc] gid, and lets others pass through the
// directories above it (the test containerd's slot dir is 0700 or 0755).
func shareSocket(t *testing.T, path string, gid int) {
	t.Helper()
	if err := os.Chown(path, -1, gid); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o660); err != nil {
		t.Fatal(err)
	}
	for d := filepath.Dir(path); d != "/"; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm()&0o001 == 0 {
			if err := os.Chmod(d, st.Mode().Perm()|0o001); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// nodeDirs prepares the host side of a machine's node: nodelet's binaries
// readable by the machine's non-root daemons (bound in, they keep the
// host dir's modes), the dirs of earlier runs whose test binary died swept,
// and the node's state (or root) and pod log dirs,
// /var/lib/nodelet-<kind>-<pid> and /var/log/nodelet-<kind>-<pid>-pods,
// bound into the machine at the same paths and removed after the test (a
// cleanup registered here, so it runs after the test's own).
func nodeDirs(t *testing.T, kind string) (tag, stateDir, logsDir string) {
	t.Helper()
	if err := os.Chmod(binDir, 0o755); err != nil {
		t.Fatal(err)
	}
	sweepNspawnDirs()
	tag = strconv.Itoa(os.Getpid())
	stateDir = "/var/lib/nodelet-" + kind + "-" + tag
	logsDir = "/var/log/nodelet-" + kind + "-" + tag + "-pods"
	for _, d := range []string{stateDir, logsDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		_ = os.RemoveAll(stateDir)
		_ = os.RemoveAll(logsDir)
	})
	return tag, stateDir, logsDir
}

// sweepNspawnDirs removes the state and log dirs of earlier runs of this
// package's tests whose test binary died before its cleanup (the pid in
// the name is gone).
func sweepNspawnDirs() {
	for _, kind := range []string{"nspawn", "kubeadm"} {
		for _, pat := range []string{"/var/lib/nodelet-" + kind + "-*", "/var/log/nodelet-" + kind + "-*-pods"} {
			dirs, _ := filepath.Glob(pat)
			for _, d := range dirs {
				base := strings.TrimPrefix(filepath.Base(d), "nodelet-"+kind+"-")
				pid, err := strconv.Atoi(strings.TrimSuffix(base, "-pods"))
				if err != nil || pid == os.Getpid() {
					continue
				}
				if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err != nil {
					_ = os.RemoveAll(d)
				}
			}
		}
	}
}

// sameExcept: every unit but one kept its process and restart count.
func sameExcept(t *testing.T, before, after map[string]unitState, except string) {
	t.Helper()
	for name, b := range before {
		if name == except {
			continue
		}
		a := after[name]
		if a.mainPID != b.mainPID || a.restarts != b.restarts || a.active != "active" {
			t.Errorf("%s changed while only %s should have restarted: %+v → %+v", name, except, b, a)
		}
	}
}

// staticPodUID is the UID CRI's sandboxes give the static pod name (in
// the default namespace), "" while it has none.
func staticPodUID(t *testing.T, name string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sbs, err := ctrd.RuntimeClient(t).Runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, sb := range sbs.Items {
		if sb.Labels["io.kubernetes.pod.name"] == name && sb.Labels["io.kubernetes.pod.namespace"] == metav1.NamespaceDefault {
			return sb.Labels["io.kubernetes.pod.uid"]
		}
	}
	return ""
}
