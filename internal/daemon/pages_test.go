package daemon

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"
)

// exeRSS is the resident size of this process's read-only mappings of
// its executable (from /proc/self/smaps), in kB.
func exeRSS(t *testing.T) int {
	t.Helper()
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	in, total := false, 0
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 5 && strings.Contains(fields[0], "-") && !strings.HasSuffix(fields[0], ":") {
			in = len(fields) == 6 && fields[5] == exe && readOnly(fields[1])
			continue
		}
		if in && len(fields) == 3 && fields[0] == "Rss:" {
			n, _ := strconv.Atoi(fields[1])
			total += n
		}
	}
	return total
}

// touchExecutable makes every read-only page of the executable resident
// in this process: reading them through /proc/self/mem faults them in.
func touchExecutable(t *testing.T) {
	t.Helper()
	ranges, err := executableRanges()
	if err != nil || len(ranges) == 0 {
		t.Fatalf("executable's mappings: %v, %v", ranges, err)
	}
	mem, err := os.Open("/proc/self/mem")
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	buf := make([]byte, 1<<20)
	for _, r := range ranges {
		for at := r.start; at < r.end; at += uint64(len(buf)) {
			if _, err := mem.ReadAt(buf[:min(uint64(len(buf)), r.end-at)], int64(at)); err != nil {
				t.Fatalf("reading %x: %v", at, err)
			}
		}
	}
}

// TestDropExecutablePages: the executable's read-only pages leave the
// process's resident set, and the process runs on (its code comes back as
// it runs: this test goes on executing after the call).
func TestDropExecutablePages(t *testing.T) {
	touchExecutable(t)
	before := exeRSS(t)
	if before == 0 {
		t.Fatal("no resident pages of the executable before")
	}
	if err := DropExecutablePages(); err != nil {
		t.Fatal(err)
	}
	after := exeRSS(t)
	if after*2 > before {
		t.Fatalf("executable's resident read-only pages: %d kB before, %d kB after; want at most half", before, after)
	}
	if got := strconv.Itoa(42) + strings.Repeat("x", 2); got != "42xx" {
		t.Fatalf("the process does not run on: %q", got)
	}
	t.Logf("executable's resident read-only pages: %d kB before, %d kB after", before, after)
}

func TestReadOnly(t *testing.T) {
	for perms, want := range map[string]bool{"r-xp": true, "r--p": true, "rw-p": false, "r--s": false, "---p": false, "rwxp": false} {
		if readOnly(perms) != want {
			t.Errorf("readOnly(%q) = %v", perms, !want)
		}
	}
}
