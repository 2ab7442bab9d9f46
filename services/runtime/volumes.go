package runtime

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/podutil"
	"github.com/nodelet/nodelet/services/runtime/volumes"
)

// VolumeManager prepares a pod's volumes on the host: the seam for the
// volume plugins (package volumes). The runtime only needs each volume's
// host path. An implementation that also has a Run(ctx) method is run
// beside the pod workers (volumes.Manager refreshes mounted contents).
type VolumeManager interface {
	// Setup makes the pod's volumes ready and returns the host path of
	// each, by volume name. It is called on every sync and must be
	// idempotent. An error names the volume; the pod waits.
	Setup(ctx context.Context, pod *corev1.Pod) (map[string]string, error)
	// Unmount unmounts the volumes of a pod that will not run again and
	// removes their directories; the pod's other files stay.
	Unmount(ctx context.Context, uid string) error
	// Teardown removes what Setup made for the pod (which is gone).
	Teardown(ctx context.Context, uid string) error
}

func podDir(stateDir, uid string) string { return volumes.PodDir(stateDir, uid) }

// containerMounts is the kubelet's makeMounts: the container's volume
// mounts (subPath and subPathExpr through volumes.PrepareSubPath, which
// refuses to leave the volume; configMap, secret, downwardAPI and projected
// volumes always read-only; mountPropagation; recursiveReadOnly, rro.go),
// /etc/hosts and the
// termination message file. env is the container's environment, for
// subPathExpr.
func (m *Daemon) containerMounts(ctx context.Context, pod *corev1.Pod, c *corev1.Container, vols map[string]string,
	imageVols map[string]*runtimeapi.ImageSpec, env map[string]string, etcHosts, termFile string) ([]*runtimeapi.Mount, error) {
	var out []*runtimeapi.Mount
	mountsHosts := false
	rroSupported := false
	if asksRecursiveReadOnly(pod) {
		rroSupported = m.supportsRecursiveReadOnly(ctx, pod)
	}
	for i, vm := range c.VolumeMounts {
		if image, ok := imageVols[vm.Name]; ok {
			mount, err := imageMount(vm, image, env)
			if err != nil {
				return nil, err
			}
			out = append(out, mount)
			continue
		}
		host, ok := vols[vm.Name]
		if !ok {
			return nil, fmt.Errorf("cannot find volume %q to mount into container %q", vm.Name, c.Name)
		}
		subPath, err := mountSubPath(vm, env)
		if err != nil {
			return nil, err
		}
		if subPath != "" {
			host, err = volumes.PrepareSubPath(m.log, volumes.SubPath{
				PodDir: podDir(m.cfg.Node.StateDir, string(pod.UID)), VolumeName: vm.Name, VolumePath: host,
				SubPath: subPath, ContainerName: c.Name, VolumeMountIndex: i, MountName: vm.Name,
			})
			if err != nil {
				return nil, err
			}
		}
		if vm.MountPath == "/etc/hosts" {
			mountsHosts = true
		}
		propagation, err := mountPropagation(vm.MountPropagation)
		if err != nil {
			return nil, err
		}
		readOnly := vm.ReadOnly
		for j := range pod.Spec.Volumes {
			if v := &pod.Spec.Volumes[j]; v.Name == vm.Name && volumes.ReadOnly(v) {
				readOnly = true
			}
		}
		rro, err := resolveRecursiveReadOnly(vm, rroSupported)
		if err != nil {
			return nil, fmt.Errorf("failed to resolve recursive read-only mode: %w", err)
		}
		out = append(out, &runtimeapi.Mount{ContainerPath: vm.MountPath, HostPath: host, Readonly: readOnly,
			RecursiveReadOnly: rro, Propagation: propagation})
	}
	if etcHosts != "" && !mountsHosts {
		out = append(out, &runtimeapi.Mount{ContainerPath: "/etc/hosts", HostPath: etcHosts})
	}
	if termFile != "" && c.TerminationMessagePath != "" {
		out = append(out, &runtimeapi.Mount{ContainerPath: c.TerminationMessagePath, HostPath: termFile})
	}
	return out, nil
}

// containerDevices is the kubelet's makeBlockVolumes: each of the
// container's volumeDevices as a CRI device from the volume's device link
// (what containerd makes the device node in the container from), "mrw",
// or "r" for a claim the pod mounts read-only.
func containerDevices(pod *corev1.Pod, c *corev1.Container, vols map[string]string) ([]*runtimeapi.Device, error) {
	var out []*runtimeapi.Device
	for _, d := range c.VolumeDevices {
		if !filepath.IsAbs(d.DevicePath) {
			return nil, fmt.Errorf("error DevicePath `%s` must be an absolute path", d.DevicePath)
		}
		host, ok := vols[d.Name]
		if !ok {
			return nil, fmt.Errorf("cannot find volume %q to pass into container %q", d.Name, c.Name)
		}
		perm := "mrw"
		for j := range pod.Spec.Volumes {
			if v := &pod.Spec.Volumes[j]; v.Name == d.Name && volumes.ReadOnly(v) {
				perm = "r"
			}
		}
		out = append(out, &runtimeapi.Device{ContainerPath: d.DevicePath, HostPath: host, Permissions: perm})
	}
	return out, nil
}

// mountPropagation is the kubelet's translateMountPropagation.
func mountPropagation(mode *corev1.MountPropagationMode) (runtimeapi.MountPropagation, error) {
	switch {
	case mode == nil, *mode == corev1.MountPropagationNone:
		return runtimeapi.MountPropagation_PROPAGATION_PRIVATE, nil
	case *mode == corev1.MountPropagationHostToContainer:
		return runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER, nil
	case *mode == corev1.MountPropagationBidirectional:
		return runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL, nil
	}
	return 0, fmt.Errorf("invalid MountPropagation mode: %q", *mode)
}

// expandSubPathExpr is the kubelet's ExpandContainerVolumeMounts: $(VAR)
// from the container's environment; a variable that is unset or empty is
// an error.
func expandSubPathExpr(expr string, env map[string]string) (string, error) {
	var missing []string
	out := podutil.Expand(expr, func(name string) (string, bool) {
		v, ok := env[name]
		if !ok || v == "" {
			missing = append(missing, name)
		}
		return v, true
	})
	if len(missing) > 0 {
		sort.Strings(missing)
		return "", fmt.Errorf("missing value for %s", strings.Join(slices.Compact(missing), ", "))
	}
	return out, nil
}

// writeEtcHosts writes the pod's /etc/hosts (the kubelet's managed hosts
// file) into its directory and returns the path.
func writeEtcHosts(stateDir string, pod *corev1.Pod, ips []string, hostname, domain string) (string, error) {
	dir := podDir(stateDir, string(pod.UID))
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return "", err
	}
	var b strings.Builder
	if pod.Spec.HostNetwork {
		host, err := os.ReadFile("/etc/hosts")
		if err != nil {
			return "", err
		}
		b.Write(host)
	} else {
		b.WriteString("# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n" +
			"fe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n")
		for _, ip := range ips {
			if domain != "" {
				fmt.Fprintf(&b, "%s\t%s.%s\t%s\n", ip, hostname, domain, hostname)
			} else {
				fmt.Fprintf(&b, "%s\t%s\n", ip, hostname)
			}
		}
	}
	if len(pod.Spec.HostAliases) > 0 {
		b.WriteString("\n# Entries added by HostAliases.\n")
		for _, a := range pod.Spec.HostAliases {
			fmt.Fprintf(&b, "%s\t%s\n", a.IP, strings.Join(a.Hostnames, "\t"))
		}
	}
	p := filepath.Join(dir, "etc-hosts")
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
		return "", err
	}
	return p, os.Rename(tmp, p)
}

// imageMount is an image volume's mount (the kubelet's makeMounts with
// imageVolumes): the runtime mounts the image itself, read-only, the
// subPath inside it as CRI's imageSubPath rather than prepared on the
// host.
func imageMount(vm corev1.VolumeMount, image *runtimeapi.ImageSpec, env map[string]string) (*runtimeapi.Mount, error) {
	subPath, err := mountSubPath(vm, env)
	if err != nil {
		return nil, err
	}
	if subPath != "" {
		if filepath.IsAbs(subPath) {
			return nil, fmt.Errorf("error SubPath `%s` must not be an absolute path", subPath)
		}
		if err := volumes.ValidatePathNoBacksteps(subPath); err != nil {
			return nil, fmt.Errorf("unable to provision SubPath `%s`: %w", subPath, err)
		}
	}
	propagation, err := mountPropagation(vm.MountPropagation)
	if err != nil {
		return nil, err
	}
	return &runtimeapi.Mount{ContainerPath: vm.MountPath, Image: image, ImageSubPath: subPath, Readonly: true, Propagation: propagation}, nil
}

// mountSubPath is the mount's subPath, or its subPathExpr expanded with the
// container's environment.
func mountSubPath(vm corev1.VolumeMount, env map[string]string) (string, error) {
	if vm.SubPathExpr != "" {
		return expandSubPathExpr(vm.SubPathExpr, env)
	}
	return vm.SubPath, nil
}
