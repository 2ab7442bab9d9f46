// Package cri connects nodelet's daemons to the container runtime through
// k8s.io/cri-client, with a timeout on every call so that one hung call
// cannot stall the rest.
package cri

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	remote "k8s.io/cri-client/pkg"

	"github.com/nodelet/nodelet/internal/config"
)

// Clients are the runtime and image services of one runtime.
type Clients struct {
	Runtime internalapi.RuntimeService
	Image   internalapi.ImageManagerService
}

// Dial connects a daemon to the runtime its config names: runtime.endpoint,
// runtime.imageEndpoint (empty: the runtime's), each call bounded by
// runtime.runtimeRequestTimeout. Every daemon connects through it, and
// every call is counted in the process's kubelet_runtime_operations_*
// (Instrument).
func Dial(ctx context.Context, rc *config.RuntimeConfig) (*Clients, error) {
	c, err := Connect(ctx, rc.Endpoint, rc.ImageEndpoint, rc.RuntimeRequestTimeout)
	if err != nil {
		return nil, err
	}
	c.Runtime, c.Image = Instrument(c.Runtime, c.Image, processOps)
	return c, nil
}

// Connect dials the runtime (and image) endpoint; an empty imageEndpoint is
// the runtime's, and a bare socket path is taken as unix://path. timeout
// bounds the dial and every later call that has no deadline of its own.
func Connect(ctx context.Context, endpoint, imageEndpoint string, timeout time.Duration) (*Clients, error) {
	if imageEndpoint == "" {
		imageEndpoint = endpoint
	}
	endpoint, imageEndpoint = EndpointURL(endpoint), EndpointURL(imageEndpoint)
	rs, err := remote.NewRemoteRuntimeService(ctx, endpoint, timeout, nil, false)
	if err != nil {
		return nil, fmt.Errorf("container runtime at %s: %w", endpoint, err)
	}
	is, err := remote.NewRemoteImageService(ctx, imageEndpoint, timeout, nil, false)
	if err != nil {
		return nil, fmt.Errorf("image service at %s: %w", imageEndpoint, err)
	}
	return &Clients{Runtime: rs, Image: is}, nil
}

// EndpointURL is endpoint as the unix:// URL cri-client dials: a bare
// socket path gets the scheme, anything else is returned as it is.
func EndpointURL(endpoint string) string {
	if strings.HasPrefix(endpoint, "/") {
		return "unix://" + endpoint
	}
	return endpoint
}

// Check says whether the runtime at endpoint answers: the socket exists,
// accepts connections, and CRI Version succeeds. The error says which step
// failed, for the daemons' start-up permission check.
func Check(ctx context.Context, endpoint string) (*runtimeapi.VersionResponse, error) {
	path := strings.TrimPrefix(endpoint, "unix://")
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("container runtime socket %s: %w", path, err)
	}
	conn, err := net.DialTimeout("unix", path, 2*time.Second)
	if err != nil {
		return nil, fmt.Errorf("container runtime socket %s does not accept connections: %w", path, err)
	}
	_ = conn.Close()
	c, err := Connect(ctx, endpoint, "", 5*time.Second)
	if err != nil {
		return nil, err
	}
	v, err := c.Runtime.Version(ctx, "v1")
	if err != nil {
		return nil, fmt.Errorf("container runtime at %s does not answer CRI Version: %w", endpoint, err)
	}
	return v, nil
}
