// Package units renders the files that run nodelet outside `nodelet up`
// from the one declaration in internal/component: the systemd units
// of deploy/systemd (one per process and nodelet.target) and the top-level
// docker-compose.yml. `nodelet systemd-units` and `nodelet compose` write
// them; tests fail when the checked-in copies are stale, so the declaration, the
// supervisor, the units and the compose file cannot drift apart.
package units

//go:generate go run ../../../cmd/nodelet systemd-units --out ../../../deploy/systemd
//go:generate go run ../../../cmd/nodelet compose --out ../../../docker-compose.yml

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/nodelet/nodelet/internal/cgroups"
)

// Where a node installs nodelet; the units and the compose file use the
// same paths, and deploy/systemd/README.md tells how to put things there.
const (
	// DefaultBinDir holds the nodelet-* binaries on a node.
	DefaultBinDir = "/usr/local/bin"
	// DefaultConfigPath is the node configuration every daemon reads.
	DefaultConfigPath = "/etc/nodelet/nodelet.yaml"
	// DefaultStateDir is node.stateDir's default.
	DefaultStateDir = "/var/lib/nodelet"
	// DefaultRootDir is node.rootDir's default.
	DefaultRootDir = "/var/lib/kubelet"
	// DefaultPodLogsDir is node.podLogsDir's default.
	DefaultPodLogsDir = "/var/log/pods"
	// DefaultCgroupRoot is runtime.cgroupRoot's default.
	DefaultCgroupRoot = "/nodelet"
	// Target is the unit that groups every nodelet unit.
	Target = "nodelet.target"
)

// Options shape the rendered files. The zero value is not useful; start
// from Defaults.
type Options struct {
	// BinDir holds nodelet-<name> on the node.
	BinDir string
	// ConfigPath is passed to every daemon as --config.
	ConfigPath string
	// StateDir is the node.stateDir of that configuration. It must lie
	// under /var/lib: the units create their parts of it with
	// StateDirectory=, owned by each daemon's user.
	StateDir string
	// PodLogsDir is its node.podLogsDir, under /var/log (LogsDirectory=).
	PodLogsDir string
	// CgroupRoot is its runtime.cgroupRoot, in cgroupfs form (/nodelet).
	CgroupRoot string
	// CgroupDriver is its runtime.cgroupDriver: cgroupfs or systemd. It
	// decides which directories the runtime's unit makes for the root.
	CgroupDriver string
	// RootDir is its node.rootDir (the kubelet's --root-dir).
	RootDir string
	// ContainerdVersion is its runtime.containerdVersion: which containerd
	// the containerd.service drop-in runs (2: the 2.x scripts/setup.sh
	// installs; 1: Debian's 1.6), with the config setup.sh wrote for it.
	ContainerdVersion int
	// WatchdogSec is systemd's WatchdogSec=. The daemons pet the watchdog
	// every bus.heartbeatInterval (5s by default) or every half of it,
	// whichever is shorter, so it must be well above the interval.
	WatchdogSec time.Duration
	// RestartSec is systemd's fixed delay before a restart.
	RestartSec time.Duration
	// Image is the container image every compose service runs.
	Image string
}

// Defaults are the options the checked-in files are rendered with.
func Defaults() Options {
	return Options{
		BinDir:            DefaultBinDir,
		ConfigPath:        DefaultConfigPath,
		StateDir:          DefaultStateDir,
		PodLogsDir:        DefaultPodLogsDir,
		CgroupRoot:        DefaultCgroupRoot,
		CgroupDriver:      cgroups.DriverCgroupfs,
		RootDir:           DefaultRootDir,
		ContainerdVersion: 2,
		WatchdogSec:       30 * time.Second,
		RestartSec:        2 * time.Second,
		Image:             "nodelet.local/nodelet:dev",
	}
}

// File is one rendered file; Name is relative to the output directory.
type File struct {
	Name string
	Data []byte
}

// WriteFiles writes files into dir (created if missing). Files already
// holding the same bytes are left alone.
func WriteFiles(dir string, files []File) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, f := range files {
		p := filepath.Join(dir, f.Name)
		if old, err := os.ReadFile(p); err == nil && bytes.Equal(old, f.Data) {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, f.Data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// Stale compares files with what dir holds and names every file that is
// missing or differs. Other files in dir are not looked at.
func Stale(dir string, files []File) ([]string, error) {
	var stale []string
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(dir, f.Name))
		if errors.Is(err, fs.ErrNotExist) {
			stale = append(stale, f.Name+" (missing)")
			continue
		}
		if err != nil {
			return nil, err
		}
		if !bytes.Equal(b, f.Data) {
			stale = append(stale, f.Name+" (differs)")
		}
	}
	sort.Strings(stale)
	return stale, nil
}

// seconds renders a duration the way systemd and compose both read it.
func seconds(d time.Duration) string {
	if d%time.Second != 0 {
		return fmt.Sprintf("%dms", d.Milliseconds())
	}
	return fmt.Sprintf("%ds", int(d.Seconds()))
}
