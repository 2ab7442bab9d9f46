// Package prober is nodelet-prober: the kubelet's probe manager as a
// daemon. It reads the desired pods (their startup, liveness and readiness
// probes) and the runtime's observed state (which containers run, their IDs
// and the pod IP), runs one worker per probe of every created container
// (exec through CRI ExecSync, httpGet, tcpSocket, grpc), and publishes each
// probe's result to the probes bucket when it changes, with Unhealthy
// events as the kubelet emits them. nodelet-runtime restarts containers on
// liveness and startup failures; nodelet-status derives Ready and Started.
//
// Results follow the kubelet's rules: readiness starts as failure,
// liveness as success, startup as unknown; initialDelaySeconds,
// periodSeconds, timeoutSeconds, successThreshold and failureThreshold as
// in the kubelet; the startup probe gates the other two; a new container ID
// starts over. The bucket is the prober's memory: a restarted prober starts
// from what it published, so it neither resets a ready container nor
// publishes a failure before failureThreshold failures of its own.
//
// Metrics (nodelet_prober_probe_total, nodelet_prober_probe_duration_seconds)
// are in Gatherer.
package prober

import (
	"context"
	"fmt"
	"net"

	utilnet "k8s.io/apimachinery/pkg/util/net"

	"github.com/nodelet/nodelet/internal/cri"
	"github.com/nodelet/nodelet/internal/daemon"
)

// Run serves until ctx is done.
func Run(ctx context.Context, env *daemon.Env) error {
	// Only the runtime service is used.
	clients, err := cri.Dial(ctx, &env.Config.Runtime)
	if err != nil {
		return fmt.Errorf("exec probes need the runtime: %w", err)
	}
	d, err := New(Options{
		Deps:                env.Deps(),
		Runtime:             clients.Runtime,
		HostIP:              hostIP(env.Config.Node.Address),
		MaxConcurrentProbes: env.Config.Prober.MaxConcurrentProbes,
	})
	if err != nil {
		return err
	}
	return d.Run(ctx)
}

// hostIP is the address probed for host-network pods: node.address, or
// the host's default-route address as the kubelet picks its node IP.
func hostIP(configured string) string {
	if configured != "" {
		return configured
	}
	if ip, err := utilnet.ChooseHostInterface(); err == nil {
		return ip.String()
	}
	return net.IPv4(127, 0, 0, 1).String()
}
