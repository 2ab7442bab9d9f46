package runtime

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nodelet/nodelet/internal/cgroups"
	"github.com/nodelet/nodelet/internal/images"
	"github.com/nodelet/nodelet/internal/testenv"
)

// cgroupTests are the package's tests of pod cgroups (QoS and pod
// cgroups with their limits, removal, the driver check, in-place resize,
// node allocatable enforcement, pod-level resources) that
// TestCgroupsUnderSystemdDriver runs again under the systemd driver.
var cgroupTests = []string{
	"TestPodCgroupsLimitsAndRemoval",
	"TestCgroupDriverMismatchRefused",
	"TestInPlaceResize",
	"TestNodeAllocatableEnforced",
	"TestInPlaceResizeAddsAndRemovesRequests",
	"TestInPlaceResizeVariousOperations",
	"TestResizeRestartContainerOnContainerd",
	"TestPodLevelResourcesOnContainerd",
}

// TestCgroupsUnderSystemdDriver runs the cgroup tests of this package
// (cgroupTests) under the systemd cgroup driver: this test binary again,
// inside a Debian 12 machine with its own systemd as PID 1
// (systemd-nspawn --boot), as a service of that systemd, with a
// containerd of its own there (SystemdCgroup = true, runc asking systemd
// for cri-containerd-<id>.scope units) and runtime.cgroupDriver systemd
// under the kubelet's cgroup root kubepods: the QoS and pod cgroups are
// the slices kubepods.slice, kubepods-burstable.slice,
// kubepods-besteffort.slice and kubepods[-<qos>]-pod<uid>.slice, made
// through systemd's D-Bus API by libcontainer's systemd manager (as the
// kubelet's), and the tests read their limits from the cgroup files.
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
// pids hierarchies.
func TestCgroupsUnderSystemdDriver(t *testing.T) {
	if testCgroupDriver == cgroups.DriverSystemd {
		t.Skip("already under the systemd driver (the inner run)")
	}
	requiresCgroupV1(t)
	root := testenv.RequiresNspawn(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	cache := images.DefaultCacheDir()
	// Shared with the host's test containerds: slots (bridges, subnets)
	// are taken under the same locks, roots sit on a real file system
	// (not the machine's overlay, which overlayfs snapshots cannot stack on).
	for _, d := range []string{testenv.DefaultSlotDir, testenv.DefaultRootDir, cache} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The inner run's output, in a file it is kept in should it hang.
	outDir := t.TempDir()
	outFile := filepath.Join(outDir, "inner.log")
	// The whole cache: the images and, for NODELET_TEST_CONTAINERD=2, the
	// containerd 2.x build.
	binds := []string{testenv.DefaultSlotDir, testenv.DefaultRootDir, filepath.Dir(cache), outDir}
	bindRO := []string{filepath.Dir(self), wd, "/usr/lib/cni"}
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
	m := testenv.BootMachineArgs(t, root, binds, bindRO, "--capability=CAP_NET_ADMIN", "--system-call-filter=@keyring")
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
	if b, err := os.ReadFile(filepath.Join(fmt.Sprintf("/proc/%d/root", m.Leader), "/sys/fs/cgroup/memory/probe.slice/nodelet-probe.service/memory.limit_in_bytes")); err != nil || strings.TrimSpace(string(b)) != fmt.Sprint(64<<20) {
		t.Fatalf("the machine's systemd does not use the memory controller: %q %v", b, err)
	}
	m.MustRun(t, "systemctl", "stop", "nodelet-probe.service", "probe.slice")

	args := []string{"systemd-run", "--unit=nodelet-cgroup-tests", "--wait", "--collect", "--quiet",
		"-p", "WorkingDirectory=" + wd, "-p", "StandardOutput=file:" + outFile, "-p", "StandardError=inherit",
		"-E", "NODELET_TEST_CGROUP_DRIVER=systemd",
		"-E", "NODELET_CACHE=" + filepath.Dir(cache),
		"-E", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	if v := os.Getenv("NODELET_TEST_CONTAINERD"); v != "" {
		args = append(args, "-E", "NODELET_TEST_CONTAINERD="+v)
	}
	args = append(args, self, "-test.run", "^("+strings.Join(cgroupTests, "|")+")$", "-test.v", "-test.count=1", "-test.timeout=12m")
	began = time.Now()
	res, err := m.RunFor(15*time.Minute, args...)
	b, _ := os.ReadFile(outFile)
	out2 := string(b)
	t.Logf("under the systemd driver (%s):\n%s%s", time.Since(began).Round(time.Second), out2, res)
	if err != nil {
		t.Fatalf("the cgroup tests under the systemd driver failed: %v", err)
	}
	for _, name := range cgroupTests {
		if !strings.Contains(out2, "--- PASS: "+name+" ") {
			t.Errorf("%s did not pass under the systemd driver", name)
		}
	}
	if strings.Contains(out2, "--- SKIP") {
		t.Errorf("a cgroup test skipped under the systemd driver")
	}
	// Nothing of the pods is left: no pod slice unit, no kubepods cgroup.
	if units := strings.TrimSpace(m.MustRun(t, "systemctl", "list-units", "--all", "--plain", "--no-legend", "kubepods*", "cri-containerd-*")); units != "" {
		t.Errorf("units left after the tests:\n%s", units)
	}
	// (Slice and scope names only: the cpu, pids and other controllers but
	// memory are the host's hierarchies, where a host kubelet's cgroupfs
	// "kubepods" may be.)
	if left, _ := m.Run("sh", "-c", "find /sys/fs/cgroup/ -name 'kubepods.slice' -o -name 'kubepods-*.slice' -o -name 'cri-containerd-*.scope' 2>/dev/null"); strings.TrimSpace(left) != "" {
		t.Errorf("cgroups left after the tests:\n%s", left)
	}
}
