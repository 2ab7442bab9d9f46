package volumes

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	corev1 "k8s.io/api/core/v1"
)

// pluginCSIDevices is the kubelet's directory of a pod's raw block
// volumes: <pod>/volumeDevices/kubernetes.io~csi/<spec>.
const pluginCSIDevices = "kubernetes.io~csi"

// volumeDevicesDir is the kubelet's CSI block directory,
// <stateDir>/plugins/kubernetes.io/csi/volumeDevices (GetVolumeDevicePluginDir).
func volumeDevicesDir(stateDir string) string {
	return filepath.Join(stateDir, "plugins", "kubernetes.io", "csi", "volumeDevices")
}

// podDeviceLink is where a pod's raw block volume is, for its containers.
func podDeviceLink(stateDir, uid, spec string) string {
	return filepath.Join(PodDir(stateDir, uid), "volumeDevices", pluginCSIDevices, spec)
}

// csiPaths are where a CSI volume is staged and published, and what the
// containers get.
type csiPaths struct {
	// target is NodePublishVolume's: <pod>/volumes/kubernetes.io~csi/<spec>/mount,
	// or for a block volume the file <volumeDevices>/publish/<spec>/<podUID>
	// the driver puts the device on (the kubelet's csiBlockMapper).
	target string
	// host is what containers get: the target, or for a block volume the
	// symlink <pod>/volumeDevices/kubernetes.io~csi/<spec> to it (the
	// kubelet's pod device map path).
	host string
	// dataDir holds the publication's vol_data.json.
	dataDir string
	// staging is NodeStageVolume's path ("" when the volume is not
	// staged): the global mount, or <volumeDevices>/staging/<spec>.
	staging string
	// stageDataDir holds the staging's vol_data.json.
	stageDataDir string
	block        bool
}

func (c *csiPlugin) pathsFor(pod *corev1.Pod, cv csiVolume) csiPaths {
	if !cv.block {
		dir := VolumeDir(c.stateDir, string(pod.UID), pluginCSI, cv.specName)
		staging := stagingPath(c.stateDir, cv.driver, cv.handle)
		target := filepath.Join(dir, "mount")
		return csiPaths{target: target, host: target, dataDir: dir, staging: staging, stageDataDir: filepath.Dir(staging)}
	}
	base := volumeDevicesDir(c.stateDir)
	data := filepath.Join(base, cv.specName, "data")
	return csiPaths{
		target:  filepath.Join(base, "publish", cv.specName, string(pod.UID)),
		host:    podDeviceLink(c.stateDir, string(pod.UID), cv.specName),
		dataDir: data, staging: filepath.Join(base, "staging", cv.specName), stageDataDir: data, block: true,
	}
}

// staged: the volume need not be staged again. A filesystem is staged
// when its global mount is mounted; a block volume is staged again for
// each publication (NodeStageVolume is idempotent; the kubelet's
// SetUpDevice runs for each mapping).
func (p csiPaths) staged(mounts mountChecker) (bool, error) {
	if p.block {
		return false, nil
	}
	return mounts.isMounted(p.staging)
}

// prepare makes the directory of a block volume's publish file (the
// driver makes the file).
func (p csiPaths) prepare() error {
	if !p.block {
		return nil
	}
	return os.MkdirAll(filepath.Dir(p.target), 0o750)
}

// link is the kubelet's MapBlockVolume for the pod: the symlink the
// containers' devices are made from, to the published device.
func (p csiPaths) link() error {
	if !p.block {
		return nil
	}
	if cur, err := os.Readlink(p.host); err == nil && cur == p.target {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(p.host), 0o750); err != nil {
		return err
	}
	_ = os.Remove(p.host)
	return os.Symlink(p.target, p.host)
}

// teardownBlock is the kubelet's block unmapper for the pod's raw block
// volumes: NodeUnpublishVolume of its publish file, the symlink removed,
// and NodeUnstageVolume once no pod publishes the volume. It reads only the
// disk.
func (c *csiPlugin) teardownBlock(ctx context.Context, uid string) error {
	links := filepath.Join(PodDir(c.stateDir, uid), "volumeDevices", pluginCSIDevices)
	entries, err := os.ReadDir(links)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	base := volumeDevicesDir(c.stateDir)
	for _, e := range entries {
		spec := e.Name()
		target := filepath.Join(base, "publish", spec, uid)
		data, lerr := loadVolData(filepath.Join(base, spec, "data"))
		mounted, err := c.mounts.isMounted(target)
		if err != nil {
			return err
		}
		if lerr != nil && mounted {
			return fmt.Errorf("kubernetes.io/csi: blockMapper failed to load volume data file [%s]: %w", spec, lerr)
		}
		if lerr == nil {
			d, derr := c.driver(data.DriverName)
			if derr != nil && mounted {
				return fmt.Errorf("UnmapVolume.UnmapBlockVolume failed for volume %q: %w", spec, derr)
			}
			if derr == nil {
				if _, err := d.Node.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: data.VolumeHandle, TargetPath: target}); err != nil {
					return fmt.Errorf("UnmapVolume.UnmapBlockVolume failed for volume %q: kubernetes.io/csi: blockMapper.unpublishVolumeForBlock failed: %w", spec, err)
				}
			}
		}
		if still, err := c.mounts.isMounted(target); err != nil || still {
			if err == nil {
				err = fmt.Errorf("%s is still mounted after NodeUnpublishVolume", target)
			}
			return err
		}
		if err := os.Remove(target); err != nil && !os.IsNotExist(err) {
			return err
		}
		if err := os.Remove(filepath.Join(links, spec)); err != nil && !os.IsNotExist(err) {
			return err
		}
		c.log.Info("Unpublished CSI block volume", "podUID", uid, "volume", spec, "targetPath", target)
		if left, _ := os.ReadDir(filepath.Join(base, "publish", spec)); len(left) > 0 || lerr != nil {
			continue
		}
		if err := c.unstageBlock(ctx, base, spec, data); err != nil {
			return err
		}
	}
	return os.RemoveAll(filepath.Dir(links))
}

// unstageBlock is the kubelet's TearDownDevice once no pod maps the
// volume: NodeUnstageVolume on its staging path when the driver stages,
// then its directories go.
func (c *csiPlugin) unstageBlock(ctx context.Context, base, spec string, data volData) error {
	staging := filepath.Join(base, "staging", spec)
	d, err := c.driver(data.DriverName)
	if err != nil {
		return fmt.Errorf("UnmapDevice failed for volume %s: %w", data.VolumeHandle, err)
	}
	if _, serr := os.Stat(staging); serr == nil && d.StageUnstage {
		if _, err := d.Node.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: data.VolumeHandle, StagingTargetPath: staging}); err != nil {
			return fmt.Errorf("UnmapDevice failed for volume %s: kubernetes.io/csi: blockMapper.unstageVolumeForBlock failed: %w", data.VolumeHandle, err)
		}
	}
	for _, dir := range []string{staging, filepath.Join(base, "publish", spec), filepath.Join(base, spec)} {
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
	}
	c.inUse.signal()
	c.log.Info("Unstaged CSI block volume", "driver", data.DriverName, "volumeHandle", data.VolumeHandle, "stagingTargetPath", staging)
	return nil
}
