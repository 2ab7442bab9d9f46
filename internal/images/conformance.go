package images

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// ConformanceInputs are the binaries and files the Kubernetes e2e images are
// made of, built from the Kubernetes module (scripts/controlplane.sh
// build-conformance) and this one: every binary static. The ones that default
// to a path next to Agnhost are where build-conformance leaves them.
type ConformanceInputs struct {
	// Agnhost is test/images/agnhost.
	Agnhost string
	// Nnp is test/images/nonewprivs (prints its effective uid).
	Nnp string
	// Busybox is Debian's static busybox (DefaultBusybox when empty).
	Busybox string
	// Pause is a static nodelet-pause (found or built as for BuildPause when empty).
	Pause string
	// Shell, when set, is a static bash (Debian: bash-static,
	// /bin/bash-static): /bin/bash of every busybox-based stand-in, and
	// (see binSh) /bin/sh of all but the e2e busybox image, whose /bin/sh
	// stays busybox's ash with the bash as the `sh` a PATH lookup finds.
	// Empty: busybox's ash is the only shell.
	Shell string
	// E2ETools is internal/images/e2etools (curl, nc, dig and getent of the
	// agnhost, kitten, nautilus and glibc-dns-testing stand-ins); built from
	// the nodelet module when empty.
	E2ETools string
	// SampleAPIServer is k8s.io/sample-apiserver (default: sample-apiserver
	// next to Agnhost). Without it the sample-apiserver stand-in is left out.
	SampleAPIServer string
	// Etcd is an etcd server (default: etcd-static next to Agnhost), the
	// etcd image's /usr/local/bin/etcd. Without it that stand-in is left out.
	Etcd string
	// Pages holds test/images' kitten/html and nautilus/html as kitten/ and
	// nautilus/ (default: agnhost-pages next to Agnhost).
	Pages string
}

// ConformanceImage is one stand-in for an image of registry.k8s.io that the
// e2e suite runs, made offline from what its Dockerfile in the Kubernetes
// module's test/images says it holds.
type ConformanceImage struct {
	Ref   string
	build func(ctx context.Context, b *standIns) (v1.Image, error)
}

const e2eRegistry = "registry.k8s.io/e2e-test-images/"

// conformanceRecipe is bumped whenever a stand-in changes, so that tarballs
// of an older recipe in the cache are not reused.
const conformanceRecipe = "c7"

// errNoInput marks a stand-in whose optional input is not there: it is left
// out, and the harness lists its image among those without a stand-in.
var errNoInput = errors.New("input not built")

// ConformanceImages lists the stand-ins, by the references
// k8s.io/kubernetes/test/utils/image gives them in v1.37.
func ConformanceImages() []ConformanceImage {
	return []ConformanceImage{
		{e2eRegistry + "busybox:1.37.0-2", e2eBusybox},
		{e2eRegistry + "busybox:1.36.1-1", e2eBusybox},
		{e2eRegistry + "agnhost:2.66.1", agnhostImage},
		{e2eRegistry + "agnhost:2.55", agnhostImage},
		{e2eRegistry + "kitten:1.8", pageImage("kitten")},
		{e2eRegistry + "nautilus:1.8", pageImage("nautilus")},
		{e2eRegistry + "glibc-dns-testing:2.1.1", glibcDNSImage},
		{e2eRegistry + "nginx:1.27.0-2", nginxImage},
		{e2eRegistry + "nginx:1.28.0-2", nginxImage},
		{e2eRegistry + "nonewprivs:1.4", nonewprivsImage},
		// nonroot: USER 1234 over busybox.
		{e2eRegistry + "nonroot:1.5", func(ctx context.Context, b *standIns) (v1.Image, error) {
			return b.onBusybox(ctx, layer{}, "nonroot: USER 1234", func(c *v1.Config) {
				c.User = "1234"
			})
		}},
		{e2eRegistry + "sample-apiserver:1.29.2", sampleAPIServerImage},
		{"registry.k8s.io/etcd:3.7.0-0", etcdImage},
		{"registry.k8s.io/sig-storage/hostpathplugin:v1.17.1", hostpathpluginImage},
		{"registry.k8s.io/pause:3.10.2", func(ctx context.Context, b *standIns) (v1.Image, error) {
			p, err := b.pause(ctx)
			if err != nil {
				return nil, err
			}
			return PauseImageFrom(p)
		}},
	}
}

// standIns is one BuildConformanceImages: the inputs, and where the ones it
// has to make itself go.
type standIns struct {
	ConformanceInputs
	tmp  string
	base v1.Image // the busybox image every stand-in but pause is over, made once
}

// nextToAgnhost is p, or name in Agnhost's directory when p is empty.
func (b *standIns) nextToAgnhost(p, name string) string {
	if p != "" {
		return p
	}
	return filepath.Join(filepath.Dir(b.Agnhost), name)
}

// optional is the binary at p, or errNoInput when there is none.
func optional(p string) ([]byte, error) {
	if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", p, errNoInput)
	}
	return readStatic(p)
}

func (b *standIns) pause(ctx context.Context) (string, error) {
	if b.Pause == "" {
		p, err := PauseBinary(ctx, b.tmp)
		if err != nil {
			return "", err
		}
		b.Pause = p
	}
	return b.Pause, nil
}

func (b *standIns) e2eTools(ctx context.Context) (string, error) {
	if b.E2ETools == "" {
		p := filepath.Join(b.tmp, "e2etools")
		if err := buildStatic(ctx, "./internal/images/e2etools", p); err != nil {
			return "", fmt.Errorf("e2etools (set ConformanceInputs.E2ETools or build from the nodelet module): %w", err)
		}
		b.E2ETools = p
	}
	return b.E2ETools, nil
}

// e2eBusybox is test/images/busybox: every applet in /bin, where specs call
// them (/bin/sysctl, ...); Debian's list puts some in sbin and usr/bin.
func e2eBusybox(ctx context.Context, b *standIns) (v1.Image, error) {
	bb := b.Busybox
	if bb == "" {
		bb = DefaultBusybox
	}
	list, err := exec.CommandContext(ctx, bb, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("%s --list: %w", bb, err)
	}
	var l layer
	for _, a := range strings.Fields(string(list)) {
		if a != "busybox" && !strings.Contains(a, "/") {
			l.symlink("bin/"+a, "/bin/busybox")
		}
	}
	return b.onBusyboxSh(ctx, shAsh, l, "e2e busybox: every applet in /bin", func(*v1.Config) {})
}

// nginxImage: the e2e tests only need something that serves HTTP on :80.
func nginxImage(ctx context.Context, b *standIns) (v1.Image, error) {
	var l layer
	l.file("usr/share/nginx/html/index.html", 0o644, []byte("<html><body>nginx stand-in</body></html>\n"))
	return b.onBusybox(ctx, l, "nginx stand-in: busybox httpd on :80", func(c *v1.Config) {
		c.Cmd = []string{"httpd", "-f", "-p", "80", "-h", "/usr/share/nginx/html"}
		c.ExposedPorts = map[string]struct{}{"80/tcp": {}}
	})
}

// nonewprivsImage: nnp setuid root (its Dockerfile's chmod +s).
func nonewprivsImage(ctx context.Context, b *standIns) (v1.Image, error) {
	bin, err := readStatic(b.Nnp)
	if err != nil {
		return nil, err
	}
	var l layer
	l.file("usr/local/bin/nnp", 0o4755, bin)
	return b.onBusybox(ctx, l, "nonewprivs: setuid nnp", func(c *v1.Config) {
		c.Cmd = []string{"nnp"}
	})
}

// binSh is what /bin/sh of a busybox-based stand-in is when there is a
// Shell. Debian's busybox is 1.35, whose ash drops environment variables
// with names that are not identifiers (data-1 from a ConfigMap's envFrom;
// the images' busybox 1.36 and later keeps them, and so does bash), and,
// built static, runs its own applets before anything in PATH (a script's nc
// and wget are busybox's, not e2etools'). So /bin/sh is the bash, except in
// the e2e busybox image: the read-only root spec runs `/bin/sh -c "echo
// test > /file"` in it and compares ash's words for the refusal ("/bin/sh:
// can't create /file: Read-only file system"), while the specs that print
// such variables in it run `sh -c env`, which PATH finds.
type binSh int

const (
	shBash binSh = iota // /bin/sh is the bash
	shAsh               // /bin/sh stays busybox's ash; /usr/local/bin/sh is the bash
)

// onBusybox is the busybox image with l as a second layer and its config
// changed by edit; with a Shell, /bin/sh is the bash.
func (b *standIns) onBusybox(ctx context.Context, l layer, createdBy string, edit func(*v1.Config)) (v1.Image, error) {
	return b.onBusyboxSh(ctx, shBash, l, createdBy, edit)
}

func (b *standIns) onBusyboxSh(ctx context.Context, sh binSh, l layer, createdBy string, edit func(*v1.Config)) (v1.Image, error) {
	if b.base == nil {
		base, err := BusyboxImageFrom(ctx, b.Busybox)
		if err != nil {
			return nil, err
		}
		b.base = base
	}
	if b.Shell != "" {
		bash, err := readStatic(b.Shell)
		if err != nil {
			return nil, err
		}
		l.file("bin/bash", 0o755, bash)
		if sh == shAsh {
			l.symlink("usr/local/bin/sh", "/bin/bash")
		} else {
			l.symlink("bin/sh", "/bin/bash")
		}
	}
	return withLayer(b.base, l, createdBy, edit)
}

// withLayer is img with l as a new top layer (none when l is empty) and its
// config changed by edit.
func withLayer(img v1.Image, l layer, createdBy string, edit func(*v1.Config)) (v1.Image, error) {
	if len(l.entries) > 0 {
		top, err := build(l, createdBy, v1.Config{})
		if err != nil {
			return nil, err
		}
		layers, err := top.Layers()
		if err != nil {
			return nil, err
		}
		img, err = mutate.Append(img, mutate.Addendum{Layer: layers[0],
			History: v1.History{Created: v1.Time{Time: epoch}, CreatedBy: createdBy}})
		if err != nil {
			return nil, err
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	edit(&cf.Config)
	return mutate.ConfigFile(img, cf)
}

// withVersion labels img with ref's tag. Two tags of one stand-in (agnhost
// 2.55 and 2.66.1, busybox and nginx) would otherwise be one image with one
// ID, as the real ones are not, and containerd's CRI reports a container's
// image by the first tag of its ID: a container of agnhost:2.66.1 could
// show as agnhost:2.55.
func withVersion(img v1.Image, ref string) (v1.Image, error) {
	_, tag, _ := strings.Cut(ref[strings.LastIndex(ref, "/")+1:], ":")
	return withLayer(img, layer{}, "", func(c *v1.Config) {
		labels := map[string]string{}
		for k, v := range c.Labels {
			labels[k] = v
		}
		labels["org.opencontainers.image.version"] = tag
		c.Labels = labels
	})
}

// BuildConformanceImages writes every stand-in as a docker-archive tarball
// into dir (reusing tarballs already there) and returns them. A stand-in
// whose optional input is missing is left out.
func BuildConformanceImages(ctx context.Context, in ConformanceInputs, dir string) ([]Tarball, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "nodelet-conformance-inputs-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	b := &standIns{ConformanceInputs: in, tmp: tmp}
	var out []Tarball
	for _, ci := range ConformanceImages() {
		p := filepath.Join(dir, conformanceRecipe+"-"+CacheFileName(ci.Ref))
		if t, err := Load(p, ci.Ref); err == nil {
			out = append(out, t)
			continue
		}
		img, err := ci.build(ctx, b)
		if errors.Is(err, errNoInput) {
			continue
		}
		if err == nil {
			img, err = withVersion(img, ci.Ref)
		}
		if err != nil {
			return nil, fmt.Errorf("build %s: %w", ci.Ref, err)
		}
		t, err := Write(img, ci.Ref, p)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
		// Tarballs of older recipes are never read again (agnhost's are
		// tens of megabytes).
		stale, _ := filepath.Glob(filepath.Join(dir, "c*-"+CacheFileName(ci.Ref)))
		for _, s := range stale {
			if s != p {
				_ = os.Remove(s)
			}
		}
	}
	return out, nil
}
