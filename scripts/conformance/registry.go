package main

import (
	"context"
	"fmt"
	"io"
	stdlog "log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/nodelet/nodelet/internal/images"
)

// localRegistry stands in for registry.k8s.io on the host, so the specs that
// pull (imagePullPolicy Always) pull the stand-ins, offline.
type localRegistry struct {
	addr string
	srv  *http.Server
}

// mirrored are the registries the suite's images name; each is sent to the
// local registry, which answers "not found" for what it does not hold (the
// invalid-registry spec expects a failed pull), so no pull leaves the machine.
var mirrored = []string{"registry.k8s.io", "invalid.registry.k8s.io", "gcr.io", "docker.io", "registry-1.docker.io"}

// serveRegistry serves tars on a free port of ip: the host's address on
// the cluster's bridge, which every node reaches.
func serveRegistry(ctx context.Context, ip string, tars []images.Tarball) (*localRegistry, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		return nil, err
	}
	r := &localRegistry{addr: l.Addr().String(), srv: &http.Server{Handler: registry.New(registry.Logger(stdlog.New(io.Discard, "", 0)))}}
	go func() { _ = r.srv.Serve(l) }()
	for _, t := range tars {
		// registry.k8s.io/e2e-test-images/busybox:1.37.0-2 → <addr>/e2e-test-images/busybox:1.37.0-2
		_, repo, ok := strings.Cut(t.Ref, "/")
		if !ok {
			continue
		}
		dst, err := name.ParseReference(r.addr+"/"+repo, name.Insecure)
		if err != nil {
			r.close()
			return nil, err
		}
		tag, err := name.NewTag(t.Ref)
		if err != nil {
			r.close()
			return nil, err
		}
		img, err := tarball.ImageFromPath(t.Path, &tag)
		if err != nil {
			r.close()
			return nil, err
		}
		if err := remote.Write(dst, img, remote.WithContext(ctx)); err != nil {
			r.close()
			return nil, fmt.Errorf("push %s to the local registry: %w", t.Ref, err)
		}
	}
	return r, nil
}

func (r *localRegistry) close() { _ = r.srv.Close() }

// writeHosts writes containerd's registry hosts directory: every mirrored
// registry resolves and pulls from the local one, and only from it.
func (r *localRegistry) writeHosts(dir string) error {
	for _, host := range mirrored {
		d := filepath.Join(dir, host)
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
		body := fmt.Sprintf("server = %q\n\n[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n", "http://"+r.addr, "http://"+r.addr)
		if err := os.WriteFile(filepath.Join(d, "hosts.toml"), []byte(body), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// missingImages lists the images `e2e.test --list-images` names that have
// no stand-in. The list covers every spec of the binary, so an image here
// fails only the specs that use it.
func missingImages(ctx context.Context, e2e string, have []string) ([]string, error) {
	out, err := exec.CommandContext(ctx, e2e, "--list-images").Output()
	if err != nil {
		return nil, err
	}
	var missing []string
	for _, ref := range strings.Fields(string(out)) {
		if !slices.Contains(have, ref) {
			missing = append(missing, ref)
		}
	}
	return missing, nil
}
