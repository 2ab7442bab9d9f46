package gc

import (
	"fmt"
	"log/slog"
	"syscall"
	"time"

	"github.com/godbus/dbus/v5"
)

// systemd-logind on the system bus, as the kubelet's
// pkg/kubelet/nodeshutdown/systemd (inhibit_linux.go) talks to it. The
// system bus is $DBUS_SYSTEM_BUS_ADDRESS, else
// unix:path=/run/dbus/system_bus_socket.
const (
	logindService   = "org.freedesktop.login1"
	logindObject    = dbus.ObjectPath("/org/freedesktop/login1")
	logindInterface = "org.freedesktop.login1.Manager"
)

// inhibiter is what the shutdown manager needs of logind (the kubelet's
// dbusInhibiter).
type inhibiter interface {
	CurrentInhibitDelay() (time.Duration, error)
	InhibitShutdown() (inhibitLock, error)
	ReleaseInhibitLock(inhibitLock) error
	MonitorShutdown(log *slog.Logger) (<-chan bool, error)
	Close() error
}

// inhibitLock is the file descriptor logind's Inhibit returned: the delay
// lock holds until it is closed.
type inhibitLock uint32

// logindConn is inhibiter over a D-Bus connection.
type logindConn struct {
	conn *dbus.Conn
}

func connectLogind() (inhibiter, error) {
	c, err := dbus.ConnectSystemBus()
	if err != nil {
		return nil, fmt.Errorf("connect to the system bus: %w", err)
	}
	return &logindConn{conn: c}, nil
}

func (l *logindConn) Close() error { return l.conn.Close() }

// CurrentInhibitDelay is logind's InhibitDelayMaxUSec (logind.conf's
// InhibitDelayMaxSec): the longest a delay lock may hold a shutdown.
func (l *logindConn) CurrentInhibitDelay() (time.Duration, error) {
	res, err := l.conn.Object(logindService, logindObject).GetProperty(logindInterface + ".InhibitDelayMaxUSec")
	if err != nil {
		return 0, fmt.Errorf("failed reading InhibitDelayMaxUSec property from logind: %w", err)
	}
	delay, ok := res.Value().(uint64)
	if !ok {
		return 0, fmt.Errorf("InhibitDelayMaxUSec from logind is not a uint64 as expected")
	}
	return time.Duration(delay) * time.Microsecond, nil
}

// InhibitShutdown takes a "delay" inhibitor lock on shutdown.
func (l *logindConn) InhibitShutdown() (inhibitLock, error) {
	call := l.conn.Object(logindService, logindObject).Call(logindInterface+".Inhibit", 0,
		"shutdown", "nodelet", "nodelet needs time to handle node shutdown", "delay")
	if call.Err != nil {
		return 0, fmt.Errorf("failed creating systemd inhibitor: %w", call.Err)
	}
	var fd dbus.UnixFD
	if err := call.Store(&fd); err != nil {
		return 0, fmt.Errorf("failed storing inhibit lock file descriptor: %w", err)
	}
	return inhibitLock(fd), nil
}

// ReleaseInhibitLock closes the lock: logind goes on with the shutdown.
func (l *logindConn) ReleaseInhibitLock(lock inhibitLock) error {
	if err := syscall.Close(int(lock)); err != nil {
		return fmt.Errorf("unable to close systemd inhibitor lock: %w", err)
	}
	return nil
}

// MonitorShutdown delivers logind's PrepareForShutdown signals: true when a
// shutdown starts, false when it is cancelled. The channel closes with the
// connection.
func (l *logindConn) MonitorShutdown(log *slog.Logger) (<-chan bool, error) {
	// The channel is registered before the match exists, so no signal
	// the daemon sends once it has the match finds no channel.
	signals := make(chan *dbus.Signal, 1)
	l.conn.Signal(signals)
	if err := l.conn.AddMatchSignal(dbus.WithMatchInterface(logindInterface), dbus.WithMatchMember("PrepareForShutdown"),
		dbus.WithMatchObjectPath(logindObject)); err != nil {
		l.conn.RemoveSignal(signals)
		return nil, err
	}
	out := make(chan bool, 1)
	go func() {
		for sig := range signals {
			if sig == nil || len(sig.Body) == 0 {
				log.Error("Failed obtaining shutdown event, PrepareForShutdown event was empty")
				continue
			}
			active, ok := sig.Body[0].(bool)
			if !ok {
				log.Error("Failed obtaining shutdown event, PrepareForShutdown event was not bool type as expected")
				continue
			}
			out <- active
		}
		close(out)
	}()
	return out, nil
}
