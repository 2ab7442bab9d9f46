package volumes

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// The kubelet's limits on projected paths.
const (
	maxFileNameLength = 255
	maxPathLength     = 4096
)

// Names AtomicWriter reserves in its target directory.
const (
	dataDirName    = "..data"
	newDataDirName = "..data_tmp"
)

// FileProjection is one file of a volume's payload.
type FileProjection struct {
	Data []byte
	Mode int32
	// FsUser, when set, owns the file (service account tokens of pods
	// whose containers all run as one non-root user).
	FsUser *int64
}

// AtomicWriter projects a set of files into a directory so that readers
// see either the old or the new set, never a mix (the kubelet's
// pkg/volume/util/atomic_writer.go).
//
// The user-visible names are symlinks into "..data", itself a symlink to a
// hidden timestamped directory with the real files:
//
//	<dir>/key        -> ..data/key
//	<dir>/..data     -> ..2024_05_01_10_00_00.123456789
//
// An update writes a new timestamped directory and renames a new "..data"
// symlink over the old one: rename(2) is atomic. Paths starting with ".."
// are reserved. A writer is not safe for concurrent use on one directory:
// the caller serialises writes.
type AtomicWriter struct {
	TargetDir string
	// Now names the timestamped directories; default time.Now.
	Now func() time.Time
}

// Write projects payload into the target directory (which must exist).
// setPerms, when not nil, is called with the new timestamped directory's
// name before it is published, to set ownership and modes. Nothing is
// written when the payload equals what is there.
func (w *AtomicWriter) Write(payload map[string]FileProjection, setPerms func(tsDirName string) error) error {
	clean, err := validatePayload(payload)
	if err != nil {
		return err
	}
	dataDirPath := filepath.Join(w.TargetDir, dataDirName)
	oldTsDir, err := os.Readlink(dataDirPath)
	if err != nil {
		if !os.IsNotExist(err) {
			return fmt.Errorf("read link %s: %w", dataDirPath, err)
		}
		oldTsDir = ""
	}
	oldTsPath := filepath.Join(w.TargetDir, oldTsDir)

	var remove []string
	write := true
	if oldTsDir != "" {
		if remove, err = pathsToRemove(clean, oldTsPath); err != nil {
			return err
		}
		changed, err := payloadChanged(clean, oldTsPath)
		if err != nil {
			return err
		}
		if !changed && len(remove) == 0 {
			// Up to date; still make sure the visible symlinks exist.
			write, oldTsDir = false, ""
		}
	}

	if write {
		tsDir, err := w.newTimestampDir()
		if err != nil {
			return err
		}
		tsDirName := filepath.Base(tsDir)
		if err := writePayloadToDir(clean, tsDir); err != nil {
			_ = os.RemoveAll(tsDir)
			return err
		}
		if setPerms != nil {
			if err := setPerms(tsDirName); err != nil {
				_ = os.RemoveAll(tsDir)
				return fmt.Errorf("set ownership of %s: %w", tsDir, err)
			}
		}
		newDataDirPath := filepath.Join(w.TargetDir, newDataDirName)
		_ = os.Remove(newDataDirPath) // left by a writer that was cut short
		if err := os.Symlink(tsDirName, newDataDirPath); err != nil {
			_ = os.RemoveAll(tsDir)
			return fmt.Errorf("create symlink for atomic update: %w", err)
		}
		// The swap: readers follow the old or the new link, nothing in between.
		if err := os.Rename(newDataDirPath, dataDirPath); err != nil {
			_ = os.Remove(newDataDirPath)
			_ = os.RemoveAll(tsDir)
			return fmt.Errorf("rename %s to %s: %w", newDataDirPath, dataDirPath, err)
		}
	}

	if err := w.createUserVisibleFiles(clean); err != nil {
		return err
	}
	var errs []string
	for _, p := range remove {
		// Only the top-level symlinks are user-visible; deeper paths went
		// with the old timestamped directory.
		if strings.Contains(p, string(os.PathSeparator)) {
			continue
		}
		if err := os.Remove(filepath.Join(w.TargetDir, p)); err != nil && !os.IsNotExist(err) {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("remove old visible paths: %s", strings.Join(errs, "; "))
	}
	if oldTsDir != "" {
		if err := os.RemoveAll(oldTsPath); err != nil {
			return fmt.Errorf("remove old data directory %s: %w", oldTsPath, err)
		}
	}
	return nil
}

// validatePayload checks every path and returns the payload with clean paths.
func validatePayload(payload map[string]FileProjection) (map[string]FileProjection, error) {
	clean := make(map[string]FileProjection, len(payload))
	for k, v := range payload {
		if err := validatePath(k); err != nil {
			return nil, err
		}
		clean[filepath.Clean(k)] = v
	}
	return clean, nil
}

// validatePath refuses paths that are empty, absolute, too long, contain a
// ".." element or start with "..".
func validatePath(p string) error {
	if p == "" {
		return fmt.Errorf("invalid path: must not be empty: %q", p)
	}
	if filepath.IsAbs(p) {
		return fmt.Errorf("invalid path: must be relative path: %s", p)
	}
	if len(p) > maxPathLength {
		return fmt.Errorf("invalid path: must be less than or equal to %d characters", maxPathLength)
	}
	items := strings.Split(p, string(os.PathSeparator))
	for _, item := range items {
		if item == ".." {
			return fmt.Errorf("invalid path: must not contain '..': %s", p)
		}
		if len(item) > maxFileNameLength {
			return fmt.Errorf("invalid path: filenames must be less than or equal to %d characters", maxFileNameLength)
		}
	}
	if strings.HasPrefix(items[0], "..") && len(items[0]) > 2 {
		return fmt.Errorf("invalid path: must not start with '..': %s", p)
	}
	return nil
}

// payloadChanged: some file of payload is missing from the old version or
// has other contents. Modes are not compared (as the kubelet's): they come
// from the pod's immutable volume spec, and fsGroup ownership changes them
// after writing.
func payloadChanged(payload map[string]FileProjection, oldTsDir string) (bool, error) {
	for p, fp := range payload {
		full := filepath.Join(oldTsDir, p)
		if _, err := os.Lstat(full); os.IsNotExist(err) {
			return true, nil
		} else if err != nil {
			return false, err
		}
		old, err := os.ReadFile(full)
		if err != nil {
			return false, err
		}
		if !bytes.Equal(old, fp.Data) {
			return true, nil
		}
	}
	return false, nil
}

// pathsToRemove lists what the old version has that the payload has not
// (with every parent of a payload path kept).
func pathsToRemove(payload map[string]FileProjection, oldTsDir string) ([]string, error) {
	keep := map[string]bool{}
	for p := range payload {
		for sub := p; sub != "" && sub != "."; sub = filepath.Dir(sub) {
			keep[sub] = true
		}
	}
	var out []string
	err := filepath.Walk(oldTsDir, func(path string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(oldTsDir, path)
		if rel != "." && !keep[rel] {
			out = append(out, rel)
		}
		return nil
	})
	if os.IsNotExist(err) {
		return nil, nil
	}
	sort.Strings(out)
	return out, err
}

func (w *AtomicWriter) newTimestampDir() (string, error) {
	now := time.Now
	if w.Now != nil {
		now = w.Now
	}
	dir, err := os.MkdirTemp(w.TargetDir, now().UTC().Format("..2006_01_02_15_04_05."))
	if err != nil {
		return "", fmt.Errorf("create timestamped directory: %w", err)
	}
	// Group and others must traverse it, whatever the umask.
	if err := os.Chmod(dir, 0o755); err != nil {
		return "", err
	}
	return dir, nil
}

func writePayloadToDir(payload map[string]FileProjection, dir string) error {
	for p, fp := range payload {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return err
		}
		mode := os.FileMode(fp.Mode).Perm()
		if err := os.WriteFile(full, fp.Data, mode); err != nil {
			return fmt.Errorf("write %s: %w", full, err)
		}
		// WriteFile's mode passes through the umask.
		if err := os.Chmod(full, mode); err != nil {
			return err
		}
		if fp.FsUser != nil {
			if err := os.Lchown(full, int(*fp.FsUser), -1); err != nil {
				return fmt.Errorf("chown %s to %d: %w", full, *fp.FsUser, err)
			}
		}
	}
	return nil
}

// createUserVisibleFiles links each top-level name to ..data/<name>.
func (w *AtomicWriter) createUserVisibleFiles(payload map[string]FileProjection) error {
	for p, fp := range payload {
		top, _, _ := strings.Cut(p, string(os.PathSeparator))
		visible := filepath.Join(w.TargetDir, top)
		if _, err := os.Readlink(visible); err == nil || !os.IsNotExist(err) {
			continue
		}
		if err := os.Symlink(filepath.Join(dataDirName, top), visible); err != nil {
			return fmt.Errorf("create visible symlink %s: %w", visible, err)
		}
		if fp.FsUser != nil {
			if err := os.Lchown(visible, int(*fp.FsUser), -1); err != nil {
				return err
			}
		}
	}
	return nil
}
