package csitest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// SizeKey is the volume attribute with a volume's first size in bytes
// (default 64 MiB): a raw block volume's image, or with Config.Expand a
// filesystem volume's tmpfs.
const SizeKey = "csitest.nodelet.io/size"

const defaultSize = 64 << 20

// A raw block volume is an image file, <DataDir>/volumes/<id>.img, on a
// loop device: NodeStageVolume attaches it, NodePublishVolume bind-mounts
// the loop device on the target file, NodeUnstageVolume detaches it and
// NodeExpandVolume grows the image and the device (losetup -c).
//
// With Config.Expand a filesystem volume's data directory is a tmpfs of
// its size, which NodeExpandVolume grows with a remount: the bind mounts
// on the staging and target paths share it, so a pod sees the new size at
// once. (ext4 on a loop device would be closer to a disk, but growing it
// while mounted needs CAP_SYS_RESOURCE, which test machines in containers
// often lack.)

func volumeSize(attrs map[string]string) (int64, error) {
	s, ok := attrs[SizeKey]
	if !ok {
		return defaultSize, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return 0, status.Errorf(codes.InvalidArgument, "%s: bad size %q", SizeKey, s)
	}
	return n, nil
}

func (d *driver) image(id string) (string, error) {
	if id == "" || filepath.Base(id) != id || id == "." || id == ".." {
		return "", status.Errorf(codes.InvalidArgument, "bad volume ID %q", id)
	}
	return filepath.Join(d.cfg.DataDir, "volumes", id+".img"), nil
}

// loopDevice is the loop device of the volume's image; attach makes the
// image (of the size attrs say) and attaches it when there is none.
func (d *driver) loopDevice(id string, attrs map[string]string, attach bool) (string, error) {
	img, err := d.image(id)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(img); os.IsNotExist(err) {
		if !attach {
			return "", status.Errorf(codes.NotFound, "volume %s has no image", id)
		}
		size, err := volumeSize(attrs)
		if err != nil {
			return "", err
		}
		if err := os.WriteFile(img, nil, 0o600); err != nil {
			return "", status.Error(codes.Internal, err.Error())
		}
		if err := os.Truncate(img, size); err != nil {
			return "", status.Error(codes.Internal, err.Error())
		}
	}
	if dev, err := attached(img); err != nil || dev != "" || !attach {
		if err == nil && dev == "" {
			err = status.Errorf(codes.NotFound, "volume %s is not attached", id)
		}
		return dev, err
	}
	return run("losetup", "--find", "--show", img)
}

// attached is the first loop device of img ("" none).
func attached(img string) (string, error) {
	out, err := run("losetup", "-j", img)
	if err != nil {
		return "", err
	}
	dev, _, _ := strings.Cut(out, ":")
	return dev, nil
}

// detach detaches every loop device of the volume's image, if it has one.
func (d *driver) detach(id string) error {
	img, err := d.image(id)
	if err != nil {
		return err
	}
	if _, err := os.Stat(img); os.IsNotExist(err) {
		return nil
	}
	for {
		dev, err := attached(img)
		if err != nil || dev == "" {
			return err
		}
		if _, err := run("losetup", "-d", dev); err != nil {
			return err
		}
	}
}

func (d *driver) stageBlock(req *csipb.NodeStageVolumeRequest) error {
	_, err := d.loopDevice(req.GetVolumeId(), req.GetVolumeContext(), true)
	return err
}

// publishBlock bind-mounts the volume's loop device on the target file.
func (d *driver) publishBlock(req *csipb.NodePublishVolumeRequest) error {
	dev, err := d.loopDevice(req.GetVolumeId(), nil, false)
	if err != nil {
		return status.Errorf(codes.FailedPrecondition, "volume %s is not staged: %v", req.GetVolumeId(), err)
	}
	target := req.GetTargetPath()
	if target == "" {
		return status.Error(codes.InvalidArgument, "target path missing")
	}
	if err := os.MkdirAll(filepath.Dir(target), 0o750); err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	f, err := os.OpenFile(target, os.O_CREATE, 0o600)
	if err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	f.Close()
	if mounted, err := d.mounter.IsMountPoint(target); err != nil {
		return status.Error(codes.Internal, err.Error())
	} else if mounted {
		return nil
	}
	opts := []string{"bind"}
	if req.GetReadonly() {
		opts = append(opts, "ro")
	}
	if err := d.mounter.Mount(dev, target, "", opts); err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	return nil
}

// sizedDataDir is a filesystem volume's data directory as a tmpfs of the
// size attrs say (mounted the first time).
func (d *driver) sizedDataDir(dir string, attrs map[string]string) error {
	if mounted, err := d.mounter.IsMountPoint(dir); err != nil {
		return status.Error(codes.Internal, err.Error())
	} else if mounted {
		return nil
	}
	size, err := volumeSize(attrs)
	if err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "mode=0777,size="+strconv.FormatInt(size, 10)); err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	return nil
}

// expand grows a volume to at least want bytes and returns its size.
func (d *driver) expand(req *csipb.NodeExpandVolumeRequest) (int64, error) {
	id, want := req.GetVolumeId(), req.GetCapacityRange().GetRequiredBytes()
	if req.GetVolumeCapability().GetBlock() != nil {
		img, err := d.image(id)
		if err != nil {
			return 0, err
		}
		fi, err := os.Stat(img)
		if err != nil {
			return 0, status.Errorf(codes.NotFound, "volume %s: %v", id, err)
		}
		if fi.Size() >= want {
			return fi.Size(), nil
		}
		if err := os.Truncate(img, want); err != nil {
			return 0, status.Error(codes.Internal, err.Error())
		}
		dev, err := d.loopDevice(id, nil, false)
		if err != nil {
			return 0, err
		}
		if _, err := run("losetup", "-c", dev); err != nil {
			return 0, err
		}
		return want, nil
	}
	dir, err := d.dataDir(id, nil)
	if err != nil {
		return 0, err
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, status.Error(codes.Internal, err.Error())
	}
	if have := int64(st.Blocks) * int64(st.Bsize); have >= want {
		return have, nil
	}
	if err := unix.Mount("", dir, "", unix.MS_REMOUNT, "size="+strconv.FormatInt(want, 10)); err != nil {
		return 0, status.Error(codes.Internal, err.Error())
	}
	return want, nil
}

// cleanup unmounts the volumes' tmpfs and detaches their loop devices
// when the driver stops, so that a test leaves nothing behind.
func (d *driver) cleanup() {
	dir := filepath.Join(d.cfg.DataDir, "volumes")
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if id, ok := strings.CutSuffix(e.Name(), ".img"); ok {
			_ = d.detach(id)
			continue
		}
		_ = d.unbind(filepath.Join(dir, e.Name()))
	}
}

// run runs a tool and returns its trimmed output.
func run(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return "", status.Errorf(codes.Internal, "%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out)), nil
}
