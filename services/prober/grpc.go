package prober

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// grpcProber runs grpc probes: grpc.health.v1.Health/Check with the probe's
// service name, in plain text, like the kubelet's pkg/probe/grpc (and
// grpc_health_probe). Every problem is a failure, with the kubelet's
// messages. TLS mode (GRPCContainerProbeTLS) is alpha and off in the
// kubelet, and not done here.
type grpcProber struct{}

func (grpcProber) probe(ctx context.Context, host, service string, port int, timeout time.Duration) (outcome, string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	// DialContext with WithBlock (deprecated in grpc-go, still supported)
	// gives the kubelet's distinction between "cannot connect" and "the
	// health RPC failed".
	conn, err := grpc.DialContext(ctx, addr, //nolint:staticcheck // see above
		grpc.WithUserAgent(userAgent),
		grpc.WithBlock(), //nolint:staticcheck // see above
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return probeDialer().DialContext(ctx, "tcp", addr)
		}),
	)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return outcomeFailure, fmt.Sprintf("timeout: failed to connect service %q within %v: %+v", addr, timeout, err), nil
		}
		return outcomeFailure, fmt.Sprintf("error: failed to connect service at %q: %+v", addr, err), nil
	}
	defer func() { _ = conn.Close() }()

	resp, err := healthpb.NewHealthClient(conn).Check(metadata.NewOutgoingContext(ctx, metadata.MD{}),
		&healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		if st, ok := status.FromError(err); ok {
			switch st.Code() {
			case codes.Unimplemented:
				return outcomeFailure, fmt.Sprintf("error: this server does not implement the grpc health protocol (grpc.health.v1.Health): %s", st.Message()), nil
			case codes.DeadlineExceeded:
				return outcomeFailure, fmt.Sprintf("timeout: health rpc did not complete within %v", timeout), nil
			}
		}
		return outcomeFailure, fmt.Sprintf("error: health rpc probe failed: %+v", err), nil
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return outcomeFailure, fmt.Sprintf("service unhealthy (responded with %q)", resp.GetStatus().String()), nil
	}
	return outcomeSuccess, "service healthy", nil
}
