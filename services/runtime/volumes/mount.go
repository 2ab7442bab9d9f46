package volumes

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"github.com/moby/sys/mountinfo"
	"github.com/nodelet/nodelet/internal/hostinfo"
	"golang.org/x/sys/unix"
	"k8s.io/mount-utils"
)

// hostMounts mounts on the host (mount-utils, without systemd) and says
// what is mounted where: the local volume plugin's bind mounts and the
// CSI plugin's checks of its targets and staging paths.
type hostMounts struct{ mount.Interface }

// isMounted: something is mounted at path; a missing path is not.
func (h hostMounts) isMounted(path string) (bool, error) { return isMountPoint(path) }

// mountPoint is one line of /proc/self/mountinfo.
type mountPoint = hostinfo.Mount

// mountsUnder lists the mount points at or below dir, deepest first.
func mountsUnder(dir string) ([]mountPoint, error) { return hostinfo.MountsUnder(dir) }

// isMountPoint: something is mounted exactly at path (bind mounts of the
// same file system included, which a device comparison would miss); a
// missing path is not. moby/sys/mountinfo asks openat2 with
// RESOLVE_NO_XDEV and reads mountinfo only on a kernel without it: every
// sync of a pod's secret and projected volumes asks this, and at 110 pods
// reading the node's mountinfo (hundreds of mounts) each time was a third
// of nodelet-runtime's CPU (issue 37's soak).
func isMountPoint(path string) (bool, error) {
	mounted, err := mountinfo.Mounted(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return mounted, err
}

// mountTmpfs mounts a tmpfs of size bytes (0: the kernel's default) on
// dir unless one is there already.
func mountTmpfs(dir string, size int64) error {
	mounted, err := isMountPoint(dir)
	if err != nil || mounted {
		return err
	}
	opts := ""
	if size > 0 {
		opts = "size=" + strconv.FormatInt(size, 10)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return fmt.Errorf("mount tmpfs on %s: %w", dir, err)
	}
	return nil
}

// unmount unmounts path; a mount still busy is detached (it goes once its
// last user does). Not mounted is not an error.
func unmount(path string) error {
	err := unix.Unmount(path, 0)
	if errors.Is(err, unix.EBUSY) {
		err = unix.Unmount(path, unix.MNT_DETACH)
	}
	if err == nil || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
		return nil
	}
	return fmt.Errorf("unmount %s: %w", path, err)
}

// Permission masks of the kubelet's SetVolumeOwnership.
const (
	rwMask   = os.FileMode(0o660)
	roMask   = os.FileMode(0o440)
	execMask = os.FileMode(0o110)
)

// setVolumeOwnership gives group fsGroup the volume under dir, as the
// kubelet does for pods with securityContext.fsGroup: every file and
// directory gets the group, group read (and write unless readOnly), and
// directories the setgid bit. Symlinks keep their mode (a chmod would
// change their target).
func setVolumeOwnership(dir string, fsGroup *int64, readOnly bool) error {
	if fsGroup == nil {
		return nil
	}
	return filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if err := os.Lchown(path, -1, int(*fsGroup)); err != nil {
			return err
		}
		if info.Mode()&os.ModeSymlink != 0 {
			return nil
		}
		mask := rwMask
		if readOnly {
			mask = roMask
		}
		if info.IsDir() {
			mask |= os.ModeSetgid | execMask
		}
		return os.Chmod(path, info.Mode()|mask)
	})
}
