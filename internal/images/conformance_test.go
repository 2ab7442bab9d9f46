package images

import (
	"archive/tar"
	"context"
	"os"
	"path/filepath"
	"testing"
)

// The stand-ins hold what the e2e specs rely on, as their Dockerfiles in
// the Kubernetes module's test/images say.
func TestConformanceImages(t *testing.T) {
	dir := t.TempDir()
	// Any static binary will do for agnhost and nnp here: busybox.
	porter := filepath.Join(dir, "agnhost-porter")
	if err := os.MkdirAll(porter, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"localhost.crt", "localhost.key"} {
		if err := os.WriteFile(filepath.Join(porter, f), []byte(f), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	agnhost := filepath.Join(dir, "agnhost")
	if err := os.Symlink(DefaultBusybox, agnhost); err != nil {
		t.Fatal(err)
	}
	tars, err := BuildConformanceImages(context.Background(), ConformanceInputs{Agnhost: agnhost, Nnp: DefaultBusybox, Shell: "/bin/bash-static"}, filepath.Join(dir, "out"))
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

	hdrs, _, _ := files(t, byRef[e2eRegistry+"busybox:1.37.0-2"], e2eRegistry+"busybox:1.37.0-2")
	if h := hdrs["bin/sh"]; h == nil || h.Linkname != "/bin/bash" || hdrs["bin/bash"] == nil {
		t.Errorf("busybox /bin/sh = %+v, want the static bash", h)
	}
	for _, applet := range []string{"bin/sysctl", "bin/wget", "bin/nc"} {
		if h := hdrs[applet]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != "/bin/busybox" {
			t.Errorf("busybox %s = %+v, want a link to /bin/busybox", applet, h)
		}
	}

	hdrs, small, cfg := files(t, byRef[e2eRegistry+"agnhost:2.66.1"], e2eRegistry+"agnhost:2.66.1")
	if h := hdrs["agnhost"]; h == nil || h.Mode != 0o755 {
		t.Errorf("/agnhost = %+v", h)
	}
	if h := hdrs["agnhost-2"]; h == nil || h.Linkname != "agnhost" {
		t.Errorf("/agnhost-2 = %+v", h)
	}
	if h := hdrs["usr/bin/curl"]; h == nil || h.Mode != 0o755 || !contains(small["usr/bin/curl"], "exec wget") {
		t.Errorf("/usr/bin/curl = %+v", h)
	}
	if small["localhost.key"] != "localhost.key" || dirHeader(hdrs, "uploads") == nil {
		t.Errorf("porter's files or /uploads missing")
	}
	if !contains(small["etc/passwd"], "user-defined-in-image:x:1000:") || !contains(small["etc/group"], "group-defined-in-image:x:50000:user-defined-in-image") {
		t.Errorf("passwd %q group %q", small["etc/passwd"], small["etc/group"])
	}
	if len(cfg.Config.Entrypoint) != 1 || cfg.Config.Entrypoint[0] != "/agnhost" || len(cfg.Config.Cmd) != 1 || cfg.Config.Cmd[0] != "pause" {
		t.Errorf("agnhost entrypoint %q cmd %q", cfg.Config.Entrypoint, cfg.Config.Cmd)
	}

	hdrs, _, _ = files(t, byRef[e2eRegistry+"nonewprivs:1.4"], e2eRegistry+"nonewprivs:1.4")
	if h := hdrs["usr/local/bin/nnp"]; h == nil || h.Mode != 0o4755 {
		t.Errorf("nnp = %+v, want setuid 4755", h)
	}
	if _, _, cfg = files(t, byRef[e2eRegistry+"nonroot:1.5"], e2eRegistry+"nonroot:1.5"); cfg.Config.User != "1234" {
		t.Errorf("nonroot user = %q", cfg.Config.User)
	}
}
