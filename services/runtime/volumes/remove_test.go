package volumes

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// The test binary runs itself without CAP_DAC_OVERRIDE and
// CAP_DAC_READ_SEARCH (as nodelet-runtime's unit runs it) to remove a tree
// a container left behind under another uid with closed directories.
func TestRemoveAllWithoutDACOverride(t *testing.T) {
	if dir := os.Getenv("NODELET_TEST_REMOVEALL"); dir != "" {
		if err := RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		return
	}
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "pod")
	closed := filepath.Join(dir, "volumes", "empty-dir", "cache", "private")
	if err := os.MkdirAll(filepath.Join(closed, "deeper"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(closed, "deeper", "f"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Owned by uid 1000, no access for anyone else; a link out of the tree
	// that the removal must not follow.
	outside := filepath.Join(t.TempDir(), "outside")
	if err := os.Mkdir(outside, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(closed, "out")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(closed, "deeper", "f"), filepath.Join(closed, "deeper"), closed} {
		if err := os.Lchown(p, 1000, 1000); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(closed, "deeper"), 0o500); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(closed, 0o700); err != nil {
		t.Fatal(err)
	}

	run := func(env string) ([]byte, error) {
		cmd := exec.Command(setpriv, "--bounding-set", "-dac_override,-dac_read_search", "--inh-caps", "-all",
			os.Args[0], "-test.run", "^TestRemoveAllWithoutDACOverride$", "-test.v")
		cmd.Env = append(os.Environ(), env)
		return cmd.CombinedOutput()
	}
	// Without the fallback (plain os.RemoveAll) the same process fails:
	// the test proves the capabilities are really dropped.
	if out, err := exec.Command(setpriv, "--bounding-set", "-dac_override,-dac_read_search", "rm", "-rf", dir).CombinedOutput(); err == nil {
		t.Fatalf("rm -rf without CAP_DAC_OVERRIDE removed the closed tree; the test proves nothing: %s", out)
	}
	if out, err := run("NODELET_TEST_REMOVEALL=" + dir); err != nil {
		t.Fatalf("RemoveAll without CAP_DAC_OVERRIDE: %v\n%s", err, out)
	}
	if _, err := os.Lstat(dir); !os.IsNotExist(err) {
		t.Fatalf("%s is still there: %v", dir, err)
	}
	if _, err := os.Stat(outside); err != nil {
		t.Fatalf("the link's target outside the tree went too: %v", err)
	}
}
