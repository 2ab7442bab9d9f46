package prober

import (
	"context"
	"net"
	"strconv"
	"time"
)

// tcpProber runs tcpSocket probes: success when a connection opens within
// the timeout (the kubelet's pkg/probe/tcp).
type tcpProber struct{}

func (tcpProber) probe(ctx context.Context, host string, port int, timeout time.Duration) (outcome, string, error) {
	d := probeDialer()
	d.Timeout = timeout
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		// Errors (timeouts included) are failures.
		return outcomeFailure, err.Error(), nil
	}
	_ = conn.Close()
	return outcomeSuccess, "", nil
}
