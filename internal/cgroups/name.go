// Package cgroups is the kubelet's cgroup manager for nodelet: the
// node-allocatable, QoS and pod cgroups, by name, for the cgroupfs and the
// systemd driver, on cgroup v1 and v2, through github.com/opencontainers/cgroups
// (the library the kubelet uses). It mirrors pkg/kubelet/cm of the
// kubelet: cgroup_manager_linux.go (names, Create, Update, Destroy),
// helpers_linux.go (ResourceConfigForPod), qos_container_manager_linux.go
// and pod_container_manager_linux.go (the hierarchy, one cgroup per pod)
// and node_container_manager_linux.go (node allocatable enforcement).
package cgroups

import (
	"fmt"
	"path"
	"strings"

	"github.com/opencontainers/cgroups/systemd"
)

// Drivers: how cgroups are named and made (runtime.cgroupDriver). It must
// be the container runtime's (containerd's SystemdCgroup).
const (
	DriverCgroupfs = "cgroupfs"
	DriverSystemd  = "systemd"
)

// Name is a driver-neutral cgroup name, the kubelet's CgroupName: its
// components from the root, e.g. {"nodelet", "burstable", "pod<uid>"}.
type Name []string

// NewName appends components to base; like the kubelet's NewCgroupName it
// refuses "/" and "_" in a component ("_" is how the systemd form escapes
// "-").
func NewName(base Name, components ...string) (Name, error) {
	for _, c := range components {
		if c == "" || strings.Contains(c, "/") || strings.Contains(c, "_") {
			return nil, fmt.Errorf("invalid cgroup name component %q", c)
		}
	}
	return append(append(Name{}, base...), components...), nil
}

// ParseCgroupfs is the kubelet's ParseCgroupfsToCgroupName.
func ParseCgroupfs(name string) Name {
	parts := strings.Split(strings.TrimPrefix(path.Clean("/"+name), "/"), "/")
	if len(parts) == 1 && parts[0] == "" {
		return Name{}
	}
	return Name(parts)
}

// ParseSystemd is the kubelet's ParseSystemdToCgroupName: the last slice
// of a systemd path back to a name.
func ParseSystemd(name string) Name {
	base := strings.TrimSuffix(path.Base(name), ".slice")
	out := Name{}
	for _, p := range strings.Split(base, "-") {
		out = append(out, strings.ReplaceAll(p, "_", "-"))
	}
	return out
}

// ToCgroupfs is the cgroupfs path of n: /nodelet/burstable/pod<uid>.
func (n Name) ToCgroupfs() string {
	return "/" + path.Join(n...)
}

// ToSystemd is the cgroupfs path systemd gives n (the kubelet's
// ToSystemd): {"nodelet","burstable","pod1-2"} is
// /nodelet.slice/nodelet-burstable.slice/nodelet-burstable-pod1_2.slice.
func (n Name) ToSystemd() string {
	if len(n) == 0 || (len(n) == 1 && n[0] == "") {
		return "/"
	}
	parts := make([]string, len(n))
	for i, p := range n {
		parts[i] = strings.ReplaceAll(p, "-", "_")
	}
	out, err := systemd.ExpandSlice(strings.Join(parts, "-") + ".slice")
	if err != nil {
		// NewName keeps names valid; ExpandSlice only refuses "/" and empty parts.
		panic(fmt.Sprintf("cgroup name %v has no systemd form: %v", []string(n), err))
	}
	return out
}

// Path is n in the driver's cgroupfs form (the kubelet's cgroupManager.Name).
func (n Name) Path(driver string) string {
	if driver == DriverSystemd {
		return n.ToSystemd()
	}
	return n.ToCgroupfs()
}

// ForCRI is how CRI's CgroupParent names n (the kubelet's
// GetPodContainerNameForDriver): the systemd slice unit itself
// (nodelet-burstable-pod<uid>.slice), or the cgroupfs path.
func (n Name) ForCRI(driver string) string {
	if driver == DriverSystemd {
		return path.Base(n.ToSystemd())
	}
	return n.ToCgroupfs()
}
