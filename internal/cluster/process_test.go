package cluster

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// listensOnUnix tells this process's listening socket from the file at
// its path: a socket file bound by another process, or this one's after it
// closed, is not this process's.
func TestListensOnUnix(t *testing.T) {
	if path := os.Getenv("NODELET_TEST_LISTEN"); path != "" {
		if _, err := net.Listen("unix", path); err != nil {
			t.Fatal(err)
		}
		os.Stdout.WriteString("up\n")
		time.Sleep(time.Minute)
		return
	}
	dir := t.TempDir()
	mine, other := filepath.Join(dir, "mine.sock"), filepath.Join(dir, "other.sock")
	ln, err := net.Listen("unix", mine)
	if err != nil {
		t.Fatal(err)
	}
	// Another process (this test binary again) binds other.sock and stays.
	nc := exec.Command(os.Args[0], "-test.run=^TestListensOnUnix$")
	nc.Env = append(os.Environ(), "NODELET_TEST_LISTEN="+other)
	out, err := nc.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Process.Kill(); _ = nc.Wait() })
	if _, err := out.Read(make([]byte, 3)); err != nil {
		t.Fatal(err)
	}
	// A path no one binds, with only a plain file there.
	if err := os.WriteFile(filepath.Join(dir, "plain.sock"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		pid  int
		path string
		want bool
	}{
		{os.Getpid(), mine, true},
		{os.Getpid(), other, false},
		{nc.Process.Pid, other, true},
		{nc.Process.Pid, mine, false},
		{os.Getpid(), filepath.Join(dir, "plain.sock"), false},
	} {
		if got, err := listensOnUnix(c.pid, c.path); err != nil || got != c.want {
			t.Errorf("listensOnUnix(%d, %s) = %v, %v; want %v", c.pid, filepath.Base(c.path), got, err, c.want)
		}
	}
	ln.Close()
	if got, err := listensOnUnix(os.Getpid(), mine); err != nil || got {
		t.Errorf("after Close: listensOnUnix = %v, %v; want false", got, err)
	}
	if _, err := listensOnUnix(1<<22+12345, mine); err == nil {
		t.Error("no error for a process that does not exist")
	}
}
