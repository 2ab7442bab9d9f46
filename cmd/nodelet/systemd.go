package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/pflag"

	"github.com/nodelet/nodelet/internal/component"
	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/internal/tools/units"
)

func init() {
	commands = append(commands,
		command{"systemd-units", "write the systemd units of every process, nodelet.target and the sysusers.d file: systemd-units [--out DIR] [--state-dir DIR] [--pod-logs-dir DIR] [--cgroup-root PATH] [--check]", runSystemdUnits},
		command{"compose", "write docker-compose.yml from the component declaration: compose [--out FILE] [--check]", runCompose})
}

// renderFlags are the flags both generators share.
func renderFlags(name string) (*pflag.FlagSet, *units.Options, *bool) {
	flags := pflag.NewFlagSet(name, pflag.ContinueOnError)
	o := units.Defaults()
	flags.StringVar(&o.BinDir, "bin-dir", o.BinDir, "where the nodelet-* binaries are installed")
	flags.StringVar(&o.ConfigPath, "config-path", o.ConfigPath, "the node configuration every daemon reads")
	check := flags.Bool("check", false, "write nothing; exit 1 when the files on disk differ from the declaration")
	return flags, &o, check
}

func runSystemdUnits(args []string) int {
	flags, o, check := renderFlags("nodelet systemd-units")
	out := flags.String("out", "deploy/systemd", "directory to write the units into")
	flags.StringVar(&o.StateDir, "state-dir", o.StateDir, "the configuration's node.stateDir (below /var/lib)")
	flags.StringVar(&o.PodLogsDir, "pod-logs-dir", o.PodLogsDir, "the configuration's node.podLogsDir (below /var/log)")
	flags.StringVar(&o.CgroupRoot, "cgroup-root", o.CgroupRoot, "the configuration's runtime.cgroupRoot")
	flags.StringVar(&o.CgroupDriver, "cgroup-driver", o.CgroupDriver, "the configuration's runtime.cgroupDriver (cgroupfs or systemd)")
	flags.StringVar(&o.RootDir, "root-dir", o.RootDir, "the configuration's node.rootDir")
	flags.IntVar(&o.ContainerdVersion, "containerd-version", o.ContainerdVersion, "the configuration's runtime.containerdVersion: the containerd the containerd.service drop-in runs (2: the 2.x scripts/setup.sh installs, 1: Debian's 1.6)")
	if err := flags.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		return config.ExitCode
	}
	files, err := units.SystemdUnits(component.Declared, *o)
	if err != nil {
		fmt.Fprintf(os.Stderr, "nodelet systemd-units: %v\n", err)
		return 1
	}
	return writeOrCheck("nodelet systemd-units", *out, files, *check)
}

func runCompose(args []string) int {
	flags, o, check := renderFlags("nodelet compose")
	out := flags.String("out", units.ComposeFile, "file to write")
	flags.StringVar(&o.Image, "image", o.Image, "image every service runs")
	if err := flags.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		return config.ExitCode
	}
	data, err := units.Compose(component.Declared, *o)
	if err != nil {
		fmt.Fprintf(os.Stderr, "nodelet compose: %v\n", err)
		return 1
	}
	return writeOrCheck("nodelet compose", filepath.Dir(*out), []units.File{{Name: filepath.Base(*out), Data: data}}, *check)
}

func writeOrCheck(cmd, dir string, files []units.File, check bool) int {
	if check {
		stale, err := units.Stale(dir, files)
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", cmd, err)
			return 1
		}
		for _, s := range stale {
			fmt.Fprintf(os.Stderr, "%s: %s/%s is stale\n", cmd, dir, s)
		}
		if len(stale) > 0 {
			return 1
		}
		return 0
	}
	if err := units.WriteFiles(dir, files); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", cmd, err)
		return 1
	}
	for _, f := range files {
		fmt.Fprintf(os.Stderr, "%s: wrote %s/%s\n", cmd, dir, f.Name)
	}
	return 0
}
