package images

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// The CoreDNS stand-in holds what CoreDNS's Dockerfile puts in its image,
// and the cache follows the binary.
func TestCoreDNSImage(t *testing.T) {
	dir := t.TempDir()
	cache := filepath.Join(dir, "cache")
	// Any static binary will do for coredns here: busybox.
	bin := filepath.Join(dir, "coredns")
	data, err := os.ReadFile(DefaultBusybox)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tb, err := BuildCoreDNS(ctx, bin, cache)
	if err != nil {
		t.Fatal(err)
	}
	if tb.Ref != CoreDNSImage || CoreDNSImage != "registry.k8s.io/coredns/coredns:v1.14.6" {
		t.Errorf("ref %q", tb.Ref)
	}

	hdrs, small, cfg := files(t, tb.Path, CoreDNSImage)
	h := hdrs["coredns"]
	if h == nil || h.Mode != 0o755 || h.Size != int64(len(data)) {
		t.Fatalf("/coredns = %+v", h)
	}
	// What `setcap cap_net_bind_service=+ep` leaves on a file
	// (getfattr -e hex -n security.capability).
	const setcapHex = "\x01\x00\x00\x02\x00\x04\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
	if got := h.PAXRecords["SCHILY.xattr.security.capability"]; got != setcapHex {
		t.Errorf("/coredns security.capability = %q, want cap_net_bind_service=+ep", got)
	}
	if !contains(small["etc/passwd"], "nonroot:x:65532:65532:") || !contains(small["etc/group"], "nonroot:x:65532:") {
		t.Errorf("passwd %q group %q", small["etc/passwd"], small["etc/group"])
	}
	if h := dirHeader(hdrs, "home/nonroot"); h == nil || h.Uid != 65532 || h.Mode != 0o700 {
		t.Errorf("/home/nonroot = %+v", h)
	}
	if h := dirHeader(hdrs, "tmp"); h == nil || h.Mode != 0o1777 {
		t.Errorf("/tmp = %+v", h)
	}
	c := cfg.Config
	if len(c.Entrypoint) != 1 || c.Entrypoint[0] != "/coredns" || len(c.Cmd) != 0 || c.User != "65532:65532" || c.WorkingDir != "/" {
		t.Errorf("entrypoint %q cmd %q user %q workdir %q", c.Entrypoint, c.Cmd, c.User, c.WorkingDir)
	}
	if _, tcp := c.ExposedPorts["53/tcp"]; !tcp || len(c.ExposedPorts) != 2 {
		t.Errorf("exposed ports %v, want 53/tcp and 53/udp", c.ExposedPorts)
	}
	if _, udp := c.ExposedPorts["53/udp"]; !udp {
		t.Errorf("exposed ports %v, want 53/udp", c.ExposedPorts)
	}

	// The same binary: the cached tarball, untouched.
	st, err := os.Stat(tb.Path)
	if err != nil {
		t.Fatal(err)
	}
	again, err := BuildCoreDNS(ctx, bin, cache)
	if err != nil {
		t.Fatal(err)
	}
	if st2, err := os.Stat(again.Path); err != nil || again != tb || !st2.ModTime().Equal(st.ModTime()) {
		t.Errorf("second build %+v (%v), want the cached %+v", again, err, tb)
	}
	// Another binary (a new coredns): a new image, the old tarball gone.
	if err := os.WriteFile(bin, append(data, 0), 0o755); err != nil {
		t.Fatal(err)
	}
	other, err := BuildCoreDNS(ctx, bin, cache)
	if err != nil {
		t.Fatal(err)
	}
	if other.Path == tb.Path || other.ID == tb.ID {
		t.Errorf("a changed binary reused %s", tb.Path)
	}
	if _, err := os.Stat(tb.Path); !os.IsNotExist(err) {
		t.Errorf("the old tarball %s is still there (%v)", tb.Path, err)
	}
}

// CoreDNS's image has no libc: a dynamically linked coredns is refused.
func TestCoreDNSImageRejectsDynamicBinary(t *testing.T) {
	if _, err := BuildCoreDNS(context.Background(), "/bin/true", t.TempDir()); err == nil {
		t.Fatal("a dynamically linked binary was accepted")
	}
}
