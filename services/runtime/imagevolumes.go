package runtime

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/version"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// imageVolumesSince is the first version of each runtime whose CRI mounts
// an image as a volume (Mount.image, KEP-4639): the fields are ignored by
// older ones, which would start the container without the volume.
var imageVolumesSince = map[string]*version.Version{
	"containerd": version.MustParseGeneric("2.1.0"),
	"cri-o":      version.MustParseGeneric("1.31.0"),
}

// supportsImageVolumes tells from CRI Version whether the runtime mounts
// image volumes (schemas.RuntimeState.ImageVolumes, which admission reads:
// a pod with an image volume is refused on a runtime without them).
func supportsImageVolumes(name, ver string) bool {
	since, ok := imageVolumesSince[name]
	if !ok {
		return false
	}
	v, err := version.ParseGeneric(ver)
	return err == nil && v.AtLeast(since)
}

// volumes is the kubelet's getImageVolumes and
// toKubeContainerImageVolumes for one container: each image volume c
// mounts, its image made present by the container's pull path (pull
// policy, pull secrets and credential providers, the pull records,
// back-off and events as for a container image), as the
// CRI image spec to mount. An image that cannot be had makes the container
// wait, as its own image would.
func (p *imagePuller) volumes(ctx context.Context, pod *corev1.Pod, c *corev1.Container, sbConfig *runtimeapi.PodSandboxConfig,
	secrets []corev1.Secret, event func(typ, reason, msg string)) (map[string]*runtimeapi.ImageSpec, *waitError) {
	var out map[string]*runtimeapi.ImageSpec
	for _, vm := range c.VolumeMounts {
		var src *corev1.ImageVolumeSource
		for i := range pod.Spec.Volumes {
			if v := &pod.Spec.Volumes[i]; v.Name == vm.Name && v.Image != nil {
				src = v.Image
			}
		}
		if src == nil {
			continue
		}
		if _, done := out[vm.Name]; done {
			continue
		}
		// The volume's image goes through the container image's path:
		// ensure reads the image and the pull policy from a container.
		as := &corev1.Container{Name: c.Name, Image: src.Reference, ImagePullPolicy: src.PullPolicy}
		ref, _, werr := p.ensure(ctx, pod, as, secrets, sbConfig, event)
		if werr != nil {
			werr.Message = fmt.Sprintf("image volume %q: %s", vm.Name, werr.Message)
			return nil, werr
		}
		if out == nil {
			out = map[string]*runtimeapi.ImageSpec{}
		}
		out[vm.Name] = &runtimeapi.ImageSpec{Image: ref, UserSpecifiedImage: src.Reference, Annotations: pod.Annotations}
	}
	return out, nil
}
