// Package hostinfo reads the node's hardware and filesystems with cAdvisor
// and picks its addresses: what nodelet-status reports in the Node and
// nodelet-server serves on /spec/ and /stats/summary.
package hostinfo

import (
	"fmt"
	"net"
	"sync"

	cadvisorfs "github.com/google/cadvisor/lib/fs"
	// The filesystem plugins cAdvisor uses to measure the node's disks.
	_ "github.com/google/cadvisor/lib/fs/overlay/install"
	_ "github.com/google/cadvisor/lib/fs/tmpfs/install"
	_ "github.com/google/cadvisor/lib/fs/vfs/install"
	"github.com/google/cadvisor/lib/machine"
	cadvisorapi "github.com/google/cadvisor/lib/model"
	"github.com/google/cadvisor/lib/utils/sysfs"
	"golang.org/x/sys/unix"
	utilnet "k8s.io/apimachinery/pkg/util/net"
)

// Machine reads the node's hardware with cAdvisor once and keeps it,
// as the kubelet caches it: capacity does not change while the node runs.
type Machine struct {
	once   sync.Once
	info   *cadvisorapi.MachineInfo
	err    error
	fsInfo cadvisorfs.FsInfo
	fsErr  error
	fsOnce sync.Once
}

// Info returns cAdvisor's MachineInfo, read once.
func (m *Machine) Info() (*cadvisorapi.MachineInfo, error) {
	m.once.Do(func() {
		fsInfo, _ := m.fs()
		m.info, m.err = machine.Info(sysfs.NewRealSysFs(), fsInfo, true)
		if m.err != nil {
			m.err = fmt.Errorf("cAdvisor machine info: %w", m.err)
		}
	})
	return m.info, m.err
}

func (m *Machine) fs() (cadvisorfs.FsInfo, error) {
	m.fsOnce.Do(func() {
		m.fsInfo, m.fsErr = cadvisorfs.NewFsInfo(cadvisorfs.Context{})
	})
	return m.fsInfo, m.fsErr
}

// FsStats is the capacity and use of one filesystem.
type FsStats struct {
	Device     string
	Capacity   uint64
	Available  uint64
	Used       uint64
	Inodes     uint64
	InodesFree uint64
}

// DirFs measures the filesystem that holds dir, through cAdvisor (as the
// kubelet's root filesystem) and, when cAdvisor does not know the device
// (overlay roots, containers), with statfs.
func (m *Machine) DirFs(dir string) (FsStats, error) {
	if fsInfo, err := m.fs(); err == nil {
		if dev, err := fsInfo.GetDirFsDevice(dir); err == nil {
			if mnt, err := fsInfo.GetMountpointForDevice(dev.Device); err == nil {
				if fss, err := fsInfo.GetFsInfoForPath(map[string]struct{}{mnt: {}}); err == nil && len(fss) > 0 {
					f := fss[0]
					out := FsStats{Device: f.Device, Capacity: f.Capacity, Available: f.Available, Used: f.Capacity - f.Free}
					if f.Inodes != nil && f.InodesFree != nil {
						out.Inodes, out.InodesFree = *f.Inodes, *f.InodesFree
					}
					return out, nil
				}
			}
		}
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return FsStats{}, fmt.Errorf("statfs %s: %w", dir, err)
	}
	bs := uint64(st.Bsize)
	return FsStats{
		Capacity: st.Blocks * bs, Available: st.Bavail * bs, Used: (st.Blocks - st.Bfree) * bs,
		Inodes: st.Files, InodesFree: st.Ffree,
	}, nil
}

// KernelVersion is what the kubelet reports in NodeInfo.
func KernelVersion() string { return machine.KernelVersion() }

// OSImage is what the kubelet reports in NodeInfo.
func OSImage() string { return machine.ContainerOsVersion() }

// NodeAddresses returns the node's InternalIP: configured; else the address
// of the default route's interface, as the kubelet picks it; else the first
// non-loopback IPv4 address of an interface that is up (then IPv6).
func NodeAddresses(configured string) ([]string, error) {
	if configured != "" {
		ip := net.ParseIP(configured)
		if ip == nil {
			return nil, fmt.Errorf("node.address: %q is not an IP address", configured)
		}
		return []string{ip.String()}, nil
	}
	if ip, err := utilnet.ChooseHostInterface(); err == nil && ip != nil && !ip.IsLoopback() {
		return []string{ip.String()}, nil
	}
	ifaces, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("list network interfaces: %w", err)
	}
	var v6 []string
	for _, iface := range ifaces {
		if iface.Flags&net.FlagUp == 0 || iface.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, err := iface.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			ipn, ok := a.(*net.IPNet)
			if !ok || ipn.IP.IsLoopback() || ipn.IP.IsLinkLocalUnicast() {
				continue
			}
			if ipn.IP.To4() != nil {
				return []string{ipn.IP.String()}, nil
			}
			v6 = append(v6, ipn.IP.String())
		}
	}
	if len(v6) > 0 {
		return v6[:1], nil
	}
	return nil, fmt.Errorf("no non-loopback address found; set node.address")
}

// InterfaceOf returns the name of the interface that holds the first of
// ips, or "".
func InterfaceOf(ips []string) string {
	if len(ips) == 0 {
		return ""
	}
	want := net.ParseIP(ips[0])
	ifaces, err := net.Interfaces()
	if err != nil || want == nil {
		return ""
	}
	for _, iface := range ifaces {
		addrs, _ := iface.Addrs()
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && ipn.IP.Equal(want) {
				return iface.Name
			}
		}
	}
	return ""
}
