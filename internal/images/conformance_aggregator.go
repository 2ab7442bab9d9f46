package images

import (
	"context"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// The Aggregator spec runs k8s.io/sample-apiserver with an etcd beside it in
// one pod (test/e2e/apimachinery/aggregator.go).

// sampleAPIServerImage is test/images/sample-apiserver: the server at
// /sample-apiserver, its entrypoint (over busybox instead of alpine).
func sampleAPIServerImage(ctx context.Context, b *standIns) (v1.Image, error) {
	bin, err := optional(b.nextToAgnhost(b.SampleAPIServer, "sample-apiserver"))
	if err != nil {
		return nil, err
	}
	var l layer
	l.file("sample-apiserver", 0o755, bin)
	return b.onBusybox(ctx, l, "sample-apiserver over busybox", func(c *v1.Config) {
		c.Entrypoint = []string{"/sample-apiserver"}
		c.Cmd = nil
	})
}

// etcdImage is registry.k8s.io/etcd: etcd at /usr/local/bin/etcd, which the
// spec runs by that path (over busybox instead of distroless).
func etcdImage(ctx context.Context, b *standIns) (v1.Image, error) {
	bin, err := optional(b.nextToAgnhost(b.Etcd, "etcd-static"))
	if err != nil {
		return nil, err
	}
	var l layer
	l.file("usr/local/bin/etcd", 0o755, bin)
	return b.onBusybox(ctx, l, "etcd over busybox", func(c *v1.Config) {
		c.Cmd = []string{"/usr/local/bin/etcd"}
	})
}
