package images

import (
	"archive/tar"
	"context"
	"os"
	"path/filepath"
	"testing"
)

// fakeConformanceInputs stands every binary in with busybox (any static
// binary will do here) and writes the files the harness's build leaves next
// to agnhost.
func fakeConformanceInputs(t *testing.T) ConformanceInputs {
	t.Helper()
	dir := t.TempDir()
	write := func(p, data string) {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"localhost.crt", "localhost.key"} {
		write(filepath.Join(dir, "agnhost-porter", f), f)
	}
	for _, page := range []string{"kitten", "nautilus"} {
		write(filepath.Join(dir, "agnhost-pages", page, page+".jpg"), "JPEG")
		write(filepath.Join(dir, "agnhost-pages", page, "data.json"), `{"image": "`+page+`.jpg"}`)
	}
	for _, bin := range []string{"agnhost", "sample-apiserver", "etcd-static"} {
		if err := os.Symlink(DefaultBusybox, filepath.Join(dir, bin)); err != nil {
			t.Fatal(err)
		}
	}
	return ConformanceInputs{Agnhost: filepath.Join(dir, "agnhost"), Nnp: DefaultBusybox,
		Shell: "/bin/bash-static", E2ETools: DefaultBusybox}
}

// The stand-ins hold what the e2e specs rely on, as their Dockerfiles in
// the Kubernetes module's test/images say.
func TestConformanceImages(t *testing.T) {
	in, out := fakeConformanceInputs(t), t.TempDir()
	stale := filepath.Join(out, "c1-"+CacheFileName(e2eRegistry+"agnhost:2.66.1"))
	if err := os.WriteFile(stale, []byte("an older recipe's"), 0o644); err != nil {
		t.Fatal(err)
	}
	tars, err := BuildConformanceImages(context.Background(), in, out)
	if err != nil {
		t.Fatal(err)
	}
	byRef := map[string]string{}
	for _, tb := range tars {
		byRef[tb.Ref] = tb.Path
	}
	if len(byRef) != len(ConformanceImages()) {
		t.Fatalf("built %d images, want %d", len(byRef), len(ConformanceImages()))
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("an older recipe's tarball is left: %v", err)
	}
	// Each tag is an image of its own, as the real ones are.
	ids := map[string]string{}
	for _, tb := range tars {
		if other, ok := ids[tb.ID.String()]; ok {
			t.Errorf("%s and %s are one image (%s)", tb.Ref, other, tb.ID)
		}
		ids[tb.ID.String()] = tb.Ref
	}
	image := func(ref string) (map[string]*tar.Header, map[string]string, []string, []string) {
		hdrs, small, cfg := files(t, byRef[ref], ref)
		return hdrs, small, cfg.Config.Entrypoint, cfg.Config.Cmd
	}
	link := func(hdrs map[string]*tar.Header, name, target string) {
		t.Helper()
		if h := hdrs[name]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != target {
			t.Errorf("%s = %+v, want a link to %s", name, h, target)
		}
	}

	// /bin/sh is busybox's ash (the read-only root spec compares its
	// message), `sh` found in PATH is bash (the env specs print names ash
	// drops), and /bin/bash is there (the probe specs run it).
	hdrs, _, _, _ := image(e2eRegistry + "busybox:1.37.0-2")
	link(hdrs, "bin/sh", "/bin/busybox")
	link(hdrs, "usr/local/bin/sh", "/bin/bash")
	if h := hdrs["bin/bash"]; h == nil || h.Typeflag != tar.TypeReg {
		t.Errorf("bin/bash = %+v, want the static bash", h)
	}
	for _, applet := range []string{"bin/sysctl", "bin/wget", "bin/nc", "bin/env"} {
		link(hdrs, applet, "/bin/busybox")
	}

	// agnhost: its tools are e2etools (busybox's nc has no -u, its wget
	// crashed on -T).
	hdrs, small, entry, cmd := image(e2eRegistry + "agnhost:2.66.1")
	if h := hdrs["agnhost"]; h == nil || h.Mode != 0o755 {
		t.Errorf("/agnhost = %+v", h)
	}
	link(hdrs, "agnhost-2", "agnhost")
	// Scripts find e2etools: busybox's ash would run its own applets.
	link(hdrs, "bin/sh", "/bin/bash")
	for _, tool := range []string{"curl", "nc", "dig", "getent"} {
		link(hdrs, "usr/bin/"+tool, "e2etools")
	}
	if h := hdrs["usr/bin/e2etools"]; h == nil || h.Mode != 0o755 {
		t.Errorf("/usr/bin/e2etools = %+v", h)
	}
	if small["localhost.key"] != "localhost.key" || dirHeader(hdrs, "uploads") == nil {
		t.Errorf("porter's files or /uploads missing")
	}
	if !contains(small["etc/passwd"], "user-defined-in-image:x:1000:") || !contains(small["etc/group"], "group-defined-in-image:x:50000:user-defined-in-image") {
		t.Errorf("passwd %q group %q", small["etc/passwd"], small["etc/group"])
	}
	if len(entry) != 1 || entry[0] != "/agnhost" || len(cmd) != 1 || cmd[0] != "pause" {
		t.Errorf("agnhost entrypoint %q cmd %q", entry, cmd)
	}

	// kitten and nautilus: agnhost with a page, served by test-webserver;
	// the image volume spec reads data.json and an Alpine os-release.
	for _, page := range []string{"kitten", "nautilus"} {
		hdrs, small, entry, cmd := image(e2eRegistry + page + ":1.8")
		if small[page+".jpg"] != "JPEG" || !contains(small["data.json"], page+".jpg") || !contains(small["etc/os-release"], "Alpine Linux") {
			t.Errorf("%s: jpg %q data.json %q os-release %q", page, small[page+".jpg"], small["data.json"], small["etc/os-release"])
		}
		link(hdrs, "usr/bin/curl", "e2etools")
		if len(entry) != 1 || entry[0] != "/agnhost" || len(cmd) != 1 || cmd[0] != "test-webserver" {
			t.Errorf("%s entrypoint %q cmd %q", page, entry, cmd)
		}
	}

	hdrs, _, _, _ = image(e2eRegistry + "glibc-dns-testing:2.1.1")
	link(hdrs, "usr/bin/dig", "e2etools")
	link(hdrs, "usr/bin/getent", "e2etools")

	// hostpathplugin: the DRA specs exec /hostpathplugin (the proxy) and
	// busybox's cat, mkdir, rm and ls.
	hdrs, _, entry, _ = image("registry.k8s.io/sig-storage/hostpathplugin:v1.17.1")
	link(hdrs, "hostpathplugin", "/usr/bin/hostpathplugin")
	link(hdrs, "usr/bin/hostpathplugin", "e2etools")
	for _, applet := range []string{"bin/cat", "bin/mkdir", "bin/rm", "bin/ls", "bin/sleep"} {
		link(hdrs, applet, "/bin/busybox")
	}
	if len(entry) != 1 || entry[0] != "/hostpathplugin" {
		t.Errorf("hostpathplugin entrypoint %q", entry)
	}

	hdrs, _, entry, _ = image(e2eRegistry + "sample-apiserver:1.29.2")
	if hdrs["sample-apiserver"] == nil || len(entry) != 1 || entry[0] != "/sample-apiserver" {
		t.Errorf("sample-apiserver: %+v, entrypoint %q", hdrs["sample-apiserver"], entry)
	}
	if hdrs, _, _, _ = image("registry.k8s.io/etcd:3.7.0-0"); hdrs["usr/local/bin/etcd"] == nil {
		t.Errorf("etcd: no /usr/local/bin/etcd")
	}

	hdrs, _, _, _ = image(e2eRegistry + "nonewprivs:1.4")
	if h := hdrs["usr/local/bin/nnp"]; h == nil || h.Mode != 0o4755 {
		t.Errorf("nnp = %+v, want setuid 4755", h)
	}
	if _, _, cfg := files(t, byRef[e2eRegistry+"nonroot:1.5"], e2eRegistry+"nonroot:1.5"); cfg.Config.User != "1234" {
		t.Errorf("nonroot user = %q", cfg.Config.User)
	}

	// The aggregator's binaries are built apart; without them their two
	// stand-ins are left out and the rest are made (here: found in the cache).
	aggregator := []string{e2eRegistry + "sample-apiserver:1.29.2", "registry.k8s.io/etcd:3.7.0-0"}
	for _, ref := range aggregator {
		if err := os.Remove(byRef[ref]); err != nil {
			t.Fatal(err)
		}
	}
	in.SampleAPIServer = filepath.Join(t.TempDir(), "absent")
	in.Etcd = in.SampleAPIServer
	if tars, err = BuildConformanceImages(context.Background(), in, out); err != nil {
		t.Fatal(err)
	}
	for _, tb := range tars {
		if tb.Ref == aggregator[0] || tb.Ref == aggregator[1] {
			t.Errorf("%s built without its binary", tb.Ref)
		}
	}
	if len(tars) != len(ConformanceImages())-2 {
		t.Errorf("without the aggregator's binaries: %d images, want all but 2 of %d", len(tars), len(ConformanceImages()))
	}
}
