package images

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// The DRA test driver's image holds the binary at /dra-test-driver, its
// entrypoint, over busybox (a shell); a second build is the cached one,
// and another binary is another image.
func TestDRATestDriverImage(t *testing.T) {
	dir := t.TempDir()
	// Any static binary will do here: busybox.
	bin := filepath.Join(dir, "dra-test-driver")
	data, err := os.ReadFile(DefaultBusybox)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(dir, "cache")
	tb, err := BuildDRATestDriver(context.Background(), bin, cache)
	if err != nil {
		t.Fatal(err)
	}
	if tb.Ref != "nodelet.local/dra-test-driver:v1.37.2" {
		t.Errorf("ref %q", tb.Ref)
	}
	hdrs, _, cfg := files(t, tb.Path, DRATestDriverImage)
	if h := hdrs["dra-test-driver"]; h == nil || h.Mode != 0o755 || h.Size != int64(len(data)) {
		t.Fatalf("/dra-test-driver = %+v", h)
	}
	if hdrs["bin/sh"] == nil {
		t.Fatalf("no /bin/sh in the image")
	}
	if !slices.Equal(cfg.Config.Entrypoint, []string{"/dra-test-driver"}) || len(cfg.Config.Cmd) != 0 {
		t.Fatalf("entrypoint %v cmd %v", cfg.Config.Entrypoint, cfg.Config.Cmd)
	}
	again, err := BuildDRATestDriver(context.Background(), bin, cache)
	if err != nil || again.ID != tb.ID || again.Path != tb.Path {
		t.Fatalf("a second build is not the cached one: %+v %v", again, err)
	}
	// Another binary: another tarball, the stale one removed.
	if err := os.WriteFile(bin, append(data, 0), 0o755); err != nil {
		t.Fatal(err)
	}
	other, err := BuildDRATestDriver(context.Background(), bin, cache)
	if err != nil {
		t.Fatal(err)
	}
	if other.Path == tb.Path || other.ID == tb.ID {
		t.Fatalf("another binary gave the same image: %+v", other)
	}
	if _, err := os.Stat(tb.Path); !os.IsNotExist(err) {
		t.Fatalf("the stale tarball %s is still there: %v", tb.Path, err)
	}
}
