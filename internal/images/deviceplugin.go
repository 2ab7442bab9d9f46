package images

import (
	"context"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// SampleDevicePluginImage is the sample device plugin's image as
// k8s.io/kubernetes/test/utils/image names it in v1.37 (SampleDevicePlugin):
// test/images/sample-device-plugin, the plugin the kubelet's own e2e tests
// run as a DaemonSet (it serves example.com/resource with devices Dev-1 and
// Dev-2).
const SampleDevicePluginImage = e2eRegistry + "sample-device-plugin:1.7"

// sampleDevicePluginRecipe is bumped whenever SampleDevicePluginImageFrom
// changes, so that tarballs of an older recipe in the cache are not reused.
const sampleDevicePluginRecipe = "d1"

// SampleDevicePluginImageFrom builds the image around a static
// sampledeviceplugin binary as its Dockerfile does (ADD sampledeviceplugin
// /sampledeviceplugin, ENTRYPOINT ["/sampledeviceplugin",
// "-alsologtostderr"]), over the busybox image instead of alpine: a shell
// and /tmp, where the plugin creates its fake device files.
func SampleDevicePluginImageFrom(ctx context.Context, bin, busybox string) (v1.Image, error) {
	return binaryOnBusybox(ctx, bin, busybox, "sampledeviceplugin", SampleDevicePluginImage, "-alsologtostderr")
}

// binaryOnBusybox is the busybox image with the static binary at bin as
// /name, its entrypoint (with args), tagged ref.
func binaryOnBusybox(ctx context.Context, bin, busybox, name, ref string, args ...string) (v1.Image, error) {
	data, err := readStatic(bin)
	if err != nil {
		return nil, err
	}
	base, err := BusyboxImageFrom(ctx, busybox)
	if err != nil {
		return nil, err
	}
	var l layer
	l.file(name, 0o755, data)
	img, err := withLayer(base, l, "ADD "+name+" /"+name, func(c *v1.Config) {
		c.Cmd = nil
		c.Entrypoint = append([]string{"/" + name}, args...)
	})
	if err != nil {
		return nil, err
	}
	return withVersion(img, ref)
}

// BuildSampleDevicePlugin returns the sample device plugin's image tarball
// for the static binary at bin (`scripts/controlplane.sh tools
// sample-device-plugin` builds it from the Kubernetes module), tagged
// SampleDevicePluginImage, from cacheDir (DefaultCacheDir() when empty) or
// built into it; named after the binary's content, as BuildCoreDNS's.
func BuildSampleDevicePlugin(ctx context.Context, bin, cacheDir string) (Tarball, error) {
	return buildFromBinary(ctx, bin, cacheDir, SampleDevicePluginImage, sampleDevicePluginRecipe,
		func() (v1.Image, error) { return SampleDevicePluginImageFrom(ctx, bin, "") })
}
