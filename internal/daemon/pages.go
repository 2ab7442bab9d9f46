package daemon

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// DropExecutablePages unmaps this process's view of its executable's
// read-only pages (code, type data, the function tables): they stay in the
// page cache, and the pages the process goes on to use come back at their
// first touch (a minor fault each, 64 KiB at a time with the kernel's
// fault-around).
//
// Why: the daemons are one executable, so every process runs the package
// initialisers of all of them, and its own start-up (config, schemas,
// connections) and bursts of work touch code and tables its rest never
// does; once touched they stay mapped for good, counted in its RSS and in
// the node's PSS sum. nodeletd's main calls it once the initialisers have
// run, and every release of memory (ManageMemory) once work dies down.
// Measured on a node at rest: the executable's share of the nine
// processes' PSS fell from about 60 to 42 MiB with the first call, and
// by a further 12 MiB with the release after start-up
// (docs/performance.md). Writable mappings (the data segment, whose pages the
// process has modified) are never touched.
func DropExecutablePages() error {
	ranges, err := exeRanges()
	if err != nil {
		return err
	}
	for _, r := range ranges {
		// The raw call: the range is not a Go object.
		if _, _, errno := unix.Syscall(unix.SYS_MADVISE, uintptr(r.start), uintptr(r.end-r.start), unix.MADV_DONTNEED); errno != 0 {
			return fmt.Errorf("madvise %x-%x: %w", r.start, r.end, errno)
		}
	}
	return nil
}

type addrRange struct{ start, end uint64 }

// exeRanges reads the executable's mappings once: they do not move, and
// every release would read them again.
var exeRanges = sync.OnceValues(executableRanges)

// executableRanges are this process's read-only private mappings of its
// executable, from /proc/self/maps.
func executableRanges() ([]addrRange, error) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return nil, err
	}
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var ranges []addrRange
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// address perms offset dev inode path
		fields := strings.Fields(sc.Text())
		if len(fields) != 6 || fields[5] != exe || !readOnly(fields[1]) {
			continue
		}
		lo, hi, _ := strings.Cut(fields[0], "-")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || end <= start {
			return nil, fmt.Errorf("/proc/self/maps: bad range %q", fields[0])
		}
		ranges = append(ranges, addrRange{start, end})
	}
	return ranges, sc.Err()
}

// readOnly: a private mapping that can be read and not written ("r--p",
// "r-xp").
func readOnly(perms string) bool {
	return len(perms) == 4 && perms[0] == 'r' && perms[1] == '-' && perms[3] == 'p'
}
