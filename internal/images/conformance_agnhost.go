package images

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// agnhostTools are the e2etools links of the agnhost stand-in: what the
// real image's Alpine packages give the specs (curl; netcat-openbsd's nc;
// bind-tools' dig; musl's getent), which busybox lacks or gets wrong: its
// nc has no -u, and its wget (the curl stand-in before these) crashes on -T.
var agnhostTools = []string{"curl", "nc", "dig", "getent"}

// alpineOSRelease is the agnhost stand-in's /etc/os-release. The real
// agnhost, and kitten and nautilus built FROM it, are Alpine; the image
// volume spec reads kitten's /etc/os-release and wants "Alpine Linux".
const alpineOSRelease = `NAME="Alpine Linux"
ID=alpine
PRETTY_NAME="Alpine Linux (nodelet conformance stand-in over busybox)"
`

// agnhostImage is test/images/agnhost/Dockerfile over busybox instead of
// alpine: /agnhost and the agnhost-2 link, porter's localhost.crt and .key,
// /uploads, user user-defined-in-image (1000) in group-defined-in-image
// (50000), the tools of its packages; ENTRYPOINT /agnhost, CMD pause.
func agnhostImage(ctx context.Context, b *standIns) (v1.Image, error) {
	bin, err := readStatic(b.Agnhost)
	if err != nil {
		return nil, err
	}
	porter := filepath.Join(filepath.Dir(b.Agnhost), "agnhost-porter")
	crt, err := os.ReadFile(filepath.Join(porter, "localhost.crt"))
	if err != nil {
		return nil, fmt.Errorf("agnhost's porter certificate (next to the agnhost binary): %w", err)
	}
	key, err := os.ReadFile(filepath.Join(porter, "localhost.key"))
	if err != nil {
		return nil, fmt.Errorf("agnhost's porter key: %w", err)
	}
	var l layer
	if err := b.addTools(ctx, &l, agnhostTools); err != nil {
		return nil, err
	}
	l.file("agnhost", 0o755, bin)
	l.symlink("agnhost-2", "agnhost")
	l.file("localhost.crt", 0o644, crt)
	l.file("localhost.key", 0o600, key)
	l.dir("uploads", 0o755)
	l.file("etc/os-release", 0o644, []byte(alpineOSRelease))
	l.dir("home/user-defined-in-image", 0o755)
	l.file("etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/home:/bin/false\n"+
		"user-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh\n"))
	l.file("etc/group", 0o644, []byte("root:x:0:\nnobody:x:65534:\nuser-defined-in-image:x:1000:\n"+
		"group-defined-in-image:x:50000:user-defined-in-image\n"))
	return b.onBusybox(ctx, l, "agnhost over busybox", func(c *v1.Config) {
		c.Entrypoint = []string{"/agnhost"}
		c.Cmd = []string{"pause"}
		c.ExposedPorts = map[string]struct{}{"80/tcp": {}, "8080/tcp": {}, "8081/tcp": {}, "9376/tcp": {}, "5000/tcp": {}}
	})
}

// pageImage is test/images/kitten or nautilus: agnhost with the page's
// picture and data.json at /, serving them with test-webserver on :80 (the
// kubectl update-demo specs read data.json through the pod proxy; the image
// volume spec mounts kitten and reads its data.json).
func pageImage(name string) func(context.Context, *standIns) (v1.Image, error) {
	return func(ctx context.Context, b *standIns) (v1.Image, error) {
		base, err := agnhostImage(ctx, b)
		if err != nil {
			return nil, err
		}
		dir := filepath.Join(b.nextToAgnhost(b.Pages, "agnhost-pages"), name)
		var l layer
		for _, f := range []string{name + ".jpg", "data.json"} {
			data, err := os.ReadFile(filepath.Join(dir, f))
			if err != nil {
				return nil, fmt.Errorf("%s's page (test/images/%s/html): %w", name, name, err)
			}
			l.file(f, 0o644, data)
		}
		return withLayer(base, l, name+": its page over agnhost", func(c *v1.Config) {
			c.Cmd = []string{"test-webserver"}
		})
	}
}

// glibcDNSImage is test/images/glibc-dns-testing: Debian with dnsutils,
// whose dig (and getent) the DNS specs' probes run; here e2etools' over
// busybox (which brings nslookup). Its /coredns is left out: no
// [Conformance] spec runs it.
func glibcDNSImage(ctx context.Context, b *standIns) (v1.Image, error) {
	var l layer
	if err := b.addTools(ctx, &l, []string{"dig", "getent"}); err != nil {
		return nil, err
	}
	return b.onBusybox(ctx, l, "glibc-dns-testing: dig and getent over busybox", func(*v1.Config) {})
}

// hostpathpluginImage stands in for the CSI hostpath driver's image, which
// the e2e DRA specs run only as a proxy between the node agent and the driver
// inside e2e.test (e2etools' hostpathplugin), and as a shell for cat, mkdir,
// rm and ls (busybox's) in the driver's directories.
func hostpathpluginImage(ctx context.Context, b *standIns) (v1.Image, error) {
	var l layer
	if err := b.addTools(ctx, &l, []string{"hostpathplugin"}); err != nil {
		return nil, err
	}
	l.symlink("hostpathplugin", "/usr/bin/hostpathplugin")
	return b.onBusybox(ctx, l, "hostpathplugin: e2etools' proxy over busybox", func(c *v1.Config) {
		c.Entrypoint = []string{"/hostpathplugin"}
	})
}

// addTools puts e2etools in /usr/bin with a link for each of tools there,
// ahead of busybox's applets of the same name in PATH and in place of those
// in /usr/bin.
func (b *standIns) addTools(ctx context.Context, l *layer, tools []string) error {
	p, err := b.e2eTools(ctx)
	if err != nil {
		return err
	}
	bin, err := readStatic(p)
	if err != nil {
		return err
	}
	l.file("usr/bin/e2etools", 0o755, bin)
	for _, t := range tools {
		l.symlink("usr/bin/"+t, "e2etools")
	}
	return nil
}
