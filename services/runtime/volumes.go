package runtime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// VolumeManager prepares a pod's volumes on the host. It is the seam for
// the volume plugins (configMap, secret, projected, downwardAPI, ... come
// with issue 7); the runtime only needs each volume's host path.
type VolumeManager interface {
	// Setup makes the pod's volumes ready and returns the host path of
	// each, by volume name. It is called on every sync and must be
	// idempotent. An error names the volume; the pod waits.
	Setup(ctx context.Context, pod *corev1.Pod) (map[string]string, error)
	// Teardown removes what Setup made for the pod (which is gone).
	Teardown(ctx context.Context, uid string) error
}

// DiskVolumes supports hostPath (a plain bind mount of the host path, with
// the hostPath type checks) and emptyDir (a directory under
// <stateDir>/pods/<uid>/volumes/kubernetes.io~empty-dir/<name>, or a tmpfs
// for medium Memory).
type DiskVolumes struct {
	StateDir string
}

// NewDiskVolumes returns the volume manager of a node with stateDir.
func NewDiskVolumes(stateDir string) *DiskVolumes { return &DiskVolumes{StateDir: stateDir} }

func podDir(stateDir, uid string) string { return filepath.Join(stateDir, "pods", uid) }

func (d *DiskVolumes) emptyDir(uid, name string) string {
	return filepath.Join(podDir(d.StateDir, uid), "volumes", "kubernetes.io~empty-dir", name)
}

// Setup implements VolumeManager.
func (d *DiskVolumes) Setup(_ context.Context, pod *corev1.Pod) (map[string]string, error) {
	paths := map[string]string{}
	var errs []error
	for _, v := range pod.Spec.Volumes {
		p, err := d.setup(pod, &v)
		if err != nil {
			errs = append(errs, fmt.Errorf("volume %q: %w", v.Name, err))
			continue
		}
		paths[v.Name] = p
	}
	return paths, errors.Join(errs...)
}

func (d *DiskVolumes) setup(pod *corev1.Pod, v *corev1.Volume) (string, error) {
	switch {
	case v.HostPath != nil:
		return v.HostPath.Path, checkHostPath(v.HostPath)
	case v.EmptyDir != nil:
		dir := d.emptyDir(string(pod.UID), v.Name)
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return "", err
		}
		// World-writable as the kubelet makes it, for non-root containers.
		if err := os.Chmod(dir, 0o777); err != nil {
			return "", err
		}
		if v.EmptyDir.Medium == corev1.StorageMediumMemory && !isMountPoint(dir) {
			opts := ""
			if v.EmptyDir.SizeLimit != nil && !v.EmptyDir.SizeLimit.IsZero() {
				opts = fmt.Sprintf("size=%d", v.EmptyDir.SizeLimit.Value())
			}
			if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, opts); err != nil {
				return "", fmt.Errorf("mount tmpfs on %s: %w", dir, err)
			}
		}
		return dir, nil
	default:
		return "", errors.New("this volume type is not supported yet (nodelet supports hostPath and emptyDir)")
	}
}

// checkHostPath applies the hostPath type: create what *OrCreate asks for,
// check what the other types require.
func checkHostPath(h *corev1.HostPathVolumeSource) error {
	t := corev1.HostPathUnset
	if h.Type != nil {
		t = *h.Type
	}
	fi, err := os.Stat(h.Path)
	switch t {
	case corev1.HostPathUnset:
		return nil
	case corev1.HostPathDirectoryOrCreate:
		if os.IsNotExist(err) {
			return os.MkdirAll(h.Path, 0o755)
		}
		if err == nil && !fi.IsDir() {
			return fmt.Errorf("%s exists and is not a directory", h.Path)
		}
		return err
	case corev1.HostPathFileOrCreate:
		if os.IsNotExist(err) {
			if err := os.MkdirAll(filepath.Dir(h.Path), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(h.Path, os.O_CREATE|os.O_RDONLY, 0o644)
			if err != nil {
				return err
			}
			return f.Close()
		}
		if err == nil && fi.IsDir() {
			return fmt.Errorf("%s exists and is a directory", h.Path)
		}
		return err
	}
	if err != nil {
		return fmt.Errorf("hostPath type check failed: %s: %w", h.Path, err)
	}
	ok := map[corev1.HostPathType]bool{
		corev1.HostPathDirectory: fi.IsDir(),
		corev1.HostPathFile:      fi.Mode().IsRegular(),
		corev1.HostPathSocket:    fi.Mode()&os.ModeSocket != 0,
		corev1.HostPathCharDev:   fi.Mode()&os.ModeCharDevice != 0,
		corev1.HostPathBlockDev:  fi.Mode()&os.ModeDevice != 0 && fi.Mode()&os.ModeCharDevice == 0,
	}[t]
	if !ok {
		return fmt.Errorf("hostPath type check failed: %s is not a %s", h.Path, t)
	}
	return nil
}

// Teardown implements VolumeManager: unmounts what is mounted under the
// pod's directory and removes it.
func (d *DiskVolumes) Teardown(_ context.Context, uid string) error {
	dir := podDir(d.StateDir, uid)
	entries, _ := os.ReadDir(filepath.Join(dir, "volumes", "kubernetes.io~empty-dir"))
	for _, e := range entries {
		p := d.emptyDir(uid, e.Name())
		if isMountPoint(p) {
			if err := syscall.Unmount(p, 0); err != nil {
				return fmt.Errorf("unmount %s: %w", p, err)
			}
		}
	}
	return os.RemoveAll(dir)
}

// isMountPoint: dir is on another device than its parent.
func isMountPoint(dir string) bool {
	var a, b syscall.Stat_t
	if syscall.Stat(dir, &a) != nil || syscall.Stat(filepath.Dir(dir), &b) != nil {
		return false
	}
	return a.Dev != b.Dev
}

// containerMounts is the kubelet's makeMounts: the container's volume
// mounts (with subPath), /etc/hosts and the termination message file.
func containerMounts(pod *corev1.Pod, c *corev1.Container, volumes map[string]string, etcHosts, termFile string) ([]*runtimeapi.Mount, error) {
	var out []*runtimeapi.Mount
	mountsHosts := false
	for _, vm := range c.VolumeMounts {
		host, ok := volumes[vm.Name]
		if !ok {
			return nil, fmt.Errorf("cannot find volume %q to mount into container %q", vm.Name, c.Name)
		}
		if vm.SubPath != "" {
			if filepath.IsAbs(vm.SubPath) || strings.Contains(vm.SubPath, "..") {
				return nil, fmt.Errorf("volumeMount %q: subPath %q must be a relative path without '..'", vm.Name, vm.SubPath)
			}
			host = filepath.Join(host, vm.SubPath)
			if _, err := os.Stat(host); os.IsNotExist(err) {
				if err := os.MkdirAll(host, 0o750); err != nil {
					return nil, err
				}
			}
		}
		if vm.MountPath == "/etc/hosts" {
			mountsHosts = true
		}
		m := &runtimeapi.Mount{ContainerPath: vm.MountPath, HostPath: host, Readonly: vm.ReadOnly}
		if vm.MountPropagation != nil {
			switch *vm.MountPropagation {
			case corev1.MountPropagationHostToContainer:
				m.Propagation = runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER
			case corev1.MountPropagationBidirectional:
				m.Propagation = runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL
			}
		}
		out = append(out, m)
	}
	if etcHosts != "" && !mountsHosts {
		out = append(out, &runtimeapi.Mount{ContainerPath: "/etc/hosts", HostPath: etcHosts})
	}
	if termFile != "" && c.TerminationMessagePath != "" {
		out = append(out, &runtimeapi.Mount{ContainerPath: c.TerminationMessagePath, HostPath: termFile})
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
