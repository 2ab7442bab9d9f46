package sources

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/schemas"
)

// fileDebounce is how long the FILE source waits after a file event before
// it lists the path: an editor's save (write a temp file, rename it over
// the old one) or a copy in several writes raises a burst of events, and
// one listing at the end of the burst reads the finished file. It is on
// every static pod's start-up path (scripts/bench.sh's "sources" stage), so
// it is kept short: a file still half-written when it is read keeps its
// last good version and is read again on its next event.
const fileDebounce = 25 * time.Millisecond

// fileSource is the FILE source: static pod manifests in a directory (or
// one file), re-listed on every fsnotify event and every period.
type fileSource struct {
	path    string
	period  time.Duration
	clock   clock.WithTicker
	log     *slog.Logger
	parser  *staticParser
	noWatch bool // tests: rely on the periodic listing alone

	origins map[string]*origin // file path → what it last held
	sent    bool
	missing bool // path did not exist at the last listing
}

func newFileSource(path string, period time.Duration, clk clock.WithTicker, log *slog.Logger, parser *staticParser) *fileSource {
	return &fileSource{
		path:    filepath.Clean(path),
		period:  period,
		clock:   clk,
		log:     log.With("source", schemas.SourceFile),
		parser:  parser,
		origins: map[string]*origin{},
	}
}

// run lists the path at once, then on every change and every period, and
// sends the pods to out whenever they may have changed.
func (s *fileSource) run(ctx context.Context, out chan<- snapshot) {
	s.log.Info("Watching static pod path", "path", s.path, "period", s.period)
	ticker := s.clock.NewTicker(s.period)
	defer ticker.Stop()
	var (
		w        *fsnotify.Watcher
		watching string
		events   <-chan fsnotify.Event
		werrs    <-chan error
		debounce <-chan time.Time
	)
	defer func() {
		if w != nil {
			_ = w.Close()
		}
	}()
	// watch (re)arms fsnotify on the directory that holds the manifests.
	// The directory may not exist yet, or may be replaced: try again at
	// every listing until it works.
	watch := func() {
		if s.noWatch {
			return
		}
		dir := s.watchDir()
		if w != nil && watching == dir {
			return
		}
		if w == nil {
			nw, err := fsnotify.NewWatcher()
			if err != nil {
				s.log.Warn("Cannot watch static pod path, relying on the periodic listing", "path", s.path, "err", err)
				return
			}
			w, events, werrs = nw, nw.Events, nw.Errors
		}
		if watching != "" {
			_ = w.Remove(watching)
			watching = ""
		}
		if err := w.Add(dir); err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				s.log.Warn("Cannot watch static pod path, relying on the periodic listing", "path", dir, "err", err)
			}
			return
		}
		watching = dir
	}
	list := func() {
		watch()
		if pods, changed, err := s.list(); err != nil {
			s.log.Error("Unable to read static pod path", "path", s.path, "err", err)
		} else if changed {
			select {
			case out <- snapshot{source: schemas.SourceFile, pods: pods}:
			case <-ctx.Done():
			}
		}
	}
	list()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C():
			list()
		case <-debounce:
			debounce = nil
			list()
		case e, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			if e.Name == watching && e.Has(fsnotify.Remove|fsnotify.Rename) {
				// The watched directory itself went away; the next listing
				// watches it again when it is back.
				_ = w.Remove(watching)
				watching = ""
			}
			if s.relevant(e.Name) && debounce == nil {
				debounce = s.clock.After(fileDebounce)
			}
		case err, ok := <-werrs:
			if !ok {
				werrs = nil
				continue
			}
			// An overflow loses events; the next listing catches up.
			s.log.Warn("Watching static pod path failed, listing it again", "path", s.path, "err", err)
			if debounce == nil {
				debounce = s.clock.After(fileDebounce)
			}
		}
	}
}

// watchDir is the directory to watch: the path itself, or the directory of
// a single manifest file (watching the file would lose it when an editor
// replaces it by a rename).
func (s *fileSource) watchDir() string {
	if st, err := os.Stat(s.path); err == nil && st.IsDir() {
		return s.path
	}
	return filepath.Dir(s.path)
}

func (s *fileSource) relevant(name string) bool {
	if name == s.path {
		return true
	}
	return filepath.Dir(name) == s.path && !strings.HasPrefix(filepath.Base(name), ".")
}

// list reads the path and returns all its pods, and whether they may differ
// from what it last returned. An error means nothing could be read at all
// (the last pods stand); a single bad file only loses its own new content.
func (s *fileSource) list() ([]*corev1.Pod, bool, error) {
	st, err := os.Stat(s.path)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, false, err
		}
		// As the kubelet: a path that does not exist holds no pods, and
		// the source has delivered its (empty) list.
		if !s.missing {
			s.log.Info("Static pod path does not exist, no static pods", "path", s.path)
		}
		s.missing = true
		changed := len(s.origins) > 0 || !s.sent
		s.origins = map[string]*origin{}
		return s.collect(changed)
	}
	s.missing = false
	var files []string
	switch {
	case st.IsDir():
		entries, err := os.ReadDir(s.path)
		if err != nil {
			return nil, false, err
		}
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), ".") {
				continue
			}
			files = append(files, filepath.Join(s.path, e.Name()))
		}
	case st.Mode().IsRegular():
		files = []string{s.path}
	default:
		return nil, false, fmt.Errorf("%s is neither a directory nor a regular file", s.path)
	}
	sort.Strings(files)

	changed := !s.sent
	seen := map[string]bool{}
	for _, f := range files {
		fst, err := os.Stat(f) // follows symlinks, as the kubelet does
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				s.log.Warn("Cannot read static pod manifest", "path", f, "err", err)
			}
			if o := s.origins[f]; o != nil {
				seen[f] = true // unreadable for now: keep what it held
			}
			continue
		}
		if fst.IsDir() {
			s.log.Debug("Not recursing into directory of static pod path", "path", f)
			continue
		}
		if !fst.Mode().IsRegular() {
			s.log.Warn("Static pod manifest is not a regular file, ignoring it", "path", f, "mode", fst.Mode())
			continue
		}
		data, err := readAtMost(f, maxManifestSize)
		o := s.origins[f]
		if o == nil {
			o = &origin{name: f, isFile: true}
			s.origins[f] = o
		}
		seen[f] = true
		if err != nil {
			s.log.Warn("Cannot read static pod manifest", "path", f, "keptPods", len(o.pods), "err", err)
			continue
		}
		if s.parser.load(o, data) {
			changed = true
		}
	}
	for f := range s.origins {
		if !seen[f] {
			delete(s.origins, f)
			changed = true
		}
	}
	return s.collect(changed)
}

// collect returns copies of every file's pods, in file order.
func (s *fileSource) collect(changed bool) ([]*corev1.Pod, bool, error) {
	if !changed {
		return nil, false, nil
	}
	names := make([]string, 0, len(s.origins))
	for f := range s.origins {
		names = append(names, f)
	}
	sort.Strings(names)
	pods := []*corev1.Pod{}
	for _, f := range names {
		for _, p := range s.origins[f].pods {
			pods = append(pods, p.DeepCopy())
		}
	}
	s.sent = true
	return pods, true, nil
}

// readAtMost reads a file of at most limit bytes.
func readAtMost(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, limit)
	}
	return data, nil
}
