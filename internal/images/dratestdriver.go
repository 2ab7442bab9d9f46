package images

import (
	"context"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// DRATestDriverImage is the image of the Kubernetes e2e suite's DRA test
// driver (k8s.io/kubernetes/test/e2e/dra/test-driver at the module's
// v1.37.2). Upstream publishes no image of it (its e2e specs run the
// driver in the test binary and proxy the kubelet's gRPC to it), hence a
// local name, tagged with the Kubernetes version it is built from.
const DRATestDriverImage = "nodelet.local/dra-test-driver:v1.37.2"

// draTestDriverRecipe is bumped whenever DRATestDriverImageFrom changes, so
// that tarballs of an older recipe in the cache are not reused.
const draTestDriverRecipe = "t1"

// DRATestDriverImageFrom builds the image around a static dra-test-driver
// binary: /dra-test-driver as the entrypoint (a DaemonSet's args pick the
// kubelet-plugin subcommand and its flags), over the busybox image (a
// shell, for a test's exec into the driver's container).
func DRATestDriverImageFrom(ctx context.Context, bin, busybox string) (v1.Image, error) {
	return binaryOnBusybox(ctx, bin, busybox, "dra-test-driver", DRATestDriverImage)
}

// BuildDRATestDriver returns the DRA test driver's image tarball for the
// static binary at bin (`scripts/controlplane.sh tools dra-test-driver`
// builds it from the Kubernetes module), tagged DRATestDriverImage, from
// cacheDir (DefaultCacheDir() when empty) or built into it; named after the
// binary's content, as BuildSampleDevicePlugin's.
func BuildDRATestDriver(ctx context.Context, bin, cacheDir string) (Tarball, error) {
	return buildFromBinary(ctx, bin, cacheDir, DRATestDriverImage, draTestDriverRecipe,
		func() (v1.Image, error) { return DRATestDriverImageFrom(ctx, bin, "") })
}
