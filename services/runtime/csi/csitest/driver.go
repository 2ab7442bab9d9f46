// Package csitest is a small CSI node plugin for tests: a bind-mount
// driver speaking real CSI gRPC over a unix socket, registering itself
// through the kubelet's plugin-registration socket as
// csi-node-driver-registrar does. Tests run it as its own process (Start
// re-executes the test binary; the test's TestMain calls MainIfDriver).
//
// A volume's data is the directory <DataDir>/volumes/<volumeID>.
// NodeStageVolume bind-mounts it on the staging path, NodePublishVolume
// bind-mounts the staging path (or the data directory, without staging) on
// the target path, read-only when asked. A raw block volume is an image on
// a loop device (loop.go); with Expand, NodeExpandVolume grows volumes.
// Every call is appended to <DataDir>/calls.log so tests can count them.
package csitest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"k8s.io/mount-utils"
)

// TopologyKey is the topology segment the driver reports (value: node ID).
const TopologyKey = "topology.csitest.nodelet.io/node"

// Config describes one driver process.
type Config struct {
	// Name is the driver's name.
	Name string
	// NodeID is what NodeGetInfo answers.
	NodeID string
	// MaxVolumes is max_volumes_per_node (0: no limit).
	MaxVolumes int64
	// Stage: the driver has STAGE_UNSTAGE_VOLUME.
	Stage bool
	// Expand: the driver has EXPAND_VOLUME; a filesystem volume is a tmpfs
	// of its size (SizeKey), which NodeExpandVolume grows.
	Expand bool
	// DataDir holds the volumes' data, the CSI socket and calls.log.
	DataDir string
	// RegistryDir is the node's plugins_registry directory.
	RegistryDir string
}

// CSISocket is where the driver serves CSI.
func (c Config) CSISocket() string { return filepath.Join(c.DataDir, "csi.sock") }

// RegistrationSocket is the socket the node finds in its registry.
func (c Config) RegistrationSocket() string {
	return filepath.Join(c.RegistryDir, c.Name+"-reg.sock")
}

// Run serves until ctx ends.
func Run(ctx context.Context, cfg Config) error {
	if err := os.MkdirAll(filepath.Join(cfg.DataDir, "volumes"), 0o755); err != nil {
		return err
	}
	d := &driver{cfg: cfg, mounter: mount.NewWithoutSystemd("")}
	csiSrv := grpc.NewServer()
	csipb.RegisterIdentityServer(csiSrv, d)
	csipb.RegisterNodeServer(csiSrv, d)
	regSrv := grpc.NewServer()
	registerapi.RegisterRegistrationServer(regSrv, &registrar{d: d})
	var lns []net.Listener
	for _, s := range []struct {
		path string
		srv  *grpc.Server
	}{{cfg.CSISocket(), csiSrv}, {cfg.RegistrationSocket(), regSrv}} {
		if len(s.path) > 107 {
			return fmt.Errorf("socket path %s is longer than a unix socket address allows (107)", s.path)
		}
		_ = os.Remove(s.path)
		ln, err := net.Listen("unix", s.path)
		if err != nil {
			return err
		}
		lns = append(lns, ln)
		go func(srv *grpc.Server) { _ = srv.Serve(ln) }(s.srv)
	}
	<-ctx.Done()
	defer d.cleanup()
	// The registrar removes its socket when it stops: the node deregisters
	// the driver.
	regSrv.Stop()
	csiSrv.Stop()
	_ = os.Remove(cfg.RegistrationSocket())
	_ = os.Remove(cfg.CSISocket())
	return nil
}

const envConfig = "NODELET_CSITEST_DRIVER"

// MainIfDriver runs the driver and exits when this process was started by
// Start; otherwise it returns. Call it first in TestMain.
func MainIfDriver() {
	raw := os.Getenv(envConfig)
	if raw == "" {
		return
	}
	var cfg Config
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "csitest:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := Run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "csitest:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

type driver struct {
	csipb.UnimplementedIdentityServer
	csipb.UnimplementedNodeServer
	cfg     Config
	mounter mount.Interface
	logMu   sync.Mutex
}

// Call is one line of calls.log.
type Call struct {
	Method   string `json:"method"`
	VolumeID string `json:"volumeID"`
	Path     string `json:"path,omitempty"`
	Staging  string `json:"staging,omitempty"`
	ReadOnly bool   `json:"readOnly,omitempty"`
	// Block: the capability was a raw block device.
	Block bool `json:"block,omitempty"`
	// Bytes is NodeExpandVolume's required size.
	Bytes int64 `json:"bytes,omitempty"`
	// Context is the volume context (publish) and PublishContext the
	// publish context NodeStage/NodePublish received.
	Context        map[string]string `json:"context,omitempty"`
	PublishContext map[string]string `json:"publishContext,omitempty"`
}

func (d *driver) record(c Call) {
	d.logMu.Lock()
	defer d.logMu.Unlock()
	b, _ := json.Marshal(c)
	f, err := os.OpenFile(filepath.Join(d.cfg.DataDir, "calls.log"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	_, _ = f.Write(append(b, '\n'))
}

func (d *driver) GetPluginInfo(context.Context, *csipb.GetPluginInfoRequest) (*csipb.GetPluginInfoResponse, error) {
	return &csipb.GetPluginInfoResponse{Name: d.cfg.Name, VendorVersion: "0.1"}, nil
}

func (d *driver) GetPluginCapabilities(context.Context, *csipb.GetPluginCapabilitiesRequest) (*csipb.GetPluginCapabilitiesResponse, error) {
	return &csipb.GetPluginCapabilitiesResponse{}, nil
}

func (d *driver) Probe(context.Context, *csipb.ProbeRequest) (*csipb.ProbeResponse, error) {
	return &csipb.ProbeResponse{}, nil
}

func (d *driver) NodeGetInfo(context.Context, *csipb.NodeGetInfoRequest) (*csipb.NodeGetInfoResponse, error) {
	return &csipb.NodeGetInfoResponse{NodeId: d.cfg.NodeID, MaxVolumesPerNode: d.cfg.MaxVolumes,
		AccessibleTopology: &csipb.Topology{Segments: map[string]string{TopologyKey: d.cfg.NodeID}}}, nil
}

func (d *driver) NodeGetCapabilities(context.Context, *csipb.NodeGetCapabilitiesRequest) (*csipb.NodeGetCapabilitiesResponse, error) {
	rpc := func(t csipb.NodeServiceCapability_RPC_Type) *csipb.NodeServiceCapability {
		return &csipb.NodeServiceCapability{Type: &csipb.NodeServiceCapability_Rpc{Rpc: &csipb.NodeServiceCapability_RPC{Type: t}}}
	}
	caps := []*csipb.NodeServiceCapability{rpc(csipb.NodeServiceCapability_RPC_GET_VOLUME_STATS)}
	if d.cfg.Stage {
		caps = append(caps, rpc(csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME))
	}
	if d.cfg.Expand {
		caps = append(caps, rpc(csipb.NodeServiceCapability_RPC_EXPAND_VOLUME))
	}
	return &csipb.NodeGetCapabilitiesResponse{Capabilities: caps}, nil
}

// dataDir is a filesystem volume's data directory, made when missing
// (with Expand, a tmpfs of the size attrs say).
func (d *driver) dataDir(id string, attrs map[string]string) (string, error) {
	if id == "" || filepath.Base(id) != id || id == "." || id == ".." {
		return "", status.Errorf(codes.InvalidArgument, "bad volume ID %q", id)
	}
	dir := filepath.Join(d.cfg.DataDir, "volumes", id)
	if err := os.MkdirAll(dir, 0o777); err != nil || !d.cfg.Expand {
		return dir, err
	}
	return dir, d.sizedDataDir(dir, attrs)
}

// bind bind-mounts src on target unless something is mounted there.
func (d *driver) bind(src, target string, readOnly bool) error {
	if err := os.MkdirAll(target, 0o750); err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	if mounted, err := d.mounter.IsMountPoint(target); err != nil {
		return status.Error(codes.Internal, err.Error())
	} else if mounted {
		return nil
	}
	opts := []string{"bind"}
	if readOnly {
		opts = append(opts, "ro")
	}
	if err := d.mounter.Mount(src, target, "", opts); err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	return nil
}

func (d *driver) unbind(target string) error {
	for {
		mounted, err := d.mounter.IsMountPoint(target)
		if os.IsNotExist(err) || (err == nil && !mounted) {
			return nil
		}
		if err != nil {
			return status.Error(codes.Internal, err.Error())
		}
		if err := unix.Unmount(target, 0); err != nil {
			return status.Error(codes.Internal, err.Error())
		}
	}
}

func (d *driver) NodeStageVolume(_ context.Context, req *csipb.NodeStageVolumeRequest) (*csipb.NodeStageVolumeResponse, error) {
	d.record(Call{Method: "NodeStageVolume", VolumeID: req.GetVolumeId(), Path: req.GetStagingTargetPath(), PublishContext: req.GetPublishContext(),
		Block: req.GetVolumeCapability().GetBlock() != nil})
	if !d.cfg.Stage {
		return nil, status.Error(codes.Unimplemented, "no STAGE_UNSTAGE_VOLUME")
	}
	if req.GetStagingTargetPath() == "" {
		return nil, status.Error(codes.InvalidArgument, "staging target path missing")
	}
	if req.GetVolumeCapability().GetBlock() != nil {
		return &csipb.NodeStageVolumeResponse{}, d.stageBlock(req)
	}
	src, err := d.dataDir(req.GetVolumeId(), req.GetVolumeContext())
	if err != nil {
		return nil, err
	}
	return &csipb.NodeStageVolumeResponse{}, d.bind(src, req.GetStagingTargetPath(), false)
}

func (d *driver) NodeUnstageVolume(_ context.Context, req *csipb.NodeUnstageVolumeRequest) (*csipb.NodeUnstageVolumeResponse, error) {
	d.record(Call{Method: "NodeUnstageVolume", VolumeID: req.GetVolumeId(), Path: req.GetStagingTargetPath()})
	if err := d.unbind(req.GetStagingTargetPath()); err != nil {
		return nil, err
	}
	return &csipb.NodeUnstageVolumeResponse{}, d.detach(req.GetVolumeId())
}

func (d *driver) NodePublishVolume(_ context.Context, req *csipb.NodePublishVolumeRequest) (*csipb.NodePublishVolumeResponse, error) {
	d.record(Call{Method: "NodePublishVolume", VolumeID: req.GetVolumeId(), Path: req.GetTargetPath(), Staging: req.GetStagingTargetPath(),
		ReadOnly: req.GetReadonly(), Context: req.GetVolumeContext(), PublishContext: req.GetPublishContext(),
		Block: req.GetVolumeCapability().GetBlock() != nil})
	if req.GetVolumeCapability().GetBlock() != nil {
		return &csipb.NodePublishVolumeResponse{}, d.publishBlock(req)
	}
	src := req.GetStagingTargetPath()
	if src != "" {
		// Staged (inline ephemeral volumes never are).
		if mounted, err := d.mounter.IsMountPoint(src); err != nil || !mounted {
			return nil, status.Errorf(codes.FailedPrecondition, "volume %s is not staged at %s", req.GetVolumeId(), src)
		}
	} else {
		var err error
		if src, err = d.dataDir(req.GetVolumeId(), req.GetVolumeContext()); err != nil {
			return nil, err
		}
	}
	if req.GetTargetPath() == "" {
		return nil, status.Error(codes.InvalidArgument, "target path missing")
	}
	return &csipb.NodePublishVolumeResponse{}, d.bind(src, req.GetTargetPath(), req.GetReadonly())
}

func (d *driver) NodeUnpublishVolume(_ context.Context, req *csipb.NodeUnpublishVolumeRequest) (*csipb.NodeUnpublishVolumeResponse, error) {
	d.record(Call{Method: "NodeUnpublishVolume", VolumeID: req.GetVolumeId(), Path: req.GetTargetPath()})
	if err := d.unbind(req.GetTargetPath()); err != nil {
		return nil, err
	}
	// The SP removes the target it created.
	if err := os.Remove(req.GetTargetPath()); err != nil && !os.IsNotExist(err) {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csipb.NodeUnpublishVolumeResponse{}, nil
}

func (d *driver) NodeExpandVolume(_ context.Context, req *csipb.NodeExpandVolumeRequest) (*csipb.NodeExpandVolumeResponse, error) {
	d.record(Call{Method: "NodeExpandVolume", VolumeID: req.GetVolumeId(), Path: req.GetVolumePath(), Staging: req.GetStagingTargetPath(),
		Bytes: req.GetCapacityRange().GetRequiredBytes(), Block: req.GetVolumeCapability().GetBlock() != nil})
	if !d.cfg.Expand {
		return nil, status.Error(codes.Unimplemented, "no EXPAND_VOLUME")
	}
	n, err := d.expand(req)
	if err != nil {
		return nil, err
	}
	return &csipb.NodeExpandVolumeResponse{CapacityBytes: n}, nil
}

func (d *driver) NodeGetVolumeStats(_ context.Context, req *csipb.NodeGetVolumeStatsRequest) (*csipb.NodeGetVolumeStatsResponse, error) {
	d.record(Call{Method: "NodeGetVolumeStats", VolumeID: req.GetVolumeId(), Path: req.GetVolumePath()})
	if size, ok := blockSize(req.GetVolumePath()); ok {
		// A raw block volume: its size, as csi-driver-host-path answers.
		return &csipb.NodeGetVolumeStatsResponse{Usage: []*csipb.VolumeUsage{{Unit: csipb.VolumeUsage_BYTES, Total: size}}}, nil
	}
	var st unix.Statfs_t
	if err := unix.Statfs(req.GetVolumePath(), &st); err != nil {
		return nil, status.Error(codes.NotFound, err.Error())
	}
	bs := int64(st.Bsize)
	return &csipb.NodeGetVolumeStatsResponse{Usage: []*csipb.VolumeUsage{
		{Unit: csipb.VolumeUsage_BYTES, Total: int64(st.Blocks) * bs, Available: int64(st.Bavail) * bs, Used: int64(st.Blocks-st.Bfree) * bs},
		{Unit: csipb.VolumeUsage_INODES, Total: int64(st.Files), Available: int64(st.Ffree), Used: int64(st.Files - st.Ffree)},
	}}, nil
}

// blockSize is the size of the block device at path, if it is one.
func blockSize(path string) (int64, bool) {
	fi, err := os.Stat(path)
	if err != nil || fi.Mode()&os.ModeDevice == 0 || fi.Mode()&os.ModeCharDevice != 0 {
		return 0, false
	}
	f, err := os.Open(path)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	size, err := f.Seek(0, io.SeekEnd)
	return size, err == nil
}

// registrar is node-driver-registrar's registration service.
type registrar struct {
	registerapi.UnimplementedRegistrationServer
	d *driver
}

func (r *registrar) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{Type: registerapi.CSIPlugin, Name: r.d.cfg.Name,
		Endpoint: r.d.cfg.CSISocket(), SupportedVersions: []string{"1.0.0"}}, nil
}

func (r *registrar) NotifyRegistrationStatus(_ context.Context, s *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	r.d.record(Call{Method: "NotifyRegistrationStatus", Path: fmt.Sprintf("registered=%v error=%q", s.GetPluginRegistered(), s.GetError())})
	return &registerapi.RegistrationStatusResponse{}, nil
}
