package cluster

import (
	"context"
	"time"
)

// startDNS deploys cluster DNS as kubeadm's addon does (InstallDNS) and
// waits for it to be available.
func (c *Cluster) startDNS(ctx context.Context) error {
	if err := InstallDNS(ctx, c.Admin, DNSOptions{Image: c.o.DNSImage, ClusterIP: DNSServiceIP, Domain: ClusterDomain}); err != nil {
		return err
	}
	return WaitDNS(ctx, c.Admin, 3*time.Minute)
}
