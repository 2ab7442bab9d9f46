package images

import (
	"archive/tar"
	"context"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

func TestParseLdd(t *testing.T) {
	for _, tc := range []struct {
		name, out string
		want      []string
	}{
		{"glibc", "\tlinux-vdso.so.1 (0x00007fc2b73c1000)\n\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007fc2b71ce000)\n\t/lib64/ld-linux-x86-64.so.2 (0x00007fc2b73c3000)\n",
			[]string{"/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2"}},
		{"static", "\tnot a dynamic executable\n", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := parseLdd(tc.out); !slices.Equal(got, tc.want) {
				t.Errorf("parseLdd: %q, want %q", got, tc.want)
			}
		})
	}
}

// TestControlPlaneImageFrom: a dynamically linked binary's image has the
// binary at /usr/local/bin/<name> and every object ldd lists; a static
// one has the binary alone.
func TestControlPlaneImageFrom(t *testing.T) {
	dynamic, err := exec.LookPath("true")
	if err != nil {
		t.Skip("no true(1) to stand in for a dynamically linked binary")
	}
	for _, tc := range []struct {
		name, bin string
		wantLibs  bool
	}{
		{"dynamic", dynamic, true},
		{"static", staticBinary(t), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			libs, err := sharedLibraries(context.Background(), tc.bin)
			if err != nil {
				t.Fatal(err)
			}
			if (len(libs) > 0) != tc.wantLibs {
				t.Fatalf("shared libraries of %s: %v", tc.bin, libs)
			}
			img, err := ControlPlaneImageFrom(context.Background(), tc.bin, "kube-thing")
			if err != nil {
				t.Fatal(err)
			}
			files := imageFiles(t, img)
			for _, want := range append([]string{"usr/local/bin/kube-thing"}, libs...) {
				if !files[strings.TrimPrefix(want, "/")] {
					t.Errorf("image lacks %s; has %v", want, files)
				}
			}
			cf, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(cf.Config.Entrypoint, []string{"/usr/local/bin/kube-thing"}) {
				t.Errorf("entrypoint %v", cf.Config.Entrypoint)
			}
		})
	}
}

// staticBinary is a static executable: Debian's busybox if there, else
// skip.
func staticBinary(t *testing.T) string {
	t.Helper()
	if _, err := readStatic(DefaultBusybox); err != nil {
		t.Skipf("no static busybox at %s: %v", DefaultBusybox, err)
	}
	return DefaultBusybox
}

// imageFiles are the regular files of img's layers.
func imageFiles(t *testing.T, img v1.Image) map[string]bool {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]bool{}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if h.Typeflag == tar.TypeReg {
				files[h.Name] = true
			}
		}
		rc.Close()
	}
	return files
}
