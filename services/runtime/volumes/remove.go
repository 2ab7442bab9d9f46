package volumes

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// RemoveAll removes dir and what it holds, as os.RemoveAll, also when a
// container left directories it cannot list or write: nodelet-runtime runs
// without CAP_DAC_OVERRIDE (so that it cannot read other components'
// seeds), and a directory made 0700 or 0500 by another uid in an emptyDir
// would otherwise stop the pod's teardown. It keeps CAP_CHOWN and
// CAP_FOWNER: each directory is made its own (chown) and given u+rwx
// before it is emptied. Symbolic links are not followed (the walk never
// leaves dir).
func RemoveAll(dir string) error {
	err := os.RemoveAll(dir)
	if err == nil || !errors.Is(err, fs.ErrPermission) {
		return err
	}
	if err := openDirs(dir); err != nil {
		return err
	}
	return os.RemoveAll(dir)
}

// openDirs makes dir and every directory below it the process's own with
// u+rwx, top down, so that each can be listed once it is open.
func openDirs(dir string) error {
	st, err := os.Lstat(dir)
	if err != nil || !st.IsDir() {
		return err
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && int(sys.Uid) != os.Geteuid() {
		if err := os.Lchown(dir, os.Geteuid(), os.Getegid()); err != nil {
			return err
		}
	}
	if st.Mode().Perm()&0o700 != 0o700 {
		if err := os.Chmod(dir, st.Mode().Perm()|0o700); err != nil {
			return err
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() {
			if err := openDirs(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}
