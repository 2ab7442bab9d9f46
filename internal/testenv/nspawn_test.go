package testenv

import (
	"os"
	"path/filepath"
	"testing"
)

// TestDebianMirror: the bookworm archive is found in one-line and deb822
// sources, security and other suites are passed over, and without any
// the default is deb.debian.org.
func TestDebianMirror(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	oneLine := write("a.list", "# comment\ndeb http://security.example/debian-security bookworm-security main\n"+
		"deb [arch=amd64 signed-by=/k.gpg] http://mirror.example/debian bookworm main contrib\n")
	deb822 := write("b.sources", "Types: deb\nURIs: http://sec.example/debian-security\nSuites: bookworm-security\nComponents: main\n\n"+
		"Types: deb\nURIs: http://other.example/debian\nSuites: bookworm bookworm-updates\nComponents: main\n")
	none := write("c.list", "deb https://packages.example/apt cloud-sdk-bookworm main\n")
	for _, tc := range []struct {
		files []string
		want  string
	}{
		{[]string{none, oneLine}, "http://mirror.example/debian"},
		{[]string{deb822, oneLine}, "http://other.example/debian"},
		{[]string{none, filepath.Join(dir, "missing.list")}, "http://deb.debian.org/debian"},
	} {
		if got := debianMirror(tc.files); got != tc.want {
			t.Errorf("debianMirror(%v) = %s, want %s", tc.files, got, tc.want)
		}
	}
	t.Logf("this machine's: %s", DebianMirror())
}
