package testenv

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/godbus/dbus/v5/prop"
)

// StartSystemBus runs a dbus-daemon of type system on a socket in a
// directory of the test's and returns its address (for
// DBUS_SYSTEM_BUS_ADDRESS). It stops when the test ends.
func StartSystemBus(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath("dbus-daemon")
	if err != nil {
		t.Fatalf("dbus-daemon not installed (scripts/setup.sh installs it): %v", err)
	}
	dir := t.TempDir()
	conf := filepath.Join(dir, "bus.conf")
	if err := os.WriteFile(conf, []byte(`<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path=`+filepath.Join(dir, "bus")+`</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_type="method_call"/>
    <allow send_type="signal"/>
    <allow send_requested_reply="true"/>
    <allow receive_type="method_call"/>
    <allow receive_type="signal"/>
    <allow receive_requested_reply="true"/>
  </policy>
</busconfig>
`), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config-file="+conf, "--nofork", "--print-address")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("dbus-daemon address: %v", err)
	}
	return strings.TrimSpace(addr)
}

// Logind is a stand-in for systemd-logind's org.freedesktop.login1 on a
// private bus: Inhibit hands out the write end of a pipe as the lock
// (released when every copy is closed: EOF on the read end, reported on
// Released), InhibitDelayMaxUSec is a property, and PrepareForShutdown is
// emitted on demand.
type Logind struct {
	t    testing.TB
	conn *dbus.Conn

	mu    sync.Mutex
	locks []string // "what:who:mode"
	// Released receives the time each lock was released.
	Released chan time.Time
}

// Inhibit is org.freedesktop.login1.Manager.Inhibit.
func (l *Logind) Inhibit(what, who, why, mode string) (dbus.UnixFD, *dbus.Error) {
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_CLOEXEC); err != nil {
		return 0, dbus.MakeFailedError(err)
	}
	l.mu.Lock()
	l.locks = append(l.locks, what+":"+who+":"+mode)
	l.mu.Unlock()
	r, w := os.NewFile(uintptr(p[0]), "lock-r"), p[1]
	go func() {
		// Our copy of the write end goes once the reply has carried it.
		time.Sleep(time.Second)
		_ = syscall.Close(w)
	}()
	go func() {
		var b [1]byte
		_, _ = r.Read(b[:]) // EOF: every copy of the lock is closed
		r.Close()
		l.Released <- time.Now()
	}()
	return dbus.UnixFD(w), nil
}

// StartLogind owns org.freedesktop.login1 on the bus at addr, with
// InhibitDelayMaxUSec = delayMax.
func StartLogind(t testing.TB, addr string, delayMax time.Duration) *Logind {
	t.Helper()
	conn, err := dbus.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	l := &Logind{t: t, conn: conn, Released: make(chan time.Time, 8)}
	const path, iface = dbus.ObjectPath("/org/freedesktop/login1"), "org.freedesktop.login1.Manager"
	if err := conn.Export(l, path, iface); err != nil {
		t.Fatal(err)
	}
	if _, err := prop.Export(conn, path, prop.Map{iface: {
		"InhibitDelayMaxUSec": {Value: uint64(delayMax / time.Microsecond), Emit: prop.EmitFalse},
	}}); err != nil {
		t.Fatal(err)
	}
	reply, err := conn.RequestName("org.freedesktop.login1", dbus.NameFlagDoNotQueue)
	if err != nil || reply != dbus.RequestNameReplyPrimaryOwner {
		t.Fatalf("own org.freedesktop.login1: %v %v", reply, err)
	}
	return l
}

// Inhibitors lists the locks taken so far, as "what:who:mode".
func (l *Logind) Inhibitors() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.locks...)
}

// PrepareForShutdown emits logind's signal: true when a shutdown starts,
// false when it is cancelled.
func (l *Logind) PrepareForShutdown(active bool) {
	l.t.Helper()
	if err := l.conn.Emit("/org/freedesktop/login1", "org.freedesktop.login1.Manager.PrepareForShutdown", active); err != nil {
		l.t.Fatal(err)
	}
}
