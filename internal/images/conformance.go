package images

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// ConformanceInputs are the binaries the Kubernetes e2e images are made of,
// built from the Kubernetes module (scripts/controlplane.sh
// build-conformance): every one static.
type ConformanceInputs struct {
	// Agnhost is test/images/agnhost.
	Agnhost string
	// Nnp is test/images/nonewprivs (prints its effective uid).
	Nnp string
	// Busybox is Debian's static busybox (DefaultBusybox when empty).
	Busybox string
	// Pause is a static nodelet-pause (found or built as for BuildPause when empty).
	Pause string
	// Shell, when set, is a static bash that becomes /bin/sh of every
	// busybox-based stand-in. Debian's busybox is 1.35, whose sh drops
	// environment variables with names that are not identifiers (data-1 from
	// a ConfigMap's envFrom); the images' busybox (1.36 and later) keeps
	// them, and so does bash. Debian: bash-static, /bin/bash-static.
	Shell string
}

// ConformanceImage is one stand-in for an image of registry.k8s.io that the
// e2e suite runs, made offline from what its Dockerfile in the Kubernetes
// module's test/images says it holds.
type ConformanceImage struct {
	Ref   string
	build func(ctx context.Context, in ConformanceInputs) (v1.Image, error)
}

const e2eRegistry = "registry.k8s.io/e2e-test-images/"

// conformanceRecipe is bumped whenever a stand-in changes, so that tarballs
// of an older recipe in the cache are not reused.
const conformanceRecipe = "c4"

// ConformanceImages lists the stand-ins, by the references
// k8s.io/kubernetes/test/utils/image gives them in v1.37.
func ConformanceImages() []ConformanceImage {
	// The e2e busybox image (test/images/busybox) has every applet in /bin,
	// where specs call them (/bin/sysctl, ...); Debian's list puts some in
	// sbin and usr/bin.
	busybox := func(ctx context.Context, in ConformanceInputs) (v1.Image, error) {
		bb := in.Busybox
		if bb == "" {
			bb = DefaultBusybox
		}
		list, err := exec.CommandContext(ctx, bb, "--list").Output()
		if err != nil {
			return nil, fmt.Errorf("%s --list: %w", bb, err)
		}
		var l layer
		for _, a := range strings.Fields(string(list)) {
			if in.Shell != "" && (a == "sh" || a == "bash") {
				continue // onBusybox puts the shell there
			}
			if a != "busybox" && !strings.Contains(a, "/") {
				l.symlink("bin/"+a, "/bin/busybox")
			}
		}
		return onBusybox(ctx, in, l, "e2e busybox: every applet in /bin", func(*v1.Config) {})
	}
	agnhost := func(ctx context.Context, in ConformanceInputs) (v1.Image, error) {
		return agnhostImage(ctx, in)
	}
	// nginx: the e2e tests only need something that serves HTTP on :80.
	nginx := func(ctx context.Context, in ConformanceInputs) (v1.Image, error) {
		var l layer
		l.file("usr/share/nginx/html/index.html", 0o644, []byte("<html><body>nginx stand-in</body></html>\n"))
		return onBusybox(ctx, in, l, "nginx stand-in: busybox httpd on :80", func(c *v1.Config) {
			c.Cmd = []string{"httpd", "-f", "-p", "80", "-h", "/usr/share/nginx/html"}
			c.ExposedPorts = map[string]struct{}{"80/tcp": {}}
		})
	}
	// kitten and nautilus: a web page each (test/images/kitten, nautilus).
	page := func(name string) func(context.Context, ConformanceInputs) (v1.Image, error) {
		return func(ctx context.Context, in ConformanceInputs) (v1.Image, error) {
			var l layer
			l.file("data/index.html", 0o644, []byte("<html><body>"+name+"</body></html>\n"))
			return onBusybox(ctx, in, l, name+" stand-in", func(c *v1.Config) {
				c.Cmd = []string{"httpd", "-f", "-p", "80", "-h", "/data"}
			})
		}
	}
	return []ConformanceImage{
		{e2eRegistry + "busybox:1.37.0-2", busybox},
		{e2eRegistry + "busybox:1.36.1-1", busybox},
		{e2eRegistry + "agnhost:2.66.1", agnhost},
		{e2eRegistry + "agnhost:2.55", agnhost},
		{e2eRegistry + "nginx:1.27.0-2", nginx},
		{e2eRegistry + "nginx:1.28.0-2", nginx},
		{e2eRegistry + "kitten:1.8", page("kitten")},
		{e2eRegistry + "nautilus:1.8", page("nautilus")},
		// nonewprivs: nnp setuid root (its Dockerfile's chmod +s).
		{e2eRegistry + "nonewprivs:1.4", func(ctx context.Context, in ConformanceInputs) (v1.Image, error) {
			bin, err := readStatic(in.Nnp)
			if err != nil {
				return nil, err
			}
			var l layer
			l.file("usr/local/bin/nnp", 0o4755, bin)
			return onBusybox(ctx, in, l, "nonewprivs: setuid nnp", func(c *v1.Config) {
				c.Cmd = []string{"nnp"}
			})
		}},
		// nonroot: USER 1234 over busybox.
		{e2eRegistry + "nonroot:1.5", func(ctx context.Context, in ConformanceInputs) (v1.Image, error) {
			return onBusybox(ctx, in, layer{}, "nonroot: USER 1234", func(c *v1.Config) {
				c.User = "1234"
			})
		}},
		{"registry.k8s.io/pause:3.10.2", func(ctx context.Context, in ConformanceInputs) (v1.Image, error) {
			p := in.Pause
			if p == "" {
				dir, err := os.MkdirTemp("", "nodelet-pause-")
				if err != nil {
					return nil, err
				}
				defer os.RemoveAll(dir)
				if p, err = PauseBinary(ctx, dir); err != nil {
					return nil, err
				}
			}
			return PauseImageFrom(p)
		}},
	}
}

// agnhostImage is test/images/agnhost/Dockerfile over busybox instead of
// alpine: /agnhost and the agnhost-2 link, porter's localhost.crt and .key,
// /uploads, user user-defined-in-image (1000) in group-defined-in-image
// (50000); ENTRYPOINT /agnhost, CMD pause.
func agnhostImage(ctx context.Context, in ConformanceInputs) (v1.Image, error) {
	bin, err := readStatic(in.Agnhost)
	if err != nil {
		return nil, err
	}
	porter := filepath.Join(filepath.Dir(in.Agnhost), "agnhost-porter")
	crt, err := os.ReadFile(filepath.Join(porter, "localhost.crt"))
	if err != nil {
		return nil, fmt.Errorf("agnhost's porter certificate (next to the agnhost binary): %w", err)
	}
	key, err := os.ReadFile(filepath.Join(porter, "localhost.key"))
	if err != nil {
		return nil, fmt.Errorf("agnhost's porter key: %w", err)
	}
	var l layer
	l.file("agnhost", 0o755, bin)
	l.symlink("agnhost-2", "agnhost")
	l.file("localhost.crt", 0o644, crt)
	l.file("localhost.key", 0o600, key)
	l.dir("uploads", 0o755)
	l.file("usr/bin/curl", 0o755, []byte(curlShim))
	l.dir("home/user-defined-in-image", 0o755)
	l.file("etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/home:/bin/false\n"+
		"user-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh\n"))
	l.file("etc/group", 0o644, []byte("root:x:0:\nnobody:x:65534:\nuser-defined-in-image:x:1000:\n"+
		"group-defined-in-image:x:50000:user-defined-in-image\n"))
	return onBusybox(ctx, in, l, "agnhost over busybox", func(c *v1.Config) {
		c.Entrypoint = []string{"/agnhost"}
		c.Cmd = []string{"pause"}
		c.ExposedPorts = map[string]struct{}{"80/tcp": {}, "8080/tcp": {}, "8081/tcp": {}, "9376/tcp": {}, "5000/tcp": {}}
	})
}

// curlShim stands in for alpine's curl in the agnhost image, over busybox's
// wget, for the forms the e2e specs run: `curl URL`, `curl -g -q -s URL`,
// with -m/--max-time/--connect-timeout and -o.
const curlShim = `#!/bin/sh
# curl stand-in (nodelet conformance images): busybox wget underneath.
timeout= out=- url=
while [ $# -gt 0 ]; do
	case $1 in
	-g | -q | -s | -S | -f | -L | -k | --silent | --globoff | --fail | --location | --insecure) ;;
	-m | --max-time | --connect-timeout) timeout="-T $2"; shift ;;
	-o | --output) out=$2; shift ;;
	-*) echo "curl stand-in: unsupported option $1" >&2; exit 2 ;;
	*) url=$1 ;;
	esac
	shift
done
exec wget -q $timeout -O "$out" "$url"
`

// onBusybox is the busybox image with l as a second layer and its config
// changed by edit.
func onBusybox(ctx context.Context, in ConformanceInputs, l layer, createdBy string, edit func(*v1.Config)) (v1.Image, error) {
	base, err := BusyboxImageFrom(ctx, in.Busybox)
	if err != nil {
		return nil, err
	}
	if in.Shell != "" {
		bash, err := readStatic(in.Shell)
		if err != nil {
			return nil, err
		}
		l.file("bin/bash", 0o755, bash)
		l.symlink("bin/sh", "/bin/bash")
	}
	img := base
	if len(l.entries) > 0 {
		top, err := build(l, createdBy, v1.Config{})
		if err != nil {
			return nil, err
		}
		layers, err := top.Layers()
		if err != nil {
			return nil, err
		}
		img, err = mutate.Append(base, mutate.Addendum{Layer: layers[0],
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

// BuildConformanceImages writes every stand-in as a docker-archive tarball
// into dir (reusing tarballs already there) and returns them.
func BuildConformanceImages(ctx context.Context, in ConformanceInputs, dir string) ([]Tarball, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var out []Tarball
	for _, ci := range ConformanceImages() {
		p := filepath.Join(dir, conformanceRecipe+"-"+CacheFileName(ci.Ref))
		if t, err := Load(p, ci.Ref); err == nil {
			out = append(out, t)
			continue
		}
		img, err := ci.build(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("build %s: %w", ci.Ref, err)
		}
		t, err := Write(img, ci.Ref, p)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}
