package hostinfo

import (
	"os"
	"path/filepath"
	"testing"
)

// DiskUsage counts allocated blocks and inodes as the kubelet's: a file
// with two links once, the directory itself too.
func TestDiskUsage(t *testing.T) {
	dir := t.TempDir()
	data := make([]byte, 64*1024)
	for i := range data {
		data[i] = 1
	}
	if err := os.WriteFile(filepath.Join(dir, "f"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(dir, "f"), filepath.Join(dir, "g")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	bytes, inodes, err := DiskUsage(dir)
	if err != nil {
		t.Fatal(err)
	}
	if inodes != 3 {
		t.Errorf("inodes %d, want 3 (the directory, f and g once, sub)", inodes)
	}
	if bytes < 64*1024 || bytes >= 2*64*1024 {
		t.Errorf("bytes %d, want the 64 KiB file once plus the directories", bytes)
	}
	if _, _, err := DiskUsage(filepath.Join(dir, "missing")); !os.IsNotExist(err) {
		t.Errorf("missing path: %v", err)
	}
}
