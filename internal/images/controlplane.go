package images

import (
	"context"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// Stand-ins for the control plane's images that `kubeadm init` puts in its
// static pod manifests (registry.k8s.io/kube-apiserver:<version>,
// kube-controller-manager, kube-scheduler), built offline from the binaries
// scripts/controlplane.sh builds: the binary at /usr/local/bin/<name>, the
// path kubeadm's manifests run (getAPIServerCommand and friends call the
// component by name, and the upstream images have it in /usr/local/bin on
// PATH). Upstream's binaries are static over distroless; the project's are
// linked against glibc (cgo's resolver), so the image carries the shared
// objects the binary needs, copied from the host at the paths the dynamic
// linker looks for them, rather than a second, static build of each
// component (minutes per binary on a test machine).

// ControlPlaneImageFrom is the image of one control-plane binary (bin, any
// name) as /usr/local/bin/<component>, with its shared libraries, PATH,
// and a /tmp.
func ControlPlaneImageFrom(ctx context.Context, bin, component string) (v1.Image, error) {
	data, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	var l layer
	l.file("usr/local/bin/"+component, 0o755, data)
	libs, err := sharedLibraries(ctx, bin)
	if err != nil {
		return nil, err
	}
	for _, lib := range libs {
		real, err := filepath.EvalSymlinks(lib)
		if err != nil {
			return nil, err
		}
		b, err := os.ReadFile(real)
		if err != nil {
			return nil, err
		}
		l.file(strings.TrimPrefix(lib, "/"), 0o755, b)
	}
	l.dir("tmp", 0o1777)
	return build(l, component+" and its shared libraries", v1.Config{
		Env:        []string{defaultPath},
		Entrypoint: []string{"/usr/local/bin/" + component},
		WorkingDir: "/",
	})
}

// BuildControlPlaneImage writes the image of bin as ref (e.g.
// registry.k8s.io/kube-apiserver:v1.37.2) into cacheDir, reusing a tarball
// already built from the same binary (its size and mtime in the name).
func BuildControlPlaneImage(ctx context.Context, bin, component, ref, cacheDir string) (Tarball, error) {
	st, err := os.Stat(bin)
	if err != nil {
		return Tarball{}, err
	}
	out := filepath.Join(cacheDir, fmt.Sprintf("cp-%d-%d-%s", st.Size(), st.ModTime().Unix(), CacheFileName(ref)))
	if _, err := os.Stat(out); err == nil {
		return Load(out, ref)
	}
	img, err := ControlPlaneImageFrom(ctx, bin, component)
	if err != nil {
		return Tarball{}, err
	}
	return Write(img, ref, out)
}

// sharedLibraries are the absolute paths of the objects the dynamic linker
// loads for bin (its interpreter included), as ldd lists them; none for a
// static binary.
func sharedLibraries(ctx context.Context, bin string) ([]string, error) {
	f, err := elf.Open(bin)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", bin, err)
	}
	dynamic := false
	for _, p := range f.Progs {
		dynamic = dynamic || p.Type == elf.PT_INTERP
	}
	f.Close()
	if !dynamic {
		return nil, nil
	}
	out, err := exec.CommandContext(ctx, "ldd", bin).Output()
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %w", bin, err)
	}
	return parseLdd(string(out)), nil
}

// parseLdd takes the paths of ldd's lines: "libc.so.6 => /lib/…/libc.so.6
// (0x…)" and "/lib64/ld-linux-x86-64.so.2 (0x…)"; the vDSO has no file.
func parseLdd(out string) []string {
	var libs []string
	for _, line := range strings.Split(out, "\n") {
		fs := strings.Fields(line)
		for i, f := range fs {
			if strings.HasPrefix(f, "/") && (i == 0 || fs[i-1] == "=>") {
				libs = append(libs, f)
				break
			}
		}
	}
	return libs
}
