package volumes

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodelet/nodelet/internal/testenv"
)

func TestValidatePathNoBacksteps(t *testing.T) {
	for _, tc := range []struct {
		path string
		ok   bool
	}{
		{"a/b", true}, {"a..b/c", true}, {"..", false}, {"a/../b", false}, {"../a", false}, {"a/..", false},
	} {
		if err := ValidatePathNoBacksteps(tc.path); (err == nil) != tc.ok {
			t.Errorf("%q: %v", tc.path, err)
		}
	}
}

func TestPathWithinBase(t *testing.T) {
	for _, tc := range []struct {
		path, base string
		in         bool
	}{
		{"/v/a", "/v", true}, {"/v", "/v", true}, {"/v/a/../b", "/v", true},
		{"/va", "/v", false}, {"/", "/v", false}, {"/v/../etc", "/v", false}, {"/v/..x", "/v", true},
	} {
		if got := pathWithinBase(filepath.Clean(tc.path), tc.base); got != tc.in {
			t.Errorf("pathWithinBase(%q, %q) = %v", tc.path, tc.base, got)
		}
	}
}

// Subpaths resolve inside the volume and are bind-mounted; ".." and
// symlinks that lead out of the volume are refused, with messages that
// name no host path.
func TestPrepareSubPath(t *testing.T) {
	testenv.RequiresRoot(t)
	podDir := t.TempDir()
	vol := filepath.Join(podDir, "volumes", pluginEmptyDir, "data")
	outside := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(vol, "dir", "deep"), 0o755))
	must(os.WriteFile(filepath.Join(vol, "dir", "file"), []byte("inside"), 0o644))
	must(os.WriteFile(filepath.Join(outside, "secret"), []byte("outside"), 0o644))
	must(os.Symlink("dir/file", filepath.Join(vol, "link-in")))
	must(os.Symlink(outside, filepath.Join(vol, "link-out")))
	must(os.Symlink("../../../../..", filepath.Join(vol, "dotdot-out")))
	must(os.Symlink(filepath.Join(outside, "missing"), filepath.Join(vol, "dangling-out")))
	t.Cleanup(func() {
		ms, _ := mountsUnder(podDir)
		for _, m := range ms {
			_ = unmount(m.Path)
		}
	})
	log := slog.New(slog.DiscardHandler)

	for i, tc := range []struct {
		subPath string
		want    string // content of the file at the target, or "dir"
		errPart string
	}{
		{subPath: "dir/file", want: "inside"},
		{subPath: "dir", want: "dir"},
		{subPath: "link-in", want: "inside"},
		{subPath: "new/made/for/it", want: "dir"},
		{subPath: "../data/dir/file", errPart: "unable to provision SubPath `../data/dir/file`: must not contain '..'"},
		{subPath: "dir/../../x", errPart: "must not contain '..'"},
		{subPath: "/etc", errPart: "must not be an absolute path"},
		{subPath: "link-out/secret", errPart: `failed to prepare subPath for volumeMount "m" of container "c"`},
		{subPath: "link-out", errPart: `failed to prepare subPath for volumeMount "m" of container "c"`},
		{subPath: "dotdot-out", errPart: `failed to prepare subPath`},
		{subPath: "dangling-out", errPart: `failed to create subPath directory for volumeMount "m" of container "c"`},
		{subPath: "link-out/newdir", errPart: `failed to create subPath directory`},
	} {
		t.Run(tc.subPath, func(t *testing.T) {
			target, err := PrepareSubPath(log, SubPath{PodDir: podDir, VolumeName: "data", VolumePath: vol,
				SubPath: tc.subPath, ContainerName: "c", VolumeMountIndex: i, MountName: "m"})
			if tc.errPart != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errPart) {
					t.Fatalf("err = %v, want %q", err, tc.errPart)
				}
				if strings.Contains(err.Error(), outside) {
					t.Fatalf("message names a host path: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(target, filepath.Join(podDir, subPathDirName, "data", "c")) {
				t.Fatalf("target %s", target)
			}
			if mounted, _ := isMountPoint(target); !mounted {
				t.Fatalf("%s is not a mount point", target)
			}
			if tc.want == "dir" {
				if fi, err := os.Stat(target); err != nil || !fi.IsDir() {
					t.Fatalf("target: %v %v", fi, err)
				}
			} else if b, _ := os.ReadFile(target); string(b) != tc.want {
				t.Fatalf("target reads %q", b)
			}
			// Idempotent: a second start of the container reuses the mount.
			again, err := PrepareSubPath(log, SubPath{PodDir: podDir, VolumeName: "data", VolumePath: vol,
				SubPath: tc.subPath, ContainerName: "c", VolumeMountIndex: i, MountName: "m"})
			if err != nil || again != target {
				t.Fatalf("again: %s %v", again, err)
			}
			if ms, _ := mountsUnder(target); len(ms) != 1 {
				t.Fatalf("mounted %d times", len(ms))
			}
		})
	}
	if _, err := os.Stat(filepath.Join(outside, "newdir")); !os.IsNotExist(err) {
		t.Fatal("a directory was created outside the volume")
	}
}

func TestSafeMakeDirRefusesSymlinks(t *testing.T) {
	base, outside := t.TempDir(), t.TempDir()
	if err := os.Symlink(outside, filepath.Join(base, "out")); err != nil {
		t.Fatal(err)
	}
	if err := SafeMakeDir("a/b/c", base, 0o750); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(base, "a/b/c")); err != nil || fi.Mode().Perm() != 0o750 {
		t.Fatalf("created: %v %v", fi, err)
	}
	if err := SafeMakeDir("out/x", base, 0o750); err == nil {
		t.Fatal("made a directory through a symlink out of the base")
	}
	if _, err := os.Stat(filepath.Join(outside, "x")); !os.IsNotExist(err) {
		t.Fatal("directory created outside")
	}
}
