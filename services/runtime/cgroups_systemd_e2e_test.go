package runtime

import (
	"os"
	"path/filepath"
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
// The machine (testenv.BootSystemdDriverMachine) says how its systemd
// comes to use the cgroup v1 controllers.
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
	// The inner run's output, in a file it is kept in should it hang.
	outDir := t.TempDir()
	outFile := filepath.Join(outDir, "inner.log")
	m := testenv.BootSystemdDriverMachine(t, root, []string{outDir}, []string{filepath.Dir(self), wd})

	args := []string{"systemd-run", "--unit=nodelet-cgroup-tests", "--wait", "--collect", "--quiet",
		"-p", "WorkingDirectory=" + wd, "-p", "StandardOutput=file:" + outFile, "-p", "StandardError=inherit",
		"-E", "NODELET_TEST_CGROUP_DRIVER=systemd",
		"-E", "NODELET_CACHE=" + filepath.Dir(images.DefaultCacheDir()),
		"-E", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	if v := os.Getenv("NODELET_TEST_CONTAINERD"); v != "" {
		args = append(args, "-E", "NODELET_TEST_CONTAINERD="+v)
	}
	args = append(args, self, "-test.run", "^("+strings.Join(cgroupTests, "|")+")$", "-test.v", "-test.count=1", "-test.timeout=12m")
	began := time.Now()
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
