package images

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// The sample device plugin's stand-in holds the binary where its
// Dockerfile puts it, with its entrypoint, over busybox (a shell, /tmp).
func TestSampleDevicePluginImage(t *testing.T) {
	dir := t.TempDir()
	// Any static binary will do here: busybox.
	bin := filepath.Join(dir, "sample-device-plugin")
	data, err := os.ReadFile(DefaultBusybox)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	tb, err := BuildSampleDevicePlugin(context.Background(), bin, filepath.Join(dir, "cache"))
	if err != nil {
		t.Fatal(err)
	}
	if tb.Ref != "registry.k8s.io/e2e-test-images/sample-device-plugin:1.7" {
		t.Errorf("ref %q", tb.Ref)
	}
	hdrs, _, cfg := files(t, tb.Path, SampleDevicePluginImage)
	if h := hdrs["sampledeviceplugin"]; h == nil || h.Mode != 0o755 || h.Size != int64(len(data)) {
		t.Fatalf("/sampledeviceplugin = %+v", h)
	}
	if hdrs["tmp"] == nil || hdrs["bin/sh"] == nil {
		t.Fatalf("no /tmp or /bin/sh in the image")
	}
	if !slices.Equal(cfg.Config.Entrypoint, []string{"/sampledeviceplugin", "-alsologtostderr"}) || len(cfg.Config.Cmd) != 0 {
		t.Fatalf("entrypoint %v cmd %v", cfg.Config.Entrypoint, cfg.Config.Cmd)
	}
	again, err := BuildSampleDevicePlugin(context.Background(), bin, filepath.Join(dir, "cache"))
	if err != nil || again.ID != tb.ID || again.Path != tb.Path {
		t.Fatalf("a second build is not the cached one: %+v %v", again, err)
	}
}
