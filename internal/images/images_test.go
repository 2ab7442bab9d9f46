package images

import (
	"archive/tar"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func TestBuildIsReproducible(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	for _, b := range []struct {
		ref   string
		build func(string) (Tarball, error)
	}{
		{PauseImage, func(p string) (Tarball, error) { return BuildPause(ctx, "", p) }},
		{BusyboxImage, func(p string) (Tarball, error) { return BuildBusybox(ctx, "", p) }},
	} {
		first, err := b.build(filepath.Join(dir, "1.tar"))
		if err != nil {
			t.Fatalf("build %s: %v", b.ref, err)
		}
		second, err := b.build(filepath.Join(dir, "2.tar"))
		if err != nil {
			t.Fatalf("build %s again: %v", b.ref, err)
		}
		if first.ID != second.ID || first.Digest != second.Digest {
			t.Errorf("%s: two builds differ: %+v vs %+v", b.ref, first, second)
		}
		loaded, err := Load(second.Path, b.ref)
		if err != nil {
			t.Fatalf("load %s: %v", second.Path, err)
		}
		if loaded.ID != first.ID || loaded.Digest != first.Digest {
			t.Errorf("%s: the tarball holds %+v, the build reported %+v", b.ref, loaded, first)
		}
		one, _ := os.ReadFile(first.Path)
		two, _ := os.ReadFile(second.Path)
		if string(one) != string(two) {
			t.Errorf("%s: the two tarballs are not byte-identical", b.ref)
		}
	}
}

func TestEnsureImagesUsesCache(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	first, err := EnsureImages(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(first) != 2 || first[0].Ref != PauseImage || first[1].Ref != BusyboxImage {
		t.Fatalf("EnsureImages = %+v", first)
	}
	st, _ := os.Stat(first[1].Path)
	again, err := EnsureImages(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	st2, _ := os.Stat(again[1].Path)
	if !os.SameFile(st, st2) || again[0].Digest != first[0].Digest || again[1].Digest != first[1].Digest {
		t.Fatalf("second EnsureImages rebuilt: %+v vs %+v", again, first)
	}
}

// files lists the single layer of the image in a tarball.
func files(t *testing.T, p, ref string) (map[string]*tar.Header, map[string]string, *v1.ConfigFile) {
	t.Helper()
	tag, _ := name.NewTag(ref)
	img, err := tarball.ImageFromPath(p, &tag)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	rc := mutate.Extract(img)
	defer rc.Close()
	hdrs := map[string]*tar.Header{}
	small := map[string]string{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		hdrs[h.Name] = h
		if h.Typeflag == tar.TypeReg && h.Size < 4096 {
			b, _ := io.ReadAll(tr)
			small[h.Name] = string(b)
		}
	}
	return hdrs, small, cfg
}

func TestBusyboxContent(t *testing.T) {
	p := filepath.Join(t.TempDir(), "bb.tar")
	if _, err := BuildBusybox(context.Background(), "", p); err != nil {
		t.Fatal(err)
	}
	hdrs, small, cfg := files(t, p, BusyboxImage)
	for _, applet := range []string{"bin/sh", "bin/sleep", "bin/cat", "usr/sbin/httpd", "usr/bin/nc", "usr/bin/wget"} {
		h, ok := hdrs[applet]
		if !ok || h.Typeflag != tar.TypeSymlink || h.Linkname != "/bin/busybox" {
			t.Errorf("%s: %+v, want a symlink to /bin/busybox", applet, h)
		}
	}
	if h := hdrs["bin/busybox"]; h == nil || h.Mode != 0o755 || h.Size < 1<<20 {
		t.Errorf("bin/busybox = %+v", h)
	}
	if h := dirHeader(hdrs, "tmp"); h == nil || h.Mode != 0o1777 {
		t.Errorf("tmp/ = %+v, want mode 1777", h)
	}
	if small["www/index.html"] != IndexHTML {
		t.Errorf("www/index.html = %q", small["www/index.html"])
	}
	if got := small["etc/passwd"]; got == "" || !contains(got, "nobody:x:65534:65534:") || !contains(got, "root:x:0:0:") {
		t.Errorf("etc/passwd = %q", got)
	}
	if got := small["etc/group"]; !contains(got, "nobody:x:65534:") {
		t.Errorf("etc/group = %q", got)
	}
	if len(cfg.Config.Cmd) != 1 || cfg.Config.Cmd[0] != "/bin/sh" {
		t.Errorf("cmd = %q", cfg.Config.Cmd)
	}
}

func TestPauseContent(t *testing.T) {
	p := filepath.Join(t.TempDir(), "pause.tar")
	if _, err := BuildPause(context.Background(), "", p); err != nil {
		t.Fatal(err)
	}
	hdrs, _, cfg := files(t, p, PauseImage)
	if h := hdrs["pause"]; h == nil || h.Mode != 0o755 {
		t.Errorf("/pause = %+v", h)
	}
	if len(cfg.Config.Entrypoint) != 1 || cfg.Config.Entrypoint[0] != "/pause" {
		t.Errorf("entrypoint = %q", cfg.Config.Entrypoint)
	}
}

func TestRejectsDynamicBinary(t *testing.T) {
	// /usr/bin/env is dynamically linked on Debian.
	if _, err := PauseImageFrom("/usr/bin/env"); err == nil || !contains(err.Error(), "dynamically linked") {
		t.Fatalf("PauseImageFrom(/usr/bin/env) = %v, want a dynamic-linking error", err)
	}
}

func TestDefaultCacheDir(t *testing.T) {
	t.Setenv("NODELET_CACHE", "/x/y")
	if got := DefaultCacheDir(); got != "/x/y/images" {
		t.Errorf("DefaultCacheDir = %q", got)
	}
	t.Setenv("NODELET_CACHE", "")
	t.Setenv("HOME", "/home/z")
	if got := DefaultCacheDir(); got != "/home/z/.cache/nodelet/images" {
		t.Errorf("DefaultCacheDir = %q", got)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// dirHeader finds a directory entry with or without its trailing slash.
func dirHeader(hdrs map[string]*tar.Header, name string) *tar.Header {
	if h, ok := hdrs[name+"/"]; ok {
		return h
	}
	return hdrs[name]
}
