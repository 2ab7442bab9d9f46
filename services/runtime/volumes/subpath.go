package volumes

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// subPathDirName holds the subPath bind mounts in the pod's directory.
const subPathDirName = "volume-subpaths"

// Flags of the kubelet's safe traversal: open without following symlinks.
const (
	nofollowFlags = unix.O_RDONLY | unix.O_NOFOLLOW
	openFDFlags   = unix.O_NOFOLLOW | unix.O_PATH
)

// SubPath is one volume mount with a subPath (the kubelet's
// subpath.Subpath).
type SubPath struct {
	// PodDir is <stateDir>/pods/<uid>.
	PodDir string
	// VolumeName and VolumePath: the volume and its host path.
	VolumeName string
	VolumePath string
	// SubPath inside the volume, after subPathExpr expansion.
	SubPath string
	// ContainerName and VolumeMountIndex name the bind mount target.
	ContainerName    string
	VolumeMountIndex int
	// MountName is the volumeMount's name, for messages.
	MountName string
}

// PrepareSubPath is the kubelet's subPath handling of makeMounts: the
// subPath must be relative and without "..", is created (safely, inside
// the volume) when missing, resolved within the volume, opened one
// component at a time without following symlinks, and the opened file is
// bind-mounted to <podDir>/volume-subpaths/<volume>/<container>/<index>,
// whose path is returned for CRI. A symlink or ".." leading out of the
// volume, or swapped in while this runs, is refused. The messages for the
// pod name no host paths (as the kubelet's); the details go to log.
func PrepareSubPath(log *slog.Logger, sp SubPath) (string, error) {
	if filepath.IsAbs(sp.SubPath) {
		return "", fmt.Errorf("error SubPath `%s` must not be an absolute path", sp.SubPath)
	}
	if err := ValidatePathNoBacksteps(sp.SubPath); err != nil {
		return "", fmt.Errorf("unable to provision SubPath `%s`: %w", sp.SubPath, err)
	}
	full := filepath.Join(sp.VolumePath, sp.SubPath)
	if _, err := os.Stat(full); os.IsNotExist(err) {
		// The volume's mode, setgid and sticky bits included, as the
		// kubelet's makeMounts (hostutil GetMode, then SafeMakeDir).
		perm := os.FileMode(0o755)
		if fi, err := os.Stat(sp.VolumePath); err == nil {
			perm = fi.Mode() & (os.ModePerm | os.ModeSetgid | os.ModeSetuid | os.ModeSticky)
		}
		if err := SafeMakeDir(sp.SubPath, sp.VolumePath, perm); err != nil && !errors.Is(err, os.ErrExist) {
			log.Error("Failed to create subPath directory for volumeMount of the container",
				"containerName", sp.ContainerName, "volumeMountName", sp.MountName, "err", err)
			return "", fmt.Errorf("failed to create subPath directory for volumeMount %q of container %q", sp.MountName, sp.ContainerName)
		}
	}
	target, err := bindSubPath(sp, full)
	if err != nil {
		log.Error("Failed to prepare subPath for volumeMount of the container",
			"containerName", sp.ContainerName, "volumeMountName", sp.MountName, "err", err)
		return "", fmt.Errorf("failed to prepare subPath for volumeMount %q of container %q", sp.MountName, sp.ContainerName)
	}
	return target, nil
}

// ValidatePathNoBacksteps refuses a path with a ".." element.
func ValidatePathNoBacksteps(p string) error {
	for _, item := range strings.Split(filepath.ToSlash(p), "/") {
		if item == ".." {
			return errors.New("must not contain '..'")
		}
	}
	return nil
}

// pathWithinBase: fullPath is base or below it (both clean, resolved).
func pathWithinBase(fullPath, base string) bool {
	rel, err := filepath.Rel(base, fullPath)
	if err != nil {
		return false
	}
	return rel != ".." && !strings.HasPrefix(rel, "../") && !filepath.IsAbs(rel)
}

func subPathTarget(sp SubPath) string {
	return filepath.Join(sp.PodDir, subPathDirName, sp.VolumeName, sp.ContainerName, strconv.Itoa(sp.VolumeMountIndex))
}

// bindSubPath is the kubelet's doBindSubPath.
func bindSubPath(sp SubPath, full string) (string, error) {
	volumePath, err := filepath.EvalSymlinks(sp.VolumePath)
	if err != nil {
		return "", fmt.Errorf("resolve symlinks in %q: %w", sp.VolumePath, err)
	}
	path, err := filepath.EvalSymlinks(full)
	if err != nil {
		return "", fmt.Errorf("resolve symlinks in %q: %w", full, err)
	}
	if !pathWithinBase(path, volumePath) {
		return "", fmt.Errorf("subpath %q not within volume path %q", path, volumePath)
	}
	fd, err := safeOpen(path, volumePath)
	if err != nil {
		return "", fmt.Errorf("open subpath %s: %w", path, err)
	}
	defer unix.Close(fd)

	target := subPathTarget(sp)
	mounted, err := isMountPoint(target)
	if err != nil {
		return "", err
	}
	if mounted {
		// Mounted by an earlier start of the container: keep it when it is
		// the same file, else replace it.
		var a, b unix.Stat_t
		if unix.Fstat(fd, &a) == nil && unix.Stat(target, &b) == nil && a.Dev == b.Dev && a.Ino == b.Ino {
			return target, nil
		}
		if err := unmount(target); err != nil {
			return "", err
		}
	}
	if err := os.MkdirAll(filepath.Dir(target), 0o750); err != nil {
		return "", err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return "", err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		if err := os.Mkdir(target, 0o750); err != nil && !os.IsExist(err) {
			return "", err
		}
	} else if _, err := os.Lstat(target); os.IsNotExist(err) {
		// A file is a target for anything that is not a directory.
		if err := os.WriteFile(target, nil, 0o640); err != nil {
			return "", err
		}
	}
	// /proc/<pid>/fd/<fd> is the very file opened above: nobody can point
	// it elsewhere any more.
	source := fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), fd)
	if err := unix.Mount(source, target, "", unix.MS_BIND, ""); err != nil {
		return "", fmt.Errorf("bind mount %s (%s) on %s: %w", path, source, target, err)
	}
	return target, nil
}

// safeOpen opens pathname, which must be inside base, one component at a
// time with openat(O_NOFOLLOW) from base, so that no component can be a
// symlink; it returns an O_PATH descriptor of the final component.
func safeOpen(pathname, base string) (int, error) {
	pathname, base = filepath.Clean(pathname), filepath.Clean(base)
	rel, err := filepath.Rel(base, pathname)
	if err != nil {
		return -1, err
	}
	parentFD, err := unix.Open(base, nofollowFlags|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("cannot open directory %s: %w", base, err)
	}
	if rel == "." {
		return parentFD, nil
	}
	current := base
	for _, seg := range strings.Split(rel, string(filepath.Separator)) {
		current = filepath.Join(current, seg)
		if !pathWithinBase(current, base) {
			unix.Close(parentFD)
			return -1, fmt.Errorf("path %s is outside of allowed base %s", current, base)
		}
		childFD, err := unix.Openat(parentFD, seg, openFDFlags|unix.O_CLOEXEC, 0)
		unix.Close(parentFD)
		if err != nil {
			return -1, fmt.Errorf("cannot open %s: %w", current, err)
		}
		var st unix.Stat_t
		if err := unix.Fstat(childFD, &st); err != nil {
			unix.Close(childFD)
			return -1, fmt.Errorf("fstat %s: %w", current, err)
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			unix.Close(childFD)
			return -1, fmt.Errorf("unexpected symlink found %s", current)
		}
		parentFD = childFD
	}
	return parentFD, nil
}

// SafeMakeDir creates subdir below base with perm, refusing to follow a
// symlink or leave base on the way (the kubelet's SafeMakeDir).
func SafeMakeDir(subdir, base string, perm os.FileMode) error {
	realBase, err := filepath.EvalSymlinks(base)
	if err != nil {
		return fmt.Errorf("resolve symlinks in %s: %w", base, err)
	}
	pathname := filepath.Join(realBase, subdir)
	if !pathWithinBase(pathname, realBase) {
		return fmt.Errorf("path %s is outside of allowed base %s", pathname, realBase)
	}
	if fi, err := os.Stat(pathname); err == nil {
		if fi.IsDir() {
			return nil
		}
		return &os.PathError{Op: "mkdir", Path: pathname, Err: syscall.ENOTDIR}
	}
	// The longest existing prefix, then the components to create.
	existing := pathname
	var toCreate []string
	for {
		if _, err := os.Lstat(existing); err == nil {
			break
		}
		toCreate = append([]string{filepath.Base(existing)}, toCreate...)
		existing = filepath.Dir(existing)
	}
	resolved, err := filepath.EvalSymlinks(existing)
	if err != nil {
		return err
	}
	if !pathWithinBase(resolved, realBase) {
		return fmt.Errorf("path %s is outside of allowed base %s", resolved, realBase)
	}
	fd, err := safeOpen(resolved, realBase)
	if err != nil {
		return fmt.Errorf("cannot open directory %s: %w", existing, err)
	}
	current := resolved
	for _, dir := range toCreate {
		current = filepath.Join(current, dir)
		if err := unix.Mkdirat(fd, dir, unixMode(perm)); err != nil && !errors.Is(err, unix.EEXIST) {
			unix.Close(fd)
			return fmt.Errorf("create directory %s: %w", current, err)
		}
		child, err := unix.Openat(fd, dir, nofollowFlags|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("open directory %s: %w", current, err)
		}
		fd = child
		// Mkdirat's mode passes through the umask.
		if err := unix.Fchmod(fd, unixMode(perm)); err != nil {
			unix.Close(fd)
			return err
		}
	}
	return unix.Close(fd)
}

// unixMode is perm as chmod(2) takes it: os.FileMode keeps the setuid,
// setgid and sticky bits apart from the permission bits.
func unixMode(perm os.FileMode) uint32 {
	m := uint32(perm.Perm())
	if perm&os.ModeSetuid != 0 {
		m |= unix.S_ISUID
	}
	if perm&os.ModeSetgid != 0 {
		m |= unix.S_ISGID
	}
	if perm&os.ModeSticky != 0 {
		m |= unix.S_ISVTX
	}
	return m
}
