package cgroups

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	libcgroups "github.com/opencontainers/cgroups"
	libmanager "github.com/opencontainers/cgroups/manager"
	libsystemd "github.com/opencontainers/cgroups/systemd"
)

// unifiedRoot is where cgroup v2 is mounted.
const unifiedRoot = "/sys/fs/cgroup"

// Manager creates, updates and removes cgroups by Name with one driver,
// the kubelet's cgroupCommon (cgroupV1impl / cgroupV2impl).
type Manager struct {
	driver string
	v2     bool
	// mounts maps each controller to its mount point (v1), or every
	// controller to the unified root (v2).
	mounts map[string]string
	// libRoots are libcontainer's directories of the root cgroup per
	// controller (v1, cgroupfs), found once (libManager).
	libOnce  sync.Once
	libRoots map[string]string
	// unified is the v2 mount: unifiedRoot unless a test points it at a
	// tree of its own.
	unified string
}

// NewManager is the kubelet's NewCgroupManager for driver (cgroupfs or
// systemd) on the host's cgroup version.
func NewManager(driver string) (*Manager, error) {
	if err := ValidateDriver(driver); err != nil {
		return nil, err
	}
	m := &Manager{driver: driver, v2: libcgroups.IsCgroup2UnifiedMode(), mounts: map[string]string{}}
	if m.v2 {
		ctrls, err := libcgroups.GetAllSubsystems()
		if err != nil {
			return nil, fmt.Errorf("read cgroup v2 controllers: %w", err)
		}
		for _, c := range ctrls {
			m.mounts[c] = unifiedRoot
		}
	} else {
		// The kubelet's getCgroupSubsystemsV1: the shortest mount point of
		// each subsystem.
		mounts, err := libcgroups.GetCgroupMounts(true)
		if err != nil {
			return nil, fmt.Errorf("read cgroup mounts: %w", err)
		}
		if len(mounts) == 0 {
			return nil, errors.New("no cgroup mounts found")
		}
		for _, mt := range mounts {
			for _, s := range mt.Subsystems {
				if prev := m.mounts[s]; prev == "" || len(mt.Mountpoint) < len(prev) {
					m.mounts[s] = mt.Mountpoint
				}
			}
		}
	}
	if driver == DriverSystemd && !libsystemd.IsRunningSystemd() {
		return nil, errors.New(`runtime.cgroupDriver is "systemd" but systemd is not running on this host: use "cgroupfs" (and SystemdCgroup = false in containerd)`)
	}
	return m, nil
}

// ValidateDriver refuses a driver that is neither cgroupfs nor systemd.
func ValidateDriver(driver string) error {
	if driver != DriverCgroupfs && driver != DriverSystemd {
		return fmt.Errorf("cgroup driver %q: must be %q or %q", driver, DriverCgroupfs, DriverSystemd)
	}
	return nil
}

// Driver is the manager's driver.
func (m *Manager) Driver() string { return m.driver }

// V2 reports whether the host runs the unified (v2) hierarchy.
func (m *Manager) V2() bool { return m.v2 }

// Dir is n's directory for controller (v1; "" for any on v2).
func (m *Manager) Dir(n Name, controller string) string {
	if m.v2 {
		root := unifiedRoot
		if m.unified != "" {
			root = m.unified
		}
		return filepath.Join(root, n.Path(m.driver))
	}
	mp := m.mounts[controller]
	if mp == "" {
		return ""
	}
	return filepath.Join(mp, n.Path(m.driver))
}

// required are the controllers a pod cgroup must have (the kubelet's
// cgroupV1impl.Validate checks these, pids included).
var required = []string{"cpu", "memory", "pids"}

// Exists reports whether n exists in every required controller.
func (m *Manager) Exists(n Name) bool {
	if m.v2 {
		_, err := os.Stat(m.Dir(n, ""))
		return err == nil
	}
	for _, c := range required {
		d := m.Dir(n, c)
		if d == "" {
			continue
		}
		if _, err := os.Stat(d); err != nil {
			return false
		}
	}
	return true
}

// libctConfig is the kubelet's libctCgroupConfig.
func (m *Manager) libctConfig(n Name, rc *ResourceConfig) *libcgroups.Cgroup {
	c := &libcgroups.Cgroup{Systemd: m.driver == DriverSystemd, Resources: m.toResources(rc)}
	if !c.Systemd {
		c.Path = n.ToCgroupfs()
		return c
	}
	dir, base := path.Split(n.ToSystemd())
	if dir == "/" {
		dir = "-.slice"
	} else {
		dir = path.Base(dir)
	}
	c.Parent, c.Name = dir, base
	return c
}

// toResources is the kubelet's toResources (CPU weight from shares on v2,
// every huge page size not asked for limited to 0).
func (m *Manager) toResources(rc *ResourceConfig) *libcgroups.Resources {
	r := &libcgroups.Resources{SkipDevices: true, SkipFreezeOnSet: true}
	if rc == nil {
		return r
	}
	if rc.Memory != nil {
		r.Memory = *rc.Memory
	}
	if rc.CPUShares != nil {
		if m.v2 {
			r.CpuWeight = CPUWeight(*rc.CPUShares)
		} else {
			r.CpuShares = *rc.CPUShares
		}
	}
	if rc.CPUQuota != nil {
		r.CpuQuota = *rc.CPUQuota
	}
	if rc.CPUPeriod != nil {
		r.CpuPeriod = *rc.CPUPeriod
	}
	if rc.PidsLimit != nil {
		r.PidsLimit = rc.PidsLimit
	}
	if rc.HugePageLimit != nil && m.hasHugetlb() {
		set := map[string]bool{}
		for size, limit := range rc.HugePageLimit {
			name := hugePageSizeName(size)
			r.HugetlbLimit = append(r.HugetlbLimit, &libcgroups.HugepageLimit{Pagesize: name, Limit: uint64(limit)})
			set[name] = true
		}
		for _, name := range libcgroups.HugePageSizes() {
			if !set[name] {
				r.HugetlbLimit = append(r.HugetlbLimit, &libcgroups.HugepageLimit{Pagesize: name, Limit: 0})
			}
		}
	}
	return r
}

func (m *Manager) hasHugetlb() bool {
	if !m.v2 {
		return m.mounts["hugetlb"] != ""
	}
	b, err := os.ReadFile(filepath.Join(unifiedRoot, "cgroup.controllers"))
	return err == nil && slices.Contains(strings.Fields(string(b)), "hugetlb")
}

// CPUWeight is the kubelet's getCPUWeight: shares [2, 262144] to cgroup
// v2 weight [1, 10000].
func CPUWeight(shares uint64) uint64 {
	if shares >= 262144 {
		return 10000
	}
	if shares < 2 {
		shares = 2
	}
	return 1 + ((shares-2)*9999)/262142
}

// libManager is libcontainer's manager of c. With the cgroupfs driver on
// v1 it gets c's directory in each controller from the controllers' roots
// libcontainer found once: without them the fs manager looks every
// controller's mount point up again on each call (a statfs or a mountinfo
// parse each), about 1 ms of a pod cgroup's creation or removal here.
func (m *Manager) libManager(c *libcgroups.Cgroup) (libcgroups.Manager, error) {
	if m.v2 || m.driver != DriverCgroupfs {
		return libmanager.New(c)
	}
	m.libOnce.Do(func() {
		// libcontainer's own lookup, once, for the root cgroup: its
		// directories are the controllers' roots as libcontainer names
		// them ("name=systemd" and the hybrid unified one included).
		root, err := libmanager.New(&libcgroups.Cgroup{Path: "/", Resources: &libcgroups.Resources{}})
		if err == nil {
			m.libRoots = root.GetPaths()
		}
	})
	if m.libRoots == nil {
		return libmanager.New(c)
	}
	paths := make(map[string]string, len(m.libRoots))
	for ctrl, dir := range m.libRoots {
		paths[ctrl] = filepath.Join(dir, c.Path)
	}
	return libmanager.NewWithPaths(c, paths)
}

// Create makes n with rc (the kubelet's Create: Apply(-1), then Set).
func (m *Manager) Create(n Name, rc *ResourceConfig) error {
	c := m.libctConfig(n, rc)
	mgr, err := m.libManager(c)
	if err != nil {
		return err
	}
	if err := mgr.Apply(-1); err != nil {
		return fmt.Errorf("create cgroup %s: %w", n.Path(m.driver), err)
	}
	if err := mgr.Set(c.Resources); err != nil {
		return fmt.Errorf("set cgroup %s: %w", n.Path(m.driver), err)
	}
	return nil
}

// Update sets rc on n (the kubelet's Update); nil fields are left as they are.
func (m *Manager) Update(n Name, rc *ResourceConfig) error {
	c := m.libctConfig(n, rc)
	mgr, err := m.libManager(c)
	if err != nil {
		return err
	}
	if err := mgr.Set(c.Resources); err != nil {
		return fmt.Errorf("set cgroup %s: %w", n.Path(m.driver), err)
	}
	return nil
}

// Destroy removes n and every cgroup under it (the kubelet's Destroy).
func (m *Manager) Destroy(n Name) error {
	mgr, err := m.libManager(m.libctConfig(n, nil))
	if err != nil {
		return err
	}
	if err := mgr.Destroy(); err != nil {
		return fmt.Errorf("remove cgroup %s: %w", n.Path(m.driver), err)
	}
	// The fs managers remove what they know; a controller mounted but not
	// managed (e.g. net_cls on v1) may still hold the directory.
	if !m.v2 {
		for _, mp := range m.mounts {
			_ = libcgroups.RemovePath(filepath.Join(mp, n.Path(m.driver)))
		}
	}
	return nil
}

// Pids lists the processes in n and every cgroup under it (the kubelet's Pids).
func (m *Manager) Pids(n Name) []int {
	seen := map[int]bool{}
	var out []int
	for _, mp := range m.uniqueMounts() {
		dir := filepath.Join(mp, n.Path(m.driver))
		_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			pids, _ := libcgroups.GetPids(p)
			for _, pid := range pids {
				if !seen[pid] {
					seen[pid] = true
					out = append(out, pid)
				}
			}
			return nil
		})
	}
	return out
}

// Children lists the names of the cgroups directly under n.
func (m *Manager) Children(n Name) []Name {
	seen := map[string]bool{}
	var out []Name
	for _, mp := range m.uniqueMounts() {
		dir := filepath.Join(mp, n.Path(m.driver))
		ents, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range ents {
			if !e.IsDir() || seen[e.Name()] {
				continue
			}
			seen[e.Name()] = true
			full := path.Join(n.Path(m.driver), e.Name())
			if m.driver == DriverSystemd {
				out = append(out, ParseSystemd(full))
			} else {
				out = append(out, ParseCgroupfs(full))
			}
		}
	}
	return out
}

func (m *Manager) uniqueMounts() []string {
	var out []string
	for _, mp := range m.mounts {
		if !slices.Contains(out, mp) {
			out = append(out, mp)
		}
	}
	slices.Sort(out)
	return out
}

// ReadInt reads one integer file of n in controller (e.g. "memory",
// "memory.limit_in_bytes"); "max" reads as -1.
func (m *Manager) ReadInt(n Name, controller, file string) (int64, error) {
	b, err := os.ReadFile(filepath.Join(m.Dir(n, controller), file))
	if err != nil {
		return 0, err
	}
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return -1, nil
	}
	var v int64
	_, err = fmt.Sscan(s, &v)
	return v, err
}

// ReadCPUMax reads cgroup v2's cpu.max of n: quota (-1 for max) and period.
func (m *Manager) ReadCPUMax(n Name) (quota int64, period uint64, err error) {
	b, err := os.ReadFile(filepath.Join(m.Dir(n, "cpu"), "cpu.max"))
	if err != nil {
		return 0, 0, err
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, 0, fmt.Errorf("cpu.max: %q", b)
	}
	quota = -1
	if f[0] != "max" {
		if _, err := fmt.Sscan(f[0], &quota); err != nil {
			return 0, 0, err
		}
	}
	_, err = fmt.Sscan(f[1], &period)
	return quota, period, err
}
