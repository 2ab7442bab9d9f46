// Command setuptool is scripts/setup.sh's helper: it builds and imports the
// node's local images and writes the containerd and CNI configuration, by
// calling internal/{images,containerd,cni}.
//
//	setuptool images [--cache DIR] [--import SOCKET]   (prints "REF ID TARBALL" per image, or with --import what it imported)
//	setuptool containerd-config --out FILE [--root DIR] [--state DIR] [--socket PATH] [--cni-conf-dir DIR] [--cni-bin-dir DIR] [--sandbox-image REF] [--major 2 --binary PATH]
//	setuptool cni-config --out-dir DIR --subnet CIDR [--bridge NAME] [--name NETWORK] [--file NAME] [--cni-bin-dir DIR]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/cni"
	"github.com/nodelet/nodelet/internal/containerd"
	"github.com/nodelet/nodelet/internal/images"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "setuptool:", err)
		os.Exit(1)
	}
}

const usage = `usage:
  setuptool images [--cache DIR] [--import SOCKET]
  setuptool containerd-config --out FILE [--root DIR] [--state DIR] [--socket PATH] [--cni-conf-dir DIR] [--cni-bin-dir DIR] [--sandbox-image REF] [--major 2 --binary PATH]
  setuptool cni-config --out-dir DIR --subnet CIDR [--bridge NAME] [--name NETWORK] [--file NAME] [--cni-bin-dir DIR]`

func run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return errors.New(usage)
	}
	switch args[0] {
	case "images":
		return imagesCmd(ctx, args[1:])
	case "containerd-config":
		return containerdConfigCmd(args[1:])
	case "cni-config":
		return cniConfigCmd(ctx, args[1:])
	default:
		return fmt.Errorf("unknown subcommand %q\n%s", args[0], usage)
	}
}

func imagesCmd(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("images", flag.ContinueOnError)
	cache := fs.String("cache", images.DefaultCacheDir(), "directory of the image tarballs")
	address := fs.String("import", "", "import the images into the containerd at this socket (namespace k8s.io)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	tars, err := images.EnsureImages(ctx, *cache)
	if err != nil {
		return err
	}
	for _, t := range tars {
		if *address == "" {
			fmt.Printf("%s %s %s\n", t.Ref, t.ID, t.Path)
			continue
		}
		if have, err := imageID(ctx, *address, t.Ref); err == nil && have == t.ID.String() {
			fmt.Printf("%s already imported into %s\n", t.Ref, *address)
			continue
		}
		if err := images.Import(ctx, *address, "k8s.io", t.Path); err != nil {
			return err
		}
		fmt.Printf("%s imported into %s\n", t.Ref, *address)
	}
	return nil
}

// imageID asks the CRI plugin at socket for the ID of ref ("" when absent).
func imageID(ctx context.Context, socket, ref string) (string, error) {
	conn, err := containerd.Dial(socket)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := runtimeapi.NewImageServiceClient(conn).ImageStatus(ctx,
		&runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
	if err != nil {
		return "", err
	}
	return st.GetImage().GetId(), nil
}

func containerdConfigCmd(args []string) error {
	fs := flag.NewFlagSet("containerd-config", flag.ContinueOnError)
	out := fs.String("out", "", "where to write config.toml (required)")
	var cfg containerd.Config
	fs.StringVar(&cfg.Root, "root", "", "containerd root dir (default "+containerd.DefaultRoot+", with --major 2 "+containerd.DefaultRoot2+")")
	fs.StringVar(&cfg.State, "state", containerd.DefaultState, "containerd state dir")
	fs.StringVar(&cfg.Socket, "socket", "", "gRPC/CRI socket (default <state>/containerd.sock)")
	fs.StringVar(&cfg.CNIConfDir, "cni-conf-dir", containerd.DefaultCNIConfDir, "CNI conflist dir")
	fs.StringVar(&cfg.CNIBinDir, "cni-bin-dir", containerd.DefaultCNIBinDir, "CNI plugin dir")
	fs.StringVar(&cfg.SandboxImage, "sandbox-image", containerd.DefaultSandboxImage, "pause image")
	fs.BoolVar(&cfg.SystemdCgroup, "systemd-cgroup", false, "runc uses the systemd cgroup driver (runtime.cgroupDriver systemd)")
	fs.IntVar(&cfg.Major, "major", 1, "containerd's major version: 1 (1.6, config version 2) or 2 (2.x, config version 3)")
	fs.StringVar(&cfg.Binary, "binary", "", "with --major 2: the containerd 2.x binary, whose runc shim beside it the config names (default "+containerd.DefaultBinary2+")")
	fs.StringVar(&cfg.ShimBinary, "shim", "", "with --major 2: the runc shim (default containerd-shim-runc-v2 beside --binary)")
	criGroup := fs.String("cri-group", "", "group that may use the CRI socket (its gid in [grpc]), when it exists")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *criGroup != "" {
		gid, err := containerd.CRIGroupGID(*criGroup)
		if err != nil {
			return fmt.Errorf("containerd-config: --cri-group %s: %w", *criGroup, err)
		}
		cfg.GID = gid
	}
	if *out == "" {
		return errors.New("containerd-config: --out is required")
	}
	if cfg.Major != 1 && cfg.Major != 2 {
		return fmt.Errorf("containerd-config: --major %d: want 1 or 2", cfg.Major)
	}
	return containerd.WriteConfig(cfg, *out)
}

func cniConfigCmd(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("cni-config", flag.ContinueOnError)
	outDir := fs.String("out-dir", "", "CNI conf dir to write into (required)")
	file := fs.String("file", cni.DefaultFileName, "conflist file name")
	binDir := fs.String("cni-bin-dir", containerd.DefaultCNIBinDir, "CNI plugin dir to validate against")
	var opts cni.Options
	fs.StringVar(&opts.Subnet, "subnet", "", "pod CIDR (required)")
	fs.StringVar(&opts.BridgeName, "bridge", cni.DefaultBridgeName, "bridge name")
	fs.StringVar(&opts.NetworkName, "name", cni.DefaultNetworkName, "network name")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *outDir == "" {
		return errors.New("cni-config: --out-dir is required")
	}
	conf, err := cni.Render(opts)
	if err != nil {
		return err
	}
	if err := cni.Validate(ctx, conf, []string{*binDir}); err != nil {
		return err
	}
	// containerd brings up lo with the loopback plugin from the same dir.
	if err := cni.CheckPlugins(ctx, []string{*binDir}, cni.DefaultCNIVersion, "loopback"); err != nil {
		return err
	}
	return cni.WriteAtomic(*outDir, *file, conf)
}
