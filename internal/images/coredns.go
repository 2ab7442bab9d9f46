package images

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// CoreDNSImage is the cluster DNS image kubeadm v1.37 deploys: its
// images.GetDNSImage with the default repository (registry.k8s.io, renamed
// to registry.k8s.io/coredns for CoreDNS) and constants.CoreDNSVersion. The
// stand-in holds the coredns that `scripts/controlplane.sh tools coredns`
// builds (scripts/coredns/go.mod's version, which may be newer than the
// tag): the Deployment asks for this reference, so the stand-in carries it.
const CoreDNSImage = "registry.k8s.io/coredns/coredns:v1.14.6"

// corednsRecipe is bumped whenever what CoreDNSImageFrom puts in the image
// changes, so that tarballs of an older recipe in the cache are not reused.
const corednsRecipe = "k1"

// netBindServiceCap is the security.capability extended attribute that
// `setcap cap_net_bind_service=+ep` writes (struct vfs_cap_data, revision
// 2, little endian): magic 0x02000000 with the effective flag 0x1, then the
// permitted set with bit 10 (CAP_NET_BIND_SERVICE), an empty inheritable
// set, and the upper 32 capabilities empty.
var netBindServiceCap = string([]byte{
	0x01, 0x00, 0x00, 0x02, // magic_etc: VFS_CAP_REVISION_2 | VFS_CAP_FLAGS_EFFECTIVE
	0x00, 0x04, 0x00, 0x00, // permitted[0]: 1 << CAP_NET_BIND_SERVICE
	0x00, 0x00, 0x00, 0x00, // inheritable[0]
	0x00, 0x00, 0x00, 0x00, // permitted[1]
	0x00, 0x00, 0x00, 0x00, // inheritable[1]
})

// corednsUser is the distroless "nonroot" user the upstream image runs as
// (USER 65532:65532, numeric so that runAsNonRoot can be verified).
const corednsUser = 65532

// CoreDNSImageFrom builds the CoreDNS image around a static coredns binary,
// as CoreDNS's Dockerfile does over gcr.io/distroless/static-debian12:nonroot:
// /coredns with the file capability cap_net_bind_service=+ep (its build
// stage's setcap: the Deployment drops every capability but
// NET_BIND_SERVICE and runs as 65532, so only the file capability lets a
// non-root process bind :53, and only if the runtime unpacks the layer's
// xattrs, as containerd does), USER 65532:65532, WORKDIR /, EXPOSE 53 and
// 53/udp, ENTRYPOINT ["/coredns"]. From the distroless base it keeps what a
// process may look at: /etc/passwd and /etc/group with root, nobody and
// nonroot, /etc/nsswitch.conf, /home/nonroot and /tmp. Left out: the CA
// bundle and tzdata (nothing here talks TLS to the outside) and the
// base's Debian package records.
func CoreDNSImageFrom(bin string) (v1.Image, error) {
	data, err := readStatic(bin)
	if err != nil {
		return nil, err
	}
	var l layer
	for _, d := range []string{"etc", "home"} {
		l.dir(d, 0o755)
	}
	l.add(tar.Header{Typeflag: tar.TypeDir, Name: "home/nonroot/", Mode: 0o700, Uid: corednsUser, Gid: corednsUser}, nil)
	l.dir("tmp", 0o1777)
	l.file("etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/sbin/nologin\n"+
		"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n"+
		"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"))
	l.file("etc/group", 0o644, []byte("root:x:0:\nnobody:x:65534:\ntty:x:5:\nstaff:x:50:\nnonroot:x:65532:\n"))
	l.file("etc/nsswitch.conf", 0o644, []byte("passwd: files\ngroup: files\nhosts: files dns\n"))
	l.add(tar.Header{Typeflag: tar.TypeReg, Name: "coredns", Mode: 0o755, Size: int64(len(data)),
		PAXRecords: map[string]string{"SCHILY.xattr.security.capability": netBindServiceCap}}, data)
	return build(l, "nodelet images: CoreDNS's Dockerfile over distroless static, /coredns from "+filepath.Base(bin), v1.Config{
		Entrypoint:   []string{"/coredns"},
		Env:          []string{defaultPath},
		User:         fmt.Sprintf("%d:%d", corednsUser, corednsUser),
		WorkingDir:   "/",
		ExposedPorts: map[string]struct{}{"53/tcp": {}, "53/udp": {}},
	})
}

// BuildCoreDNS returns the CoreDNS image tarball for the static coredns at
// bin (from `scripts/controlplane.sh tools coredns`), tagged CoreDNSImage,
// from cacheDir (DefaultCacheDir() when empty) or built into it. A tarball
// is named after the binary's content, so a rebuilt coredns (another
// version) makes a new one; the cache keeps only the latest.
func BuildCoreDNS(ctx context.Context, bin, cacheDir string) (Tarball, error) {
	return buildFromBinary(ctx, bin, cacheDir, CoreDNSImage, corednsRecipe, func() (v1.Image, error) { return CoreDNSImageFrom(bin) })
}

// buildFromBinary is the cache of an image made from one binary: the
// tarball <recipe>-<digest of bin>-<ref's file name> in cacheDir
// (DefaultCacheDir() when empty), built with build when absent. Tarballs of
// other binaries or recipes are never read again and each holds a whole
// binary, so they are removed.
func buildFromBinary(ctx context.Context, bin, cacheDir, ref, recipe string, build func() (v1.Image, error)) (Tarball, error) {
	if cacheDir == "" {
		cacheDir = DefaultCacheDir()
	}
	sum, err := fileDigest(bin)
	if err != nil {
		return Tarball{}, err
	}
	suffix := "-" + CacheFileName(ref)
	p := filepath.Join(cacheDir, recipe+"-"+sum[:12]+suffix)
	if t, err := Load(p, ref); err == nil {
		return t, nil
	}
	if err := ctx.Err(); err != nil {
		return Tarball{}, err
	}
	img, err := build()
	if err != nil {
		return Tarball{}, fmt.Errorf("build %s: %w", ref, err)
	}
	t, err := Write(img, ref, p)
	if err != nil {
		return Tarball{}, err
	}
	stale, _ := filepath.Glob(filepath.Join(cacheDir, "*"+suffix))
	for _, s := range stale {
		if s != p {
			_ = os.Remove(s)
		}
	}
	return t, nil
}

// fileDigest is the hex sha256 of a file's content.
func fileDigest(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("%s: %w", p, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
