package gc

import (
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

// A container writing past containerLogMaxSize gets its log rotated through
// CRI ReopenContainerLog: the newest rotated file stays plain, older ones
// are gzipped, and never more than containerLogMaxFiles files remain.
func TestLogRotation(t *testing.T) {
	e := newTestEnv(t)
	e.cfg.GC.ContainerLogMaxSize = "8Ki"
	e.cfg.GC.ContainerLogMaxFiles = 3
	pod := newPod("chatty", corev1.Container{Name: "app"})
	p := e.runSandbox(pod, 0)
	// ~50 KiB/s for a bounded time, then quiet.
	e.startContainer(p, "app", 0, "sh", "-c",
		`i=0; while [ $i -lt 4000 ]; do echo "line $i padding-padding-padding-padding-padding-padding-padding-padding-padding"; i=$((i+1)); usleep 2000; done; sleep 3600`)
	current := filepath.Join(p.logDir, "app", "0.log")
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	g, _ := e.newGC(func(o *Options) { o.Clock = clk })
	rotationsBefore := counterValue(logRotations)

	const rotations = 5
	for i := 0; i < rotations; i++ {
		waitFor(t, "the log to pass containerLogMaxSize", func() bool { return fileSize(current) >= 8*1024 })
		if err := g.logs.rotateLogs(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		files, _ := filepath.Glob(current + "*")
		if len(files) > 3 {
			t.Fatalf("after rotation %d: %d files %v, want at most containerLogMaxFiles (3)", i+1, len(files), files)
		}
		clk.Step(time.Minute)
	}
	if got := counterValue(logRotations) - rotationsBefore; got != rotations {
		t.Errorf("nodelet_container_log_rotations_total grew by %v, want %d", got, rotations)
	}

	files, _ := filepath.Glob(current + ".*")
	sort.Strings(files)
	if len(files) != 2 {
		t.Fatalf("rotated files %v, want 2 (containerLogMaxFiles 3 with the current one)", files)
	}
	stamp := regexp.MustCompile(`\.\d{8}-\d{6}(\.gz)?$`)
	for _, f := range files {
		if !stamp.MatchString(f) {
			t.Errorf("rotated file %s is not named <log>.<timestamp>[.gz]", f)
		}
	}
	if !strings.HasSuffix(files[0], ".gz") || strings.HasSuffix(files[1], ".gz") {
		t.Fatalf("rotated files %v: want the older gzipped and the newest plain", files)
	}
	// The compressed file holds CRI log lines of the container.
	f, err := os.Open(files[0])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^\S+ stdout F line \d+ padding`).Match(b) {
		t.Errorf("decompressed %s holds no CRI log line of the container: %.200q", files[0], b)
	}
	// The runtime writes to the reopened current file.
	size := fileSize(current)
	waitFor(t, "the container to keep writing to the reopened log", func() bool { return fileSize(current) > size })

	// Below the size nothing happens.
	g.cfg.GC.ContainerLogMaxSize = "1Gi"
	g.logs.maxSize = 1 << 30
	before := counterValue(logRotations)
	if err := g.logs.rotateLogs(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if counterValue(logRotations) != before {
		t.Errorf("a log below containerLogMaxSize was rotated")
	}
}
