package csi

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"

	"github.com/nodelet/nodelet/internal/testenv"
	"github.com/nodelet/nodelet/services/runtime/csi/csitest"
)

func statfsSize(t *testing.T, path string) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Blocks) * int64(st.Bsize)
}

func blockSize(t *testing.T, path string) string {
	t.Helper()
	out, err := exec.Command("blockdev", "--getsize64", path).CombinedOutput()
	if err != nil {
		t.Fatalf("blockdev %s: %v: %s", path, err, out)
	}
	return strings.TrimSpace(string(out))
}

// The test driver with EXPAND_VOLUME, over its real socket: the registry
// sees the capability; a raw block volume is staged on a loop device,
// published as that device on a file, grown by NodeExpandVolume and
// detached when unstaged; a filesystem volume is as large as its size
// attribute and NodeExpandVolume grows what its staging and target paths
// show; when the driver stops, nothing of it stays mounted or attached.
func TestTestDriverBlockAndExpansion(t *testing.T) {
	testenv.RequiresRoot(t)
	reg, data, paths := shortDir(t), shortDir(t), shortDir(t)
	r := runRegistry(t, reg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- csitest.Run(ctx, csitest.Config{Name: "grow.csi", NodeID: "n1", Stage: true, Expand: true, DataDir: data, RegistryDir: reg})
	}()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			if err := <-done; err != nil {
				t.Error(err)
			}
		}
	}
	t.Cleanup(stop)
	var d *Driver
	waitUntil(t, "driver registered", func() bool { d, _ = r.Driver("grow.csi"); return d != nil })
	if !d.Expand || !d.StageUnstage {
		t.Fatalf("driver %+v: want EXPAND_VOLUME and STAGE_UNSTAGE_VOLUME", d)
	}
	block := &csipb.VolumeCapability{AccessType: &csipb.VolumeCapability_Block{Block: &csipb.VolumeCapability_BlockVolume{}}}
	mount := &csipb.VolumeCapability{AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{}}}
	size := map[string]string{csitest.SizeKey: strconv.Itoa(16 << 20)}

	staging, target := filepath.Join(paths, "bstage"), filepath.Join(paths, "bdev")
	if _, err := d.Node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: "b1", StagingTargetPath: staging,
		VolumeCapability: block, VolumeContext: size}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Node.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: "b1", StagingTargetPath: staging,
		TargetPath: target, VolumeCapability: block}); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(target); err != nil || fi.Mode()&os.ModeDevice == 0 || blockSize(t, target) != "16777216" {
		t.Fatalf("published %s: %v (%v)", target, fi, err)
	}
	resp, err := d.Node.NodeExpandVolume(ctx, &csipb.NodeExpandVolumeRequest{VolumeId: "b1", VolumePath: target, StagingTargetPath: staging,
		CapacityRange: &csipb.CapacityRange{RequiredBytes: 24 << 20}, VolumeCapability: block})
	if err != nil || resp.CapacityBytes != 24<<20 || blockSize(t, target) != "25165824" {
		t.Fatalf("NodeExpandVolume: %v %v; device %s bytes", resp, err, blockSize(t, target))
	}
	if _, err := d.Node.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: "b1", TargetPath: target}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Node.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: "b1", StagingTargetPath: staging}); err != nil {
		t.Fatal(err)
	}
	if out, _ := exec.Command("losetup", "-j", filepath.Join(data, "volumes", "b1.img")).Output(); len(out) != 0 {
		t.Fatalf("still attached after NodeUnstageVolume: %s", out)
	}

	staging, target = filepath.Join(paths, "fstage"), filepath.Join(paths, "fmount")
	if _, err := d.Node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: "f1", StagingTargetPath: staging,
		VolumeCapability: mount, VolumeContext: size}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Node.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: "f1", StagingTargetPath: staging,
		TargetPath: target, VolumeCapability: mount}); err != nil {
		t.Fatal(err)
	}
	if got := statfsSize(t, target); got != 16<<20 {
		t.Fatalf("filesystem volume of %d bytes, want 16Mi", got)
	}
	if _, err := d.Node.NodeExpandVolume(ctx, &csipb.NodeExpandVolumeRequest{VolumeId: "f1", VolumePath: target, StagingTargetPath: staging,
		CapacityRange: &csipb.CapacityRange{RequiredBytes: 40 << 20}, VolumeCapability: mount}); err != nil {
		t.Fatal(err)
	}
	if a, b := statfsSize(t, target), statfsSize(t, staging); a != 40<<20 || b != 40<<20 {
		t.Fatalf("after NodeExpandVolume: target %d, staging %d bytes; want 40Mi", a, b)
	}
	if _, err := d.Node.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: "f1", TargetPath: target}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Node.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: "f1", StagingTargetPath: staging}); err != nil {
		t.Fatal(err)
	}
	// The volume's tmpfs (its data) stays while the driver runs.
	if ms := testenv.MountsUnder(data); len(ms) != 1 {
		t.Fatalf("driver mounts %v, want the volume's tmpfs", ms)
	}
	stop()
	if ms := testenv.MountsUnder(data); len(ms) != 0 {
		t.Fatalf("mounts left by the driver: %v", ms)
	}
}
