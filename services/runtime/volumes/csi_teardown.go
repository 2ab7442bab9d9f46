package volumes

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
)

// teardown unpublishes the pod's CSI volumes (raw block ones first,
// csi_block.go), each through its driver,
// and unstages a volume no other pod on the node still publishes (the
// kubelet's TearDownAt and UnmountDevice). It reads only the disk, so it
// works after a restart.
func (c *csiPlugin) teardown(ctx context.Context, uid string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.teardownBlock(ctx, uid); err != nil {
		return err
	}
	base := filepath.Join(PodDir(c.stateDir, uid), "volumes", pluginCSI)
	entries, err := os.ReadDir(base)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		dir := filepath.Join(base, e.Name())
		target := filepath.Join(dir, "mount")
		mounted, err := c.mounts.isMounted(target)
		if err != nil {
			return err
		}
		data, lerr := loadVolData(dir)
		if lerr != nil {
			if mounted {
				return fmt.Errorf("kubernetes.io/csi: unmounter failed to load volume data file [%s]: %w", dir, lerr)
			}
			if err := os.RemoveAll(dir); err != nil {
				return err
			}
			continue
		}
		d, derr := c.driver(data.DriverName)
		if derr != nil && mounted {
			return fmt.Errorf("UnmountVolume.TearDown failed for volume %q: %w", data.SpecVolID, derr)
		}
		if derr == nil {
			if _, err := d.Node.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: data.VolumeHandle, TargetPath: target}); err != nil {
				return fmt.Errorf("UnmountVolume.TearDown failed for volume %q: kubernetes.io/csi: Unmounter.TearDownAt failed: %w", data.SpecVolID, err)
			}
		}
		if still, err := c.mounts.isMounted(target); err != nil || still {
			if err == nil {
				err = fmt.Errorf("%s is still mounted after NodeUnpublishVolume", target)
			}
			return err
		}
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
		c.log.Info("Unpublished CSI volume", "podUID", uid, "driver", data.DriverName, "volumeHandle", data.VolumeHandle, "targetPath", target)
		if err := c.unstageIfUnused(ctx, data.DriverName, data.VolumeHandle); err != nil {
			return err
		}
	}
	return os.RemoveAll(base)
}

// unstageIfUnused is the kubelet's UnmountDevice once no pod on the node
// publishes the volume any more.
func (c *csiPlugin) unstageIfUnused(ctx context.Context, driver, handle string) error {
	staging := stagingPath(c.stateDir, driver, handle)
	if _, err := os.Stat(filepath.Dir(staging)); os.IsNotExist(err) {
		return nil
	}
	if c.publishedElsewhere(driver, handle) {
		return nil
	}
	mounted, err := c.mounts.isMounted(staging)
	if err != nil {
		return err
	}
	d, derr := c.driver(driver)
	if derr != nil && mounted {
		return fmt.Errorf("UnmountDevice failed for volume %s: %w", handle, derr)
	}
	if derr == nil {
		if _, err := d.Node.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: handle, StagingTargetPath: staging}); err != nil {
			return fmt.Errorf("UnmountDevice failed for volume %s: kubernetes.io/csi: attacher.UnmountDevice failed: %w", handle, err)
		}
	}
	if still, err := c.mounts.isMounted(staging); err != nil || still {
		if err == nil {
			err = fmt.Errorf("%s is still mounted after NodeUnstageVolume", staging)
		}
		return err
	}
	if err := os.RemoveAll(filepath.Dir(staging)); err != nil {
		return err
	}
	c.inUse.signal()
	c.log.Info("Unstaged CSI volume", "driver", driver, "volumeHandle", handle, "stagingTargetPath", staging)
	return nil
}

// publishedElsewhere: some pod directory still holds the volume.
func (c *csiPlugin) publishedElsewhere(driver, handle string) bool {
	matches, _ := filepath.Glob(filepath.Join(c.stateDir, "pods", "*", "volumes", pluginCSI, "*", volDataFile))
	for _, f := range matches {
		if d, err := loadVolData(filepath.Dir(f)); err == nil && d.DriverName == driver && d.VolumeHandle == handle {
			return true
		}
	}
	return false
}
