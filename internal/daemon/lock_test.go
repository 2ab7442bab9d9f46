package daemon

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/nodelet/nodelet/bus"
	"github.com/nodelet/nodelet/bus/bustest"
	"github.com/nodelet/nodelet/internal/config"
	"github.com/nodelet/nodelet/internal/testenv"
)

// TestSecondRuntimeExitsTwoNamingTheFirst: while a runtime holds its lock
// on a state dir, the nodelet-runtime binary started on the same one exits 2 with a
// message naming the first's pid, before touching CRI or the bus.
func TestSecondRuntimeExitsTwoNamingTheFirst(t *testing.T) {
	b := bustest.Start(t)
	cfgPath := writeConfig(t, fmt.Sprintf("node:\n  stateDir: %s\nbus:\n  listen: %s\n",
		b.StateDir, strings.TrimPrefix(b.URL, "nats://")))
	// The first holds the runtime's lock as the frame does (Run takes it
	// before anything else, before the CRI check this test has no runtime
	// for).
	first, err := Lock(b.StateDir, bus.Runtime)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()

	bin := testenv.MustDaemonBinary(t, "runtime")
	out, err := exec.Command(bin, "--config", cfgPath).CombinedOutput()
	var ee *exec.ExitError
	want := fmt.Sprintf("pid %d", os.Getpid())
	if !errors.As(err, &ee) || ee.ExitCode() != config.ExitCode || !strings.Contains(string(out), want) {
		t.Fatalf("second runtime: err %v, output %q; want exit 2 naming %s", err, out, want)
	}
}

// TestLockFreedWithTheProcess: the lock goes with its holder; the next
// copy takes it and records its own pid.
func TestLockFreedWithTheProcess(t *testing.T) {
	dir := t.TempDir()
	f, err := Lock(dir, bus.GC)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Lock(dir, bus.GC); !errors.Is(err, ErrAlreadyRunning) {
		t.Fatalf("second lock: %v", err)
	}
	other, err := Lock(dir, bus.Prober)
	if err != nil {
		t.Fatalf("another component's lock: %v", err)
	}
	other.Close()
	f.Close()
	g, err := Lock(dir, bus.GC)
	if err != nil {
		t.Fatalf("lock after the holder closed it: %v", err)
	}
	defer g.Close()
	b, _ := os.ReadFile(LockPath(dir, bus.GC))
	if strings.TrimSpace(string(b)) != fmt.Sprint(os.Getpid()) {
		t.Fatalf("lock file holds %q", b)
	}
}
