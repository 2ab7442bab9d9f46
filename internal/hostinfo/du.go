package hostinfo

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// DiskUsage is the kubelet's fs.DiskUsage (pkg/volume/util/fs), without
// its project-quota shortcut: the bytes of the blocks allocated under path
// (512 each, as du counts) and its inodes, a file with several links
// counted once, not descending into another filesystem. A file that goes
// while it is walked is skipped. Volume stats and eviction measure with it,
// as the kubelet's do.
func DiskUsage(path string) (bytes, inodes uint64, err error) {
	var top syscall.Stat_t
	if err := syscall.Stat(path, &top); err != nil {
		return 0, 0, err
	}
	seen := map[uint64]struct{}{}
	err = filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if os.IsNotExist(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("unable to count inodes for %s: %w", p, err)
		}
		info, err := d.Info()
		if os.IsNotExist(err) {
			return nil
		} else if err != nil {
			return err
		}
		st, ok := info.Sys().(*syscall.Stat_t)
		if !ok {
			return fmt.Errorf("unsupported fileinfo; could not convert to stat_t")
		}
		if st.Dev != top.Dev {
			return filepath.SkipDir
		}
		if st.Nlink > 1 {
			if _, dup := seen[st.Ino]; dup {
				return nil
			}
			seen[st.Ino] = struct{}{}
		}
		bytes += uint64(st.Blocks) * 512
		inodes++
		return nil
	})
	return bytes, inodes, err
}
