package volumes

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

func TestValidatePath(t *testing.T) {
	for _, tc := range []struct {
		path    string
		errPart string
	}{
		{"a", ""},
		{"a/b/c", ""},
		{"a..b", ""},
		{"..a/b", "must not start with '..'"},
		{"", "must not be empty"},
		{"/abs", "must be relative path"},
		{"a/../b", "must not contain '..'"},
		{"..", "must not contain '..'"},
		{strings.Repeat("x", 256), "filenames must be less than or equal to 255"},
		{strings.Repeat("x/", 2100), "must be less than or equal to 4096"},
	} {
		err := validatePath(tc.path)
		if tc.errPart == "" && err != nil || tc.errPart != "" && (err == nil || !strings.Contains(err.Error(), tc.errPart)) {
			name := tc.path
			if len(name) > 20 {
				name = name[:20] + "..."
			}
			t.Errorf("validatePath(%q) = %v, want %q", name, err, tc.errPart)
		}
	}
}

// listDir lists dir's entries with their kind: name -> "link:<target>",
// "dir" or "file".
func listDir(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		fi, _ := os.Lstat(p)
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			out[e.Name()] = "link:" + target
		case fi.IsDir():
			out[e.Name()] = "dir"
		default:
			out[e.Name()] = "file"
		}
	}
	return out
}

func TestAtomicWriterLayoutAndUpdates(t *testing.T) {
	dir := t.TempDir()
	w := &AtomicWriter{TargetDir: dir}
	steps := []struct {
		name    string
		payload map[string]FileProjection
		visible []string // user-visible top-level names
		files   map[string]string
		swapped bool // ..data points somewhere new
	}{
		{"first write", map[string]FileProjection{
			"a": {Data: []byte("1"), Mode: 0o644}, "sub/b": {Data: []byte("2"), Mode: 0o400},
		}, []string{"a", "sub"}, map[string]string{"a": "1", "sub/b": "2"}, true},
		{"unchanged", map[string]FileProjection{
			"a": {Data: []byte("1"), Mode: 0o644}, "sub/b": {Data: []byte("2"), Mode: 0o400},
		}, []string{"a", "sub"}, map[string]string{"a": "1", "sub/b": "2"}, false},
		{"changed value", map[string]FileProjection{
			"a": {Data: []byte("one"), Mode: 0o644}, "sub/b": {Data: []byte("2"), Mode: 0o400},
		}, []string{"a", "sub"}, map[string]string{"a": "one", "sub/b": "2"}, true},
		{"key removed, key added", map[string]FileProjection{
			"a": {Data: []byte("one"), Mode: 0o644}, "c": {Data: []byte("3"), Mode: 0o644},
		}, []string{"a", "c"}, map[string]string{"a": "one", "c": "3"}, true},
		{"emptied", map[string]FileProjection{}, nil, map[string]string{}, true},
	}
	prev := ""
	for _, st := range steps {
		if err := w.Write(st.payload, nil); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		entries := listDir(t, dir)
		target := strings.TrimPrefix(entries[dataDirName], "link:")
		if !strings.HasPrefix(target, "..") || entries[target] != "dir" {
			t.Fatalf("%s: ..data -> %q, entries %v", st.name, target, entries)
		}
		if (target != prev) != st.swapped {
			t.Fatalf("%s: ..data %q -> %q, swapped want %v", st.name, prev, target, st.swapped)
		}
		prev = target
		var visible []string
		for name, kind := range entries {
			if strings.HasPrefix(name, "..") {
				if name != dataDirName && name != target {
					t.Fatalf("%s: stale internal entry %s (%s)", st.name, name, kind)
				}
				continue
			}
			if kind != "link:"+filepath.Join(dataDirName, name) {
				t.Fatalf("%s: %s is %s, want a link into ..data", st.name, name, kind)
			}
			visible = append(visible, name)
		}
		sort.Strings(visible)
		if strings.Join(visible, ",") != strings.Join(st.visible, ",") {
			t.Fatalf("%s: visible %v, want %v", st.name, visible, st.visible)
		}
		for p, want := range st.files {
			b, err := os.ReadFile(filepath.Join(dir, p))
			if err != nil || string(b) != want {
				t.Fatalf("%s: %s = %q %v, want %q", st.name, p, b, err, want)
			}
			fi, _ := os.Stat(filepath.Join(dir, p))
			if fi.Mode().Perm() != os.FileMode(st.payload[p].Mode) {
				t.Fatalf("%s: %s mode %v, want %o", st.name, p, fi.Mode(), st.payload[p].Mode)
			}
		}
	}
	if err := w.Write(map[string]FileProjection{"../x": {Data: []byte("no")}}, nil); err == nil {
		t.Fatal("a path with .. was written")
	}
}

// A reader reading through the visible name while the writer swaps big
// versions back and forth always reads one whole version. It may find the
// name missing for an instant: like the kubelet's AtomicWriter.Write (its
// step 11), the old version's directory is removed right after the swap, so
// a reader that resolved ..data to it just before can miss it (ENOENT) and
// must read again; what it must never get is a mix of two versions.
func TestAtomicWriterReadersNeverSeeHalfAnUpdate(t *testing.T) {
	dir := t.TempDir()
	w := &AtomicWriter{TargetDir: dir}
	versions := [][]byte{bytes.Repeat([]byte("A"), 1<<20), bytes.Repeat([]byte("B"), 1<<20)}
	if err := w.Write(map[string]FileProjection{"big": {Data: versions[0], Mode: 0o644}}, nil); err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var reads, torn, missing atomic.Int64
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				b, err := os.ReadFile(filepath.Join(dir, "big"))
				if errors.Is(err, fs.ErrNotExist) {
					missing.Add(1)
					continue
				}
				if err != nil {
					torn.Add(1)
					continue
				}
				reads.Add(1)
				if !bytes.Equal(b, versions[0]) && !bytes.Equal(b, versions[1]) {
					torn.Add(1)
				}
			}
		}()
	}
	for i := range 60 {
		if err := w.Write(map[string]FileProjection{"big": {Data: versions[(i+1)%2], Mode: 0o644}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	stop.Store(true)
	wg.Wait()
	if torn.Load() > 0 || reads.Load() == 0 {
		t.Fatalf("%d of %d reads saw a partial file or failed (%d found it missing)", torn.Load(), reads.Load(), missing.Load())
	}
	t.Logf("%d whole reads, %d found the name missing between a swap and the old version's removal", reads.Load(), missing.Load())
}

func TestAtomicWriterOwnershipHook(t *testing.T) {
	dir := t.TempDir()
	w := &AtomicWriter{TargetDir: dir}
	var got string
	err := w.Write(map[string]FileProjection{"k": {Data: []byte("v"), Mode: 0o644}}, func(ts string) error {
		got = ts
		// Not published yet: ..data does not exist.
		if _, err := os.Lstat(filepath.Join(dir, dataDirName)); !os.IsNotExist(err) {
			t.Errorf("setPerms ran after the swap")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if target, _ := os.Readlink(filepath.Join(dir, dataDirName)); target != got {
		t.Fatalf("setPerms saw %q, ..data -> %q", got, target)
	}
}
