package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"time"
)

// ncOptions are netcat-openbsd's flags that the e2e specs use: `echo
// hostName | nc -w 1 -u IP PORT` (node-pod udp), `nc -v -t|-u -w 2 HOST
// PORT` (service reachability), `nc -vz -w N HOST PORT`, `nc -lU PATH`, and
// -W, -p (conntrack), -q, -N, -s, -k.
type ncOptions struct {
	udp, unix, listen, keep bool
	verbose, zero, shutdown bool
	timeout                 time.Duration // -w: connect and idle timeout
	quit                    time.Duration // -q: quit this long after stdin's EOF
	quitSet                 bool
	packets                 int // -W: quit after this many reads
	srcAddr, srcPort        string
	args                    []string
}

func nc(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	o, err := parseNc(args)
	if err != nil {
		fmt.Fprintf(stderr, "nc: %v\n", err)
		return 1
	}
	if o.listen {
		return o.serve(stdin, stdout, stderr)
	}
	return o.connect(stdin, stdout, stderr)
}

func parseNc(args []string) (*ncOptions, error) {
	o := &ncOptions{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if len(a) < 2 || a[0] != '-' {
			o.args = append(o.args, a)
			continue
		}
		for j := 1; j < len(a); j++ {
			c := a[j]
			switch c {
			case 'u':
				o.udp = true
			case 't', 'n', '4', 'd', 'D':
				// TCP is the default; addresses are numbers or names alike.
			case 'U':
				o.unix = true
			case 'l':
				o.listen = true
			case 'k':
				o.keep = true
			case 'v':
				o.verbose = true
			case 'z':
				o.zero = true
			case 'N':
				o.shutdown = true
			case 'w', 'q', 'W', 'p', 's', 'i':
				v := a[j+1:]
				if v == "" {
					if i+1 >= len(args) {
						return nil, fmt.Errorf("option requires an argument -- '%c'", c)
					}
					i++
					v = args[i]
				}
				j = len(a)
				if err := o.setValue(c, v); err != nil {
					return nil, err
				}
			default:
				return nil, fmt.Errorf("invalid option -- '%c' (not in this nc stand-in)", c)
			}
		}
	}
	switch {
	case o.listen && o.unix && len(o.args) != 1, !o.listen && o.unix && len(o.args) != 1:
		return nil, errors.New("usage: nc -U [-l] PATH")
	case o.listen && !o.unix && len(o.args) == 0 && o.srcPort == "":
		return nil, errors.New("usage: nc -l [HOST] PORT")
	case !o.listen && !o.unix && len(o.args) != 2:
		return nil, errors.New("usage: nc [-uvz] [-w TIMEOUT] HOST PORT")
	}
	return o, nil
}

func (o *ncOptions) setValue(c byte, v string) error {
	seconds := func() (time.Duration, error) {
		n, err := strconv.Atoi(v)
		if err != nil {
			return 0, fmt.Errorf("-%c %q: not a number", c, v)
		}
		return time.Duration(n) * time.Second, nil
	}
	var err error
	switch c {
	case 'w':
		o.timeout, err = seconds()
	case 'q':
		o.quit, err = seconds()
		o.quitSet = o.quit >= 0 // negative: wait forever
	case 'W':
		o.packets, err = strconv.Atoi(v)
	case 'p':
		o.srcPort = v
	case 's':
		o.srcAddr = v
	case 'i':
		// The interval between lines sent: every line goes at once here.
	}
	return err
}

func (o *ncOptions) network() string {
	switch {
	case o.unix && o.udp:
		return "unixgram"
	case o.unix:
		return "unix"
	case o.udp:
		return "udp"
	}
	return "tcp"
}

func (o *ncOptions) connect(stdin io.Reader, stdout, stderr io.Writer) int {
	network, addr := o.network(), ""
	d := net.Dialer{Timeout: o.timeout}
	if o.unix {
		addr = o.args[0]
	} else {
		addr = net.JoinHostPort(o.args[0], o.args[1])
		if o.srcAddr != "" || o.srcPort != "" {
			local := net.JoinHostPort(o.srcAddr, o.srcPort)
			var err error
			if o.udp {
				d.LocalAddr, err = net.ResolveUDPAddr("udp", local)
			} else {
				d.LocalAddr, err = net.ResolveTCPAddr("tcp", local)
			}
			if err != nil {
				fmt.Fprintf(stderr, "nc: %v\n", err)
				return 1
			}
		}
	}
	conn, err := d.Dial(network, addr)
	if err != nil {
		if o.verbose && !o.unix {
			fmt.Fprintf(stderr, "nc: connect to %s port %s (%s) failed: %v\n", o.args[0], o.args[1], network, cause(err))
		} else {
			fmt.Fprintf(stderr, "nc: %v\n", cause(err))
		}
		return 1
	}
	defer conn.Close()
	// netcat-openbsd says so once connected (for UDP it first writes probe
	// bytes, which we do not: the servers the specs talk to would answer them).
	if o.verbose && !o.unix {
		fmt.Fprintf(stderr, "Connection to %s %s port [%s/*] succeeded!\n", o.args[0], o.args[1], network)
	}
	if o.zero {
		return 0
	}
	return o.readWrite(conn, stdin, stdout)
}

// readWrite sends stdin (each read of it one datagram, for UDP) and copies
// what comes back to stdout until the peer closes, nothing has come for -w,
// -q has passed since stdin's EOF, or -W reads have been made.
func (o *ncOptions) readWrite(conn net.Conn, stdin io.Reader, stdout io.Writer) int {
	stdinDone := make(chan time.Time, 1)
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := stdin.Read(buf)
			if n > 0 {
				if _, werr := conn.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		if cw, ok := conn.(interface{ CloseWrite() error }); ok && o.shutdown {
			_ = cw.CloseWrite()
		}
		stdinDone <- time.Now()
	}()
	var eof time.Time
	buf := make([]byte, 64<<10)
	for reads := 0; ; {
		var deadline time.Time
		if o.timeout > 0 {
			deadline = time.Now().Add(o.timeout)
		}
		select {
		case eof = <-stdinDone:
		default:
		}
		if o.quitSet && !eof.IsZero() {
			if q := eof.Add(o.quit); deadline.IsZero() || q.Before(deadline) {
				deadline = q
			}
		}
		_ = conn.SetReadDeadline(deadline)
		n, err := conn.Read(buf)
		if n > 0 {
			if _, err := stdout.Write(buf[:n]); err != nil {
				return 1
			}
			if reads++; o.packets > 0 && reads >= o.packets {
				return 0
			}
		}
		var ne net.Error
		switch {
		case err == nil:
		case errors.Is(err, io.EOF):
			return 0
		case errors.As(err, &ne) && ne.Timeout():
			if o.quitSet && eof.IsZero() {
				// -q without -w waits for stdin; pick its EOF up.
				select {
				case eof = <-stdinDone:
					continue
				default:
				}
			}
			return 0
		default:
			// A UDP peer's port unreachable shows here.
			return 1
		}
	}
}

func (o *ncOptions) serve(stdin io.Reader, stdout, stderr io.Writer) int {
	network, addr := o.network(), ""
	switch {
	case o.unix:
		addr = o.args[0]
	case len(o.args) == 2:
		addr = net.JoinHostPort(o.args[0], o.args[1])
	case len(o.args) == 1:
		addr = net.JoinHostPort("", o.args[0])
	default:
		addr = net.JoinHostPort(o.srcAddr, o.srcPort)
	}
	if o.udp && !o.unix {
		pc, err := net.ListenPacket(network, addr)
		if err != nil {
			fmt.Fprintf(stderr, "nc: %v\n", cause(err))
			return 1
		}
		defer pc.Close()
		return o.readWrite(&packetPeer{PacketConn: pc}, stdin, stdout)
	}
	l, err := net.Listen(network, addr)
	if err != nil {
		fmt.Fprintf(stderr, "nc: %v\n", cause(err))
		return 1
	}
	defer l.Close()
	if o.unix {
		defer os.Remove(addr)
	}
	for {
		conn, err := l.Accept()
		if err != nil {
			fmt.Fprintf(stderr, "nc: %v\n", cause(err))
			return 1
		}
		if o.verbose {
			fmt.Fprintf(stderr, "Connection received on %s\n", conn.RemoteAddr())
		}
		code := o.readWrite(conn, stdin, stdout)
		conn.Close()
		if !o.keep {
			return code
		}
	}
}

// packetPeer is a listening UDP socket as a connection to whoever sent the
// last datagram, as `nc -lu` answers its client.
type packetPeer struct {
	net.PacketConn
	mu   sync.Mutex // stdin's writer and the reader share peer
	peer net.Addr
}

func (p *packetPeer) Read(b []byte) (int, error) {
	n, from, err := p.ReadFrom(b)
	if err == nil {
		p.mu.Lock()
		p.peer = from
		p.mu.Unlock()
	}
	return n, err
}

func (p *packetPeer) Write(b []byte) (int, error) {
	peer := p.RemoteAddr()
	if peer == nil {
		return len(b), nil // nobody to send to yet
	}
	return p.WriteTo(b, peer)
}

func (p *packetPeer) RemoteAddr() net.Addr {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.peer
}

// cause is the system's words for a failed dial, as nc prints them
// ("Connection refused").
func cause(err error) error {
	var op *net.OpError
	if errors.As(err, &op) {
		var se *os.SyscallError
		if errors.As(op.Err, &se) {
			return se.Err
		}
		return op.Err
	}
	return err
}
