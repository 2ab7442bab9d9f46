package csi

import (
	"context"
	"fmt"
	"strings"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// callTimeout bounds the registration calls (GetInfo, NodeGetInfo,
// NodeGetCapabilities), as the kubelet's plugin client timeout.
const callTimeout = 10 * time.Second

// dial connects to a unix socket given as a path or unix:// URL. The
// connection is made lazily by gRPC.
func dial(endpoint string) (*grpc.ClientConn, error) {
	path := strings.TrimPrefix(strings.TrimPrefix(endpoint, "unix://"), "unix:")
	if path == "" {
		return nil, fmt.Errorf("empty endpoint")
	}
	return grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
}

// Driver is a registered CSI node plugin.
type Driver struct {
	// Name is the driver's name (GetInfo's, which the CSIDriver object and
	// PVs name).
	Name string
	// Endpoint is the unix socket of its CSI services.
	Endpoint string
	// NodeID, Topology and MaxVolumes are what NodeGetInfo answered.
	NodeID     string
	Topology   map[string]string
	MaxVolumes int64
	// StageUnstage: the driver has the STAGE_UNSTAGE_VOLUME capability
	// (volumes are staged once per node before they are published).
	StageUnstage bool
	// VolumeStats: the driver has GET_VOLUME_STATS.
	VolumeStats bool
	// Expand: the driver has EXPAND_VOLUME (NodeExpandVolume grows a
	// resized volume's filesystem on the node).
	Expand bool
	// Node is the driver's CSI Node service.
	Node csipb.NodeClient

	conn   *grpc.ClientConn
	socket string
}

// connectDriver dials the CSI endpoint and asks the driver about itself.
func connectDriver(ctx context.Context, name, endpoint string) (*Driver, error) {
	conn, err := dial(endpoint)
	if err != nil {
		return nil, fmt.Errorf("failed to create CSI client for driver %q: %w", name, err)
	}
	d := &Driver{Name: name, Endpoint: endpoint, Node: csipb.NewNodeClient(conn), conn: conn}
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	info, err := d.Node.NodeGetInfo(cctx, &csipb.NodeGetInfoRequest{})
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("failed to get NodeGetInfo from driver %q: %w", name, err)
	}
	d.NodeID, d.MaxVolumes = info.GetNodeId(), info.GetMaxVolumesPerNode()
	if t := info.GetAccessibleTopology(); t != nil {
		d.Topology = t.GetSegments()
	}
	if d.NodeID == "" {
		conn.Close()
		return nil, fmt.Errorf("failed to get NodeGetInfo from driver %q: node ID is empty", name)
	}
	caps, err := d.Node.NodeGetCapabilities(cctx, &csipb.NodeGetCapabilitiesRequest{})
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("failed to get NodeGetCapabilities from driver %q: %w", name, err)
	}
	for _, c := range caps.GetCapabilities() {
		switch c.GetRpc().GetType() {
		case csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME:
			d.StageUnstage = true
		case csipb.NodeServiceCapability_RPC_GET_VOLUME_STATS:
			d.VolumeStats = true
		case csipb.NodeServiceCapability_RPC_EXPAND_VOLUME:
			d.Expand = true
		}
	}
	return d, nil
}

func (d *Driver) close() {
	if d.conn != nil {
		_ = d.conn.Close()
	}
}
