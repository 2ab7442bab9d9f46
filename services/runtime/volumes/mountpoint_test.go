package volumes

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// isMountPoint tells a mount at the path itself, a bind mount of the same
// file system included, from a plain directory, a directory under a mount
// and a missing path.
func TestIsMountPoint(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount")
	}
	root := t.TempDir()
	dir := func(name string) string {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	mount := func(src, target, fstype string, flags uintptr) {
		if err := unix.Mount(src, target, fstype, flags, ""); err != nil {
			t.Fatalf("mount %s: %v", target, err)
		}
		t.Cleanup(func() { _ = unix.Unmount(target, unix.MNT_DETACH) })
	}
	tmpfs, bind, plain := dir("tmpfs"), dir("bind"), dir("plain")
	mount("tmpfs", tmpfs, "tmpfs", 0)
	mount(dir("src"), bind, "", unix.MS_BIND)
	under := filepath.Join(tmpfs, "under")
	if err := os.Mkdir(under, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path string
		want bool
	}{
		{tmpfs, true},
		{bind, true},
		{plain, false},
		{under, false},
		{filepath.Join(root, "missing"), false},
	} {
		got, err := isMountPoint(tc.path)
		if err != nil || got != tc.want {
			t.Errorf("isMountPoint(%s) = %v, %v; want %v", filepath.Base(tc.path), got, err, tc.want)
		}
	}
}

// BenchmarkIsMountPoint: the check against reading the node's mountinfo,
// as it was made before, on this machine's mounts (a node with pods has
// hundreds).
func BenchmarkIsMountPoint(b *testing.B) {
	dir := b.TempDir()
	b.Run("mountinfo", func(b *testing.B) {
		for b.Loop() {
			if _, err := mountsUnder(dir); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("openat2", func(b *testing.B) {
		for b.Loop() {
			if _, err := isMountPoint(dir); err != nil {
				b.Fatal(err)
			}
		}
	})
}
