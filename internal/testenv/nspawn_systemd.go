package testenv

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nodelet/nodelet/internal/containerd/scratch"
	"github.com/nodelet/nodelet/internal/images"
)

// A machine for the systemd cgroup driver: systemd as PID 1 that realizes
// slices in the cgroup controllers, and the host's containerd, runc and
// what CNI runs, so that a containerd with SystemdCgroup = true runs there
// (runc asking that systemd for cri-containerd-<id>.scope units) and the
// pod slices are made through its D-Bus API.

// BootSystemdDriverMachine boots root as BootMachine does, with what a
// containerd of the machine's own needs bound in (the host's containerd,
// runc, ip, iptables and their libraries the minimal root lacks, the CNI
// plugins, the test containerds' slot and root dirs and the image cache)
// and the machine's systemd made to use the cgroup v1 controllers.
//
// The host boots cgroup v1, where systemd-nspawn (252) mounts every
// controller hierarchy read-only in the container (only name=systemd is
// writable; SYSTEMD_NSPAWN_API_VFS_WRITABLE=1 leaves them read-only,
// SYSTEMD_NSPAWN_UNIFIED_HIERARCHY=1 gives a cgroup2 without a single
// controller, all of them being bound to v1 on the host, and
// --property=Delegate=yes needs a systemd on the host to register the
// machine with). The machine's root remounts them read-write, and its
// systemd, which found them unusable at boot, re-examines them on
// daemon-reexec: from then on it realizes slices in the cpu, memory and
// pids hierarchies. A probe slice with a memory limit proves it, or the
// test fails.
//
// It holds LockSystemdDriver until the test ends.
func BootSystemdDriverMachine(t testing.TB, root string, bind, bindRO []string) *Machine {
	t.Helper()
	if _, err := os.Stat("/sys/fs/cgroup/memory"); err != nil {
		t.Skip("the systemd driver machine remounts cgroup v1 hierarchies; this host runs cgroup v2")
	}
	LockSystemdDriver(t)
	cache := images.DefaultCacheDir()
	// Shared with the host's test containerds: slots (bridges, subnets)
	// are taken under the same locks, roots sit on a real file system
	// (not the machine's overlay, which overlayfs snapshots cannot stack on).
	for _, d := range []string{DefaultSlotDir, DefaultRootDir, cache} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The whole cache: the images and, unless NODELET_TEST_CONTAINERD=1, the
	// containerd 2.x build.
	bind = append([]string{DefaultSlotDir, DefaultRootDir, filepath.Dir(cache)}, bind...)
	bindRO = append([]string{"/usr/lib/cni"}, bindRO...)
	// The host's containerd, runc, and what the CNI bridge plugin and the
	// test containerd's cleanup run (iptables-nft, ip), which the
	// machine's minimal root lacks, with their libraries it lacks too.
	libs := map[string]bool{}
	for _, b := range []struct{ host, in string }{
		{"/usr/bin/containerd", ""}, {"/usr/bin/containerd-shim-runc-v2", ""}, {"/usr/bin/ctr", ""}, {"/usr/sbin/runc", ""},
		{"/usr/sbin/ip", ""},
		{"/usr/sbin/iptables", ""}, {"/usr/sbin/iptables", "/usr/sbin/iptables-save"}, {"/usr/sbin/iptables", "/usr/sbin/iptables-restore"},
		{"/usr/sbin/iptables", "/usr/sbin/ip6tables"}, {"/usr/sbin/iptables", "/usr/sbin/ip6tables-save"}, {"/usr/sbin/iptables", "/usr/sbin/ip6tables-restore"},
	} {
		real, err := filepath.EvalSymlinks(b.host)
		if err != nil {
			t.Fatalf("%s (needed in the machine): %v", b.host, err)
		}
		in := b.in
		if in == "" {
			in = b.host
		}
		bindRO = append(bindRO, real+":"+in)
		out, err := exec.Command("ldd", real).Output()
		if err != nil {
			continue // static
		}
		for _, m := range regexp.MustCompile(`=> (/\S+)`).FindAllStringSubmatch(string(out), -1) {
			dst := filepath.Join("/usr/lib/x86_64-linux-gnu", filepath.Base(m[1]))
			if _, err := os.Stat(filepath.Join(root, dst)); err == nil || libs[dst] {
				continue
			}
			lib, err := filepath.EvalSymlinks(m[1])
			if err != nil {
				t.Fatal(err)
			}
			libs[dst] = true
			bindRO = append(bindRO, lib+":"+dst)
		}
	}
	if _, err := os.Stat("/usr/lib/x86_64-linux-gnu/xtables"); err == nil {
		bindRO = append(bindRO, "/usr/lib/x86_64-linux-gnu/xtables")
	}

	began := time.Now()
	// containerd there makes network namespaces, the pods' bridge and
	// iptables rules: CAP_NET_ADMIN, which nspawn drops by default (the
	// machine shares the host's network, as a node's containerd); runc
	// gives each container a session keyring (keyctl), which nspawn's
	// system call filter refuses unless @keyring is allowed.
	m := BootMachineArgs(t, root, bind, bindRO, "--capability=CAP_NET_ADMIN", "--system-call-filter=@keyring")
	t.Logf("machine booted in %s", time.Since(began).Round(time.Millisecond))
	// debootstrap's minbase has no /etc/hosts; containerd copies it into
	// every sandbox.
	m.WriteFile(t, "/etc/hosts", []byte("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"), 0o644)
	m.MustRun(t, "sh", "-c", `for d in /sys/fs/cgroup/*; do
		case $d in */systemd|*/unified) continue;; esac
		[ -L "$d" ] || mount -o remount,bind,rw "$d" || exit 1
	done`)
	m.MustRun(t, "systemctl", "daemon-reexec")
	// The machine's systemd now puts a slice's limits in the v1 files.
	m.MustRun(t, "systemd-run", "--unit=nodelet-probe", "--slice=probe.slice", "-p", "MemoryLimit=64M", "sleep", "60")
	if b, err := os.ReadFile(filepath.Join(m.RootPath(), "/sys/fs/cgroup/memory/probe.slice/nodelet-probe.service/memory.limit_in_bytes")); err != nil || strings.TrimSpace(string(b)) != fmt.Sprint(64<<20) {
		t.Fatalf("the machine's systemd does not use the memory controller: %q %v", b, err)
	}
	m.MustRun(t, "systemctl", "stop", "nodelet-probe.service", "probe.slice")
	return m
}

var systemdDriverLocks struct {
	sync.Mutex
	held map[testing.TB]bool
}

// LockSystemdDriver makes the test the host's only user of the systemd
// driver's names until it ends (a flock on <DefaultSlotDir>/systemd-driver.lock,
// waited for): the machines' cgroup hierarchies are the host's (cpu, pids
// and the rest; memory below the test's own cgroup), so two machines would
// share kubepods.slice, and one's runtime would take the other's pod
// slices for orphans and kill what runs in them. A test that checks the
// host after its machine is gone calls it first, so that the check runs
// under the lock too; a second call in the same test does nothing.
func LockSystemdDriver(t testing.TB) {
	t.Helper()
	systemdDriverLocks.Lock()
	defer systemdDriverLocks.Unlock()
	if systemdDriverLocks.held[t] {
		return
	}
	if err := os.MkdirAll(DefaultSlotDir, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(DefaultSlotDir, "systemd-driver.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		t.Fatal(err)
	}
	if d := time.Since(began); d > time.Second {
		t.Logf("waited %s for another systemd driver test", d.Round(time.Second))
	}
	if systemdDriverLocks.held == nil {
		systemdDriverLocks.held = map[testing.TB]bool{}
	}
	systemdDriverLocks.held[t] = true
	t.Cleanup(func() {
		systemdDriverLocks.Lock()
		delete(systemdDriverLocks.held, t)
		systemdDriverLocks.Unlock()
		f.Close()
	})
}

// RootPath is the machine's root seen from the host (/proc/<leader>/root).
func (m *Machine) RootPath() string { return fmt.Sprintf("/proc/%d/root", m.Leader) }

// machineContainerdEnv carries, to a test binary started by
// StartMachineContainerd, the options of the containerd it is to run.
const machineContainerdEnv = "NODELET_TESTENV_MACHINE_CONTAINERD"

// machineContainerd is what StartMachineContainerd hands the binary.
type machineContainerd struct {
	Opts ContainerdOptions
	// Info is where the binary writes the started instance (JSON of
	// scratch.Containerd), in the machine.
	Info string
}

// MainIfMachineContainerd runs a test containerd and exits when this test
// binary was started by StartMachineContainerd (inside a machine); it
// returns at once otherwise. Call it first in TestMain. The containerd
// runs until SIGTERM, then removes its pods and everything it made
// (scratch.Containerd.Stop).
func MainIfMachineContainerd() {
	spec := os.Getenv(machineContainerdEnv)
	if spec == "" {
		return
	}
	var h machineContainerd
	if err := json.Unmarshal([]byte(spec), &h); err != nil {
		fmt.Fprintln(os.Stderr, machineContainerdEnv+":", err)
		os.Exit(2)
	}
	// The signal handler first: a stop while containerd starts still
	// cleans up.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	c, err := StartContainerd(h.Opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "containerd:", err)
		os.Exit(1)
	}
	b, err := json.Marshal(c.Containerd)
	if err == nil {
		if err = os.WriteFile(h.Info+".tmp", b, 0o644); err == nil {
			err = os.Rename(h.Info+".tmp", h.Info)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "containerd:", err)
		c.Stop()
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "containerd %s started in %s\n", c.Endpoint, c.StartTime.Round(time.Millisecond))
	<-sig
	c.Stop()
	os.Exit(0)
}

// MachineContainerdUnit is the unit StartMachineContainerd runs
// containerd as: the name the generated nodelet units order themselves
// after (Wants=, After=containerd.service).
const MachineContainerdUnit = "containerd.service"

// StartMachineContainerd starts a test containerd (StartContainerd with
// opts) inside m, as the machine's systemd unit containerd.service, by
// running this test binary (self, bound into the machine at the same
// path; its TestMain calls MainIfMachineContainerd first) there. Its
// sockets and dirs are under the slot and root dirs the machine shares
// with the host (BootSystemdDriverMachine), so the test reaches its CRI
// from the host. Stopping the unit at cleanup removes its pods and what it
// made; its shims are left to that (KillMode=process, as Debian's
// containerd.service: stopping containerd never kills the pods).
func StartMachineContainerd(t testing.TB, m *Machine, self string, opts ContainerdOptions) *Containerd {
	t.Helper()
	if opts.Major == 0 {
		major, err := ContainerdMajor()
		if err != nil {
			t.Fatal(err)
		}
		opts.Major = major
	}
	h := machineContainerd{Opts: opts, Info: "/run/nodelet-test-containerd.json"}
	spec, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	m.MustRun(t, "systemd-run", "--unit="+MachineContainerdUnit, "--collect",
		"-p", "KillMode=process", "-p", "Delegate=yes", "-p", "TimeoutStopSec=60",
		"-E", machineContainerdEnv+"="+string(spec),
		"-E", "NODELET_CACHE="+filepath.Dir(images.DefaultCacheDir()),
		"-E", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		self)
	t.Cleanup(func() {
		if out, err := m.RunFor(90*time.Second, "systemctl", "stop", MachineContainerdUnit); err != nil {
			t.Errorf("stopping the machine's containerd: %v\n%s", err, out)
		}
	})
	info := filepath.Join(m.RootPath(), h.Info)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		b, err := os.ReadFile(info)
		if err == nil {
			var c scratch.Containerd
			if err := json.Unmarshal(b, &c); err != nil {
				t.Fatal(err)
			}
			t.Logf("the machine's containerd (%d.x, SystemdCgroup %v) answered in %s", opts.Major, opts.SystemdCgroup, time.Since(began).Round(time.Millisecond))
			return &Containerd{&c}
		}
		state, _ := m.Run("systemctl", "is-active", MachineContainerdUnit)
		if s := strings.TrimSpace(state); (s != "active" && s != "activating") || time.Now().After(deadline) {
			out, _ := m.Run("journalctl", "--no-pager", "-n", "60", "-u", MachineContainerdUnit)
			t.Fatalf("the machine's containerd did not start (%s):\n%s", s, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
