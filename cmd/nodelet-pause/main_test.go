package main_test

import (
	"github.com/nodelet/nodelet/internal/testenv/eventually"

	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodelet/nodelet/internal/images"
	"github.com/nodelet/nodelet/internal/testenv"
)

// startPause builds nodelet-pause and runs it as PID 1 of a new PID
// namespace, as it runs in a pod; it returns once its signal handlers are in.
func startPause(t *testing.T) *exec.Cmd {
	t.Helper()
	testenv.RequiresRoot(t)
	bin := filepath.Join(t.TempDir(), "nodelet-pause")
	if err := images.BuildPauseBinary(context.Background(), bin); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	// The Go runtime catches every signal from its first instant (SigCgt),
	// and until main's signal.Notify a SIGTERM or SIGINT ends the process with
	// status 2. Nothing outside shows when Notify has run: wait for the
	// runtime, then give main far more time than it needs.
	sigterm := uint64(1) << (uint(syscall.SIGTERM) - 1)
	waitUntil(t, "the pause runtime catches SIGTERM", func() bool {
		return procField(cmd.Process.Pid, "SigCgt")&sigterm != 0
	})
	time.Sleep(200 * time.Millisecond)
	return cmd
}

func TestExitsZeroOnSignal(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			cmd := startPause(t)
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("pause exited with %v after %v, want 0", err, sig)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("pause ignored %v", sig)
			}
		})
	}
}

func TestIgnoresHangupAndQuit(t *testing.T) {
	cmd := startPause(t)
	for _, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGQUIT} {
		if err := cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(200 * time.Millisecond)
	if err := cmd.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("pause died of SIGHUP or SIGQUIT: %v", err)
	}
	if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", cmd.Process.Pid)); strings.Contains(string(b), ") Z ") {
		t.Fatal("pause died of SIGHUP or SIGQUIT")
	}
}

func TestReapsOrphans(t *testing.T) {
	cmd := startPause(t)
	pid := cmd.Process.Pid
	// A shell in pause's namespace starts sleep and exits at once: sleep is
	// orphaned and reparented to pause, which must reap it when it ends. (Its
	// output goes to /dev/null, or CombinedOutput would wait for it.)
	out, err := exec.Command("nsenter", "--target", strconv.Itoa(pid), "--pid", "--",
		"/bin/sh", "-c", "/bin/sleep 1 >/dev/null 2>&1 & exit 0").CombinedOutput()
	if err != nil {
		t.Fatalf("nsenter: %v: %s", err, out)
	}
	if len(children(pid)) == 0 {
		t.Fatal("the orphan was not reparented to pause; the test proves nothing")
	}
	waitUntil(t, "pause reaps its orphan", func() bool { return len(children(pid)) == 0 })
}

func waitUntil(t *testing.T, what string, ok func() bool) {
	t.Helper()
	eventually.True(t, 5*time.Second, what, ok)
}

// procField reads a hex field of /proc/<pid>/status.
func procField(pid int, name string) uint64 {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, name+":"); ok {
			n, _ := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return n
		}
	}
	return 0
}

// children lists the processes (zombies included) whose parent is pid.
func children(pid int) []string {
	var out []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) >= 2 && f[1] == strconv.Itoa(pid) {
			out = append(out, e.Name()+" "+s[:i+1]+" "+f[0])
		}
	}
	return out
}
