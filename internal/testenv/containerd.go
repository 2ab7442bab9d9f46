package testenv

import (
	"os"
	"testing"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/containerd"
	"github.com/nodelet/nodelet/internal/containerd/scratch"
)

// Paths shared by every test containerd on the machine (see package scratch).
const (
	DefaultSlotDir = scratch.DefaultSlotDir
	DefaultRootDir = scratch.DefaultRootDir
)

// ContainerdOptions tune StartContainerd. The zero value is what tests want.
type ContainerdOptions = scratch.Options

// Containerd is a private containerd for one test binary (or one test); see
// scratch.Containerd for its fields.
type Containerd struct{ *scratch.Containerd }

// StartContainerd starts a private containerd with the node's local images
// imported and a CNI bridge network of its own (scratch.Start). Call it from
// TestMain (and Stop after m.Run), or use NewContainerd in a test.
//
// Which containerd: opts.Major when set, else NODELET_TEST_CONTAINERD (""
// or "2" for containerd 2.x, the default, built and cached by
// scripts/containerd2.sh on first use; "1" for Debian's 1.6). So every
// runtime-facing package runs against 1.6 with NODELET_TEST_CONTAINERD=1
// go test ./pkg/.
func StartContainerd(opts ContainerdOptions) (*Containerd, error) {
	if opts.Major == 0 {
		m, err := ContainerdMajor()
		if err != nil {
			return nil, err
		}
		opts.Major = m
	}
	if opts.Major >= 2 && opts.Binary == "" {
		b, err := Containerd2()
		if err != nil {
			return nil, err
		}
		opts.Binary = b.Containerd
	}
	c, err := scratch.Start(opts)
	if err != nil {
		return nil, err
	}
	return &Containerd{c}, nil
}

// ShimPIDs, MountsUnder: see package scratch.
var (
	ShimPIDs    = scratch.ShimPIDs
	MountsUnder = scratch.MountsUnder
)

// RequiresRoot fails the test (it does not skip it: CI runs as root) when the
// test binary is not root. Tests of real containers, CNI and mounts need it.
func RequiresRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatalf("this test needs root (it runs containerd, runc, CNI and mounts); run it as root, e.g. sudo -E env PATH=$PATH go test ./...")
	}
}

// NewContainerd starts a private containerd for one test and stops it when
// the test ends.
func NewContainerd(t testing.TB, opts ContainerdOptions) *Containerd {
	t.Helper()
	RequiresRoot(t)
	c, err := StartContainerd(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	return c
}

// CRI is a client of a containerd's CRI services.
type CRI struct {
	Runtime runtimeapi.RuntimeServiceClient
	Image   runtimeapi.ImageServiceClient
	Conn    *grpc.ClientConn
}

// RuntimeClient returns a CRI runtime and image service client of c, closed
// when the test ends.
func (c *Containerd) RuntimeClient(t testing.TB) *CRI {
	t.Helper()
	conn, err := containerd.Dial(c.Address)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &CRI{
		Runtime: runtimeapi.NewRuntimeServiceClient(conn),
		Image:   runtimeapi.NewImageServiceClient(conn),
		Conn:    conn,
	}
}
