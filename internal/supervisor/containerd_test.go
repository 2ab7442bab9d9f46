package supervisor

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/nodelet/nodelet/internal/component"
	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/internal/containerd"
)

// TestManagedContainerdConfigPerSocket: setup.sh's socket writes setup.sh's
// config file; any other socket renders its own, in its state dir.
func TestManagedContainerdConfigPerSocket(t *testing.T) {
	cfg := config.Defaults()
	cfg.Runtime.Endpoint = "unix://" + containerd.DefaultState + "/containerd.sock"
	c := managedContainerd(cfg)
	if c.Root != containerd.DefaultRoot2 || c.ConfigFile != cfg.Runtime.ContainerdConfig {
		t.Fatalf("setup.sh's socket: root %s, config %s", c.Root, c.ConfigFile)
	}
	cfg.Runtime.Endpoint = "unix:///run/containerd/containerd.sock"
	c = managedContainerd(cfg).WithDefaults()
	if c.ConfigFile != "/run/containerd/config.toml" || c.State != "/run/containerd" {
		t.Fatalf("another socket: %+v", c)
	}
	// The default: setup.sh's containerd 2.x build, its own root, a
	// version-3 config; runtime.containerdBinary another build.
	if c.Major != 2 || c.Root != containerd.DefaultRoot2 || c.Binary != containerd.DefaultBinary2 ||
		c.ShimBinary != filepath.Join(filepath.Dir(containerd.DefaultBinary2), "containerd-shim-runc-v2") || !strings.Contains(c.Render(), "version = 3\n") {
		t.Fatalf("default: containerd 2.x with a version-3 config: %+v", c)
	}
	cfg.Runtime.ContainerdBinary = "/opt/containerd/bin/containerd"
	if c = managedContainerd(cfg).WithDefaults(); c.Binary != "/opt/containerd/bin/containerd" || c.ShimBinary != "/opt/containerd/bin/containerd-shim-runc-v2" {
		t.Fatalf("containerdBinary: %+v", c)
	}
	// runtime.containerdVersion 1: Debian's 1.6 on 1.6's root with a
	// version-2 config (setup.sh --containerd=1).
	cfg.Runtime.ContainerdVersion, cfg.Runtime.ContainerdBinary = 1, ""
	c = managedContainerd(cfg).WithDefaults()
	if c.Major != 1 || c.Root != containerd.DefaultRoot || c.Binary != containerd.DefaultBinary || !strings.Contains(c.Render(), "version = 2\n") {
		t.Fatalf("containerdVersion 1: Debian's 1.6 with a version-2 config: %+v", c)
	}
}

// TestManagedContainerdFollowsTheCgroupDriver: the managed containerd's
// runc uses the node's cgroup driver (SystemdCgroup = true for
// runtime.cgroupDriver systemd), on both majors, so nodelet-runtime's
// start-up check of the two agrees (the kubelet leaves this to the
// operator; a mismatch is refused at start).
func TestManagedContainerdFollowsTheCgroupDriver(t *testing.T) {
	for _, tc := range []struct {
		driver string
		major  int
		want   bool
	}{
		{"cgroupfs", 1, false}, {"systemd", 1, true}, {"cgroupfs", 2, false}, {"systemd", 2, true},
	} {
		cfg := config.Defaults()
		cfg.Runtime.CgroupDriver, cfg.Runtime.ContainerdVersion = tc.driver, tc.major
		c := managedContainerd(cfg).WithDefaults()
		if c.SystemdCgroup != tc.want || !strings.Contains(c.Render(), fmt.Sprintf("SystemdCgroup = %v\n", tc.want)) {
			t.Errorf("%s on %d.x: SystemdCgroup %v, want %v:\n%s", tc.driver, tc.major, c.SystemdCgroup, tc.want, c.Render())
		}
	}
}

// TestRootHeldNamesTheHolder: a root whose metadata another process holds
// is reported with that process's pid.
func TestRootHeldNamesTheHolder(t *testing.T) {
	root := t.TempDir()
	meta := filepath.Join(root, "io.containerd.metadata.v1.bolt", "meta.db")
	if err := os.MkdirAll(filepath.Dir(meta), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, held := rootHeld(root); held {
		t.Fatal("a root without a database is held")
	}
	f, err := os.Create(meta)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, held := rootHeld(root); held {
		t.Fatal("an unlocked root is held")
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	holder, held := rootHeld(root)
	if !held || !strings.Contains(holder, "pid ") || strings.Contains(holder, "unknown") {
		t.Fatalf("held %v by %q", held, holder)
	}
}

// TestManagedContainerdGivesCRIGroupTheSocket: with componentUsers the
// managed containerd's socket belongs to group nodelet-cri, which the
// daemons of their own users that talk to CRI hold; without, root's.
func TestManagedContainerdGivesCRIGroupTheSocket(t *testing.T) {
	gid, err := containerd.CRIGroupGID(component.CRIGroup)
	if err != nil {
		t.Fatal(err)
	}
	if gid == 0 {
		t.Skipf("no group %s on this machine (scripts/setup.sh makes it)", component.CRIGroup)
	}
	cfg := config.Defaults()
	if c := managedContainerd(cfg); c.GID != 0 {
		t.Errorf("without componentUsers: gid %d", c.GID)
	}
	cfg.Supervisor.ComponentUsers = true
	if c := managedContainerd(cfg); c.GID != gid || !strings.Contains(c.Render(), fmt.Sprintf("gid = %d\n", gid)) {
		t.Errorf("with componentUsers: gid %d, want %d (%s)", c.GID, gid, component.CRIGroup)
	}
}
