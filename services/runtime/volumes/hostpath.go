package volumes

import (
	"fmt"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
)

// checkHostPath applies the hostPath type as the kubelet's hostPath
// plugin: create what *OrCreate asks for, check what the other types
// require. An unset type checks nothing.
func checkHostPath(h *corev1.HostPathVolumeSource) error {
	t := corev1.HostPathUnset
	if h.Type != nil {
		t = *h.Type
	}
	if t == corev1.HostPathUnset {
		return nil
	}
	fi, err := os.Stat(h.Path)
	exists := err == nil
	if err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("hostPath type check failed: %w", err)
	}
	switch t {
	case corev1.HostPathDirectoryOrCreate:
		if !exists {
			if err := os.MkdirAll(h.Path, 0o755); err != nil {
				return fmt.Errorf("hostPath type check failed: create directory %s: %w", h.Path, err)
			}
			return nil
		}
		if !fi.IsDir() {
			return fmt.Errorf("hostPath type check failed: %s is not a directory", h.Path)
		}
		return nil
	case corev1.HostPathFileOrCreate:
		if !exists {
			if err := os.MkdirAll(filepath.Dir(h.Path), 0o755); err != nil {
				return fmt.Errorf("hostPath type check failed: %w", err)
			}
			f, err := os.OpenFile(h.Path, os.O_CREATE|os.O_RDONLY, 0o644)
			if err != nil {
				return fmt.Errorf("hostPath type check failed: create file %s: %w", h.Path, err)
			}
			return f.Close()
		}
		if fi.IsDir() {
			return fmt.Errorf("hostPath type check failed: %s is not a file", h.Path)
		}
		return nil
	}
	want := map[corev1.HostPathType]string{
		corev1.HostPathDirectory: "a directory",
		corev1.HostPathFile:      "a file",
		corev1.HostPathSocket:    "a socket file",
		corev1.HostPathCharDev:   "a character device",
		corev1.HostPathBlockDev:  "a block device",
	}[t]
	if want == "" {
		return fmt.Errorf("hostPath type check failed: unknown type %q", t)
	}
	if !exists {
		return fmt.Errorf("hostPath type check failed: %s does not exist (type %s)", h.Path, t)
	}
	mode := fi.Mode()
	ok := map[corev1.HostPathType]bool{
		corev1.HostPathDirectory: fi.IsDir(),
		corev1.HostPathFile:      mode.IsRegular(),
		corev1.HostPathSocket:    mode&os.ModeSocket != 0,
		corev1.HostPathCharDev:   mode&os.ModeCharDevice != 0,
		corev1.HostPathBlockDev:  mode&os.ModeDevice != 0 && mode&os.ModeCharDevice == 0,
	}[t]
	if !ok {
		return fmt.Errorf("hostPath type check failed: %s is not %s", h.Path, want)
	}
	return nil
}
