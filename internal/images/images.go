// Package images builds the node's local images.
//
// No image registry is reachable from a nodelet test machine, so the two
// images every runtime test needs are built here, from parts already on the
// machine, as docker-archive tarballs that `ctr images import` understands:
//
//   - nodelet.local/pause:3.10 — the nodelet-pause binary (cmd/nodelet-pause)
//     at /pause, entrypoint ["/pause"]; the sandbox image.
//   - nodelet.local/busybox:1.35 — Debian's static /bin/busybox with every
//     applet linked, /etc/passwd and /etc/group (root, nobody 65534), /www
//     with an index.html and /tmp (1777); cmd ["/bin/sh"].
//
// Stand-ins for the images `kubeadm init` names (registry.k8s.io/kube-apiserver
// and the other control-plane components) are built from the project's own
// binaries in controlplane.go.
//
// Every file in every layer has a fixed timestamp and owner, and the image
// configs carry a fixed creation time, so building twice from the same inputs
// gives the same image ID and manifest digest.
package images

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Image references of the node's local images.
const (
	PauseImage   = "nodelet.local/pause:3.10"
	BusyboxImage = "nodelet.local/busybox:1.35"
)

// IndexHTML is the content of /www/index.html in the busybox image, what
// `httpd -f -p 8080 -h /www` serves at "/".
const IndexHTML = "<html><body><h1>nodelet busybox</h1></body></html>\n"

// DefaultBusybox is where Debian's busybox-static installs its binary.
const DefaultBusybox = "/bin/busybox"

// recipe is bumped whenever what goes into an image changes (this file or
// cmd/nodelet-pause), so that a cache filled by an older build is not reused.
const recipe = "r2"

// epoch is the timestamp of every file and of every image config.
var epoch = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// defaultPath is PATH in both images.
const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Tarball is an image written as a docker-archive tarball.
type Tarball struct {
	Ref    string  // image reference, e.g. nodelet.local/pause:3.10
	Path   string  // the tarball on disk
	ID     v1.Hash // config digest: what containerd and crictl show as the image ID
	Digest v1.Hash // manifest digest
}

// DefaultCacheDir is ${NODELET_CACHE:-$HOME/.cache/nodelet}/images.
func DefaultCacheDir() string {
	base := os.Getenv("NODELET_CACHE")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil || home == "" {
			home = os.TempDir()
		}
		base = filepath.Join(home, ".cache", "nodelet")
	}
	return filepath.Join(base, "images")
}

// CacheFileName is the file name of ref's tarball in a cache dir.
func CacheFileName(ref string) string {
	r := strings.NewReplacer("/", "_", ":", "_")
	return r.Replace(ref) + "-" + recipe + ".tar"
}

// EnsureImages makes sure the tarballs of the pause and busybox images are in
// cacheDir (DefaultCacheDir() when empty), building the missing ones, and
// returns both (pause first). Concurrent callers are safe: each tarball is
// written to a temporary file and renamed into place.
func EnsureImages(ctx context.Context, cacheDir string) ([]Tarball, error) {
	if cacheDir == "" {
		cacheDir = DefaultCacheDir()
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return nil, err
	}
	builds := []struct {
		ref   string
		build func(context.Context, string) (Tarball, error)
	}{
		{PauseImage, func(ctx context.Context, p string) (Tarball, error) { return BuildPause(ctx, "", p) }},
		{BusyboxImage, func(ctx context.Context, p string) (Tarball, error) { return BuildBusybox(ctx, "", p) }},
	}
	var out []Tarball
	for _, b := range builds {
		p := filepath.Join(cacheDir, CacheFileName(b.ref))
		if t, err := Load(p, b.ref); err == nil {
			out = append(out, t)
			continue
		}
		t, err := b.build(ctx, p)
		if err != nil {
			return nil, fmt.Errorf("build %s: %w", b.ref, err)
		}
		out = append(out, t)
		// Tarballs of older recipes are never read again.
		stale, _ := filepath.Glob(filepath.Join(cacheDir, strings.TrimSuffix(CacheFileName(b.ref), recipe+".tar")+"*.tar"))
		for _, s := range stale {
			if s != p {
				_ = os.Remove(s)
			}
		}
	}
	return out, nil
}

// Load reads ref's identity from an existing tarball.
func Load(tarPath, ref string) (Tarball, error) {
	tag, err := name.NewTag(ref)
	if err != nil {
		return Tarball{}, err
	}
	img, err := tarball.ImageFromPath(tarPath, &tag)
	if err != nil {
		return Tarball{}, err
	}
	return describe(img, ref, tarPath)
}

// BuildPause writes the pause image to out. pauseBinary is a prebuilt static
// nodelet-pause; when empty, PauseBinary finds or builds one.
func BuildPause(ctx context.Context, pauseBinary, out string) (Tarball, error) {
	if pauseBinary == "" {
		dir, err := os.MkdirTemp("", "nodelet-pause-")
		if err != nil {
			return Tarball{}, err
		}
		defer os.RemoveAll(dir)
		if pauseBinary, err = PauseBinary(ctx, dir); err != nil {
			return Tarball{}, err
		}
	}
	img, err := PauseImageFrom(pauseBinary)
	if err != nil {
		return Tarball{}, err
	}
	return Write(img, PauseImage, out)
}

// BuildBusybox writes the busybox image to out, from busyboxPath
// (DefaultBusybox when empty).
func BuildBusybox(ctx context.Context, busyboxPath, out string) (Tarball, error) {
	img, err := BusyboxImageFrom(ctx, busyboxPath)
	if err != nil {
		return Tarball{}, err
	}
	return Write(img, BusyboxImage, out)
}

// PauseBinary returns a static nodelet-pause binary, in this order:
// $NODELET_PAUSE_BINARY; one built with `go build` (CGO_ENABLED=0, -trimpath,
// -ldflags "-s -w", so that it is reproducible) from the nodelet module the
// working directory is in, or $NODELET_SRC, into dir; nodelet-pause next to
// the running executable (what scripts/setup.sh leaves in bin/).
func PauseBinary(ctx context.Context, dir string) (string, error) {
	if p := os.Getenv("NODELET_PAUSE_BINARY"); p != "" {
		return p, nil
	}
	out := filepath.Join(dir, "nodelet-pause")
	buildErr := BuildPauseBinary(ctx, out)
	if buildErr == nil {
		return out, nil
	}
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "nodelet-pause")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("no nodelet-pause binary: set NODELET_PAUSE_BINARY or build from source: %w", buildErr)
}

// BuildPauseBinary builds cmd/nodelet-pause into out with the Go toolchain.
func BuildPauseBinary(ctx context.Context, out string) error {
	return buildStatic(ctx, "./cmd/nodelet-pause", out)
}

// buildStatic builds pkg, a path in the nodelet module, into out: static and
// reproducible (CGO_ENABLED=0, -trimpath, -ldflags "-s -w").
func buildStatic(ctx context.Context, pkg, out string) error {
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = "/usr/local/go/bin/go"
	}
	modDir, err := moduleDir(ctx, goBin)
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, goBin, "build", "-trimpath", "-buildvcs=false",
		"-ldflags", "-s -w", "-o", out, pkg)
	cmd.Dir = modDir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w: %s", pkg, err, bytes.TrimSpace(b))
	}
	return nil
}

// moduleDir finds the root of the nodelet module: $NODELET_SRC, else the
// module of the working directory.
func moduleDir(ctx context.Context, goBin string) (string, error) {
	dir := os.Getenv("NODELET_SRC")
	if dir == "" {
		b, err := exec.CommandContext(ctx, goBin, "env", "GOMOD").Output()
		if err != nil {
			return "", fmt.Errorf("go env GOMOD: %w", err)
		}
		gomod := strings.TrimSpace(string(b))
		if gomod == "" || gomod == os.DevNull {
			return "", errors.New("the working directory is not inside the nodelet module (set NODELET_SRC)")
		}
		dir = filepath.Dir(gomod)
	}
	if _, err := os.Stat(filepath.Join(dir, "cmd", "nodelet-pause", "main.go")); err != nil {
		return "", fmt.Errorf("%s is not the nodelet module: %w", dir, err)
	}
	return dir, nil
}

// PauseImageFrom builds the pause image around a static pause binary.
func PauseImageFrom(pauseBinary string) (v1.Image, error) {
	bin, err := readStatic(pauseBinary)
	if err != nil {
		return nil, err
	}
	var l layer
	l.file("pause", 0o755, bin)
	return build(l, "nodelet images: /pause from cmd/nodelet-pause", v1.Config{
		Entrypoint: []string{"/pause"},
		Env:        []string{defaultPath},
		WorkingDir: "/",
	})
}

// BusyboxImageFrom builds the busybox image around a static busybox binary
// (DefaultBusybox when empty). Each applet that `busybox --list-full` names
// is a symbolic link to /bin/busybox.
func BusyboxImageFrom(ctx context.Context, busyboxPath string) (v1.Image, error) {
	if busyboxPath == "" {
		busyboxPath = DefaultBusybox
	}
	bin, err := readStatic(busyboxPath)
	if err != nil {
		return nil, err
	}
	list, err := exec.CommandContext(ctx, busyboxPath, "--list-full").Output()
	if err != nil {
		return nil, fmt.Errorf("%s --list-full: %w", busyboxPath, err)
	}
	applets := strings.Fields(string(list))
	sort.Strings(applets)

	var l layer
	for _, d := range []string{"bin", "dev", "etc", "home", "proc", "root", "sbin", "sys",
		"usr", "usr/bin", "usr/sbin", "var", "www"} {
		l.dir(d, 0o755)
	}
	l.dir("tmp", 0o1777)
	l.dir("var/tmp", 0o1777)
	l.file("bin/busybox", 0o755, bin)
	for _, a := range applets {
		a = strings.TrimPrefix(path.Clean("/"+a), "/")
		if a == "" || a == "bin/busybox" {
			continue
		}
		l.dirs(path.Dir(a))
		l.symlink(a, "/bin/busybox")
	}
	l.file("etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/home:/bin/false\n"))
	l.file("etc/group", 0o644, []byte("root:x:0:\nnobody:x:65534:\n"))
	l.file("www/index.html", 0o644, []byte(IndexHTML))
	return build(l, "nodelet images: busybox from "+busyboxPath, v1.Config{
		Cmd:        []string{"/bin/sh"},
		Env:        []string{defaultPath},
		WorkingDir: "/",
	})
}

// Write writes img as a docker-archive tarball tagged ref at out, atomically
// (a temporary file in the same directory, then a rename).
func Write(img v1.Image, ref, out string) (Tarball, error) {
	tag, err := name.NewTag(ref)
	if err != nil {
		return Tarball{}, err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return Tarball{}, err
	}
	f, err := os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+".*")
	if err != nil {
		return Tarball{}, err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // a no-op after the rename
	if err := tarball.Write(tag, img, f); err != nil {
		f.Close()
		return Tarball{}, fmt.Errorf("write %s: %w", out, err)
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return Tarball{}, err
	}
	if err := f.Close(); err != nil {
		return Tarball{}, err
	}
	if err := os.Rename(tmp, out); err != nil {
		return Tarball{}, err
	}
	return describe(img, ref, out)
}

// Import imports a tarball into containerd at address (a socket path) in
// namespace (k8s.io, the CRI plugin's, when empty) with ctr, unpacking it
// for the default snapshotter.
func Import(ctx context.Context, ctrAddress, namespace, tarPath string) error {
	if namespace == "" {
		namespace = "k8s.io"
	}
	ctr, err := exec.LookPath("ctr")
	if err != nil {
		return fmt.Errorf("ctr (from Debian's containerd package) not found: %w", err)
	}
	cmd := exec.CommandContext(ctx, ctr, "--address", ctrAddress, "--namespace", namespace,
		"images", "import", tarPath)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("ctr images import %s: %w: %s", tarPath, err, bytes.TrimSpace(b))
	}
	return nil
}

func describe(img v1.Image, ref, p string) (Tarball, error) {
	id, err := img.ConfigName()
	if err != nil {
		return Tarball{}, err
	}
	d, err := img.Digest()
	if err != nil {
		return Tarball{}, err
	}
	return Tarball{Ref: ref, Path: p, ID: id, Digest: d}, nil
}

// build makes a one-layer linux image of the host's architecture.
func build(l layer, createdBy string, cfg v1.Config) (v1.Image, error) {
	data, err := l.bytes()
	if err != nil {
		return nil, err
	}
	lay, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithCompressedCaching)
	if err != nil {
		return nil, err
	}
	img, err := mutate.ConfigFile(empty.Image, &v1.ConfigFile{
		Architecture: runtime.GOARCH,
		OS:           "linux",
		Created:      v1.Time{Time: epoch},
		Config:       cfg,
		RootFS:       v1.RootFS{Type: "layers"},
	})
	if err != nil {
		return nil, err
	}
	return mutate.Append(img, mutate.Addendum{
		Layer:   lay,
		History: v1.History{Created: v1.Time{Time: epoch}, CreatedBy: createdBy},
	})
}

// readStatic reads an executable and refuses a dynamically linked one: the
// images have no libc.
func readStatic(p string) ([]byte, error) {
	f, err := elf.Open(p)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return nil, fmt.Errorf("%s is dynamically linked; the image needs a static binary", p)
		}
	}
	return os.ReadFile(p)
}

// layer collects the entries of one layer tar; every entry is owned by root
// and stamped with epoch.
type layer struct {
	entries []entry
	seen    map[string]bool
}

type entry struct {
	hdr  tar.Header
	data []byte
}

func (l *layer) add(hdr tar.Header, data []byte) {
	if l.seen == nil {
		l.seen = map[string]bool{}
	}
	if l.seen[hdr.Name] {
		return
	}
	l.seen[hdr.Name] = true
	hdr.ModTime = epoch
	hdr.Format = tar.FormatPAX
	l.entries = append(l.entries, entry{hdr: hdr, data: data})
}

func (l *layer) dir(name string, mode int64) {
	l.add(tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode}, nil)
}

// dirs adds name and its parents as 0755 directories.
func (l *layer) dirs(name string) {
	if name == "." || name == "/" || name == "" {
		return
	}
	l.dirs(path.Dir(name))
	l.dir(name, 0o755)
}

func (l *layer) file(name string, mode int64, data []byte) {
	l.dirs(path.Dir(name))
	l.add(tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data))}, data)
}

func (l *layer) symlink(name, target string) {
	l.add(tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target, Mode: 0o777}, nil)
}

func (l *layer) bytes() ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range l.entries {
		hdr := e.hdr
		if err := tw.WriteHeader(&hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
