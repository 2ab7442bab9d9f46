package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodelet/nodelet/internal/testenv/eventually"
)

// udpHostname answers every datagram with "netserver-0", as agnhost
// netexec's UDP server answers "hostName".
func udpHostname(t *testing.T) (addr string, got chan string) {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	got = make(chan string, 10)
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			got <- string(buf[:n])
			_, _ = pc.WriteTo([]byte("netserver-0"), from)
		}
	}()
	return pc.LocalAddr().String(), got
}

// tcpHostname answers each connection's first line with "netserver-0" and
// closes it.
func tcpHostname(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			buf := make([]byte, 100)
			_, _ = c.Read(buf)
			_, _ = c.Write([]byte("netserver-0"))
			c.Close()
		}
	}()
	return l.Addr().String()
}

// node-pod udp: `echo hostName | nc -w 1 -u IP PORT` (Debian's busybox nc
// has no -u). nc sends stdin as one datagram, prints the answer and exits
// once nothing more has come for -w.
func TestNcUDPAsTheSpecsRunIt(t *testing.T) {
	addr, got := udpHostname(t)
	host, port, _ := net.SplitHostPort(addr)
	began := time.Now()
	code, stdout, stderr := runTool(t, "hostName\n", "nc", "-w", "1", "-u", host, port)
	if code != 0 || stdout != "netserver-0" {
		t.Fatalf("exit %d, stdout %q, stderr %q; want 0 and the server's answer", code, stdout, stderr)
	}
	if d := time.Since(began); d > 5*time.Second {
		t.Errorf("nc took %v to give up waiting; -w is 1s", d)
	}
	if sent := <-got; sent != "hostName\n" {
		t.Errorf("server got %q", sent)
	}
	// Service reachability: -v says so on stderr, stdout is the answer.
	code, stdout, stderr = runTool(t, "hostName\n", "nc", "-v", "-u", "-w", "2", host, port)
	if code != 0 || stdout != "netserver-0" || !strings.Contains(stderr, "succeeded") {
		t.Errorf("-v -u: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	// -W 1: done at the first answer, without waiting for -w.
	began = time.Now()
	if code, stdout, _ = runTool(t, "hostName\n", "nc", "-w", "30", "-W", "1", "-u", host, port); code != 0 || stdout != "netserver-0" || time.Since(began) > 10*time.Second {
		t.Errorf("-W 1: exit %d, stdout %q after %v", code, stdout, time.Since(began))
	}
}

// A UDP port nobody listens on is refused (ICMP) and nc fails.
func TestNcUDPRefused(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(pc.LocalAddr().String())
	pc.Close()
	if code, stdout, _ := runTool(t, "hostName\n", "nc", "-w", "2", "-u", host, port); code == 0 || stdout != "" {
		t.Errorf("exit %d, stdout %q; want a failure", code, stdout)
	}
}

func TestNcTCP(t *testing.T) {
	host, port, _ := net.SplitHostPort(tcpHostname(t))
	code, stdout, stderr := runTool(t, "hostName\n", "nc", "-v", "-t", "-w", "2", host, port)
	if code != 0 || stdout != "netserver-0" || !strings.Contains(stderr, "Connection to "+host+" "+port+" port [tcp/*] succeeded!") {
		t.Errorf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if code, _, _ := runTool(t, "", "nc", "-vz", "-w", "2", host, port); code != 0 {
		t.Errorf("-z on an open port: exit %d", code)
	}
	closedHost, closedPort, _ := net.SplitHostPort(closedPort(t))
	if code, _, stderr := runTool(t, "", "nc", "-vz", "-w", "2", closedHost, closedPort); code != 1 || !strings.Contains(stderr, "connection refused") {
		t.Errorf("-z on a closed port: exit %d, stderr %q", code, stderr)
	}
}

// `nc -lU PATH` listens on a unix socket (the hostPath socket spec).
func TestNcListenUnix(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "asocket")
	done := make(chan string, 1)
	go func() {
		_, stdout, _ := runTool(t, "", "nc", "-lU", sock)
		done <- stdout
	}()
	var c net.Conn
	eventually.Nil(t, 10*time.Second, "nc -lU listens", func() (err error) {
		c, err = net.Dial("unix", sock)
		return err
	})
	_, _ = c.Write([]byte("hello"))
	c.Close()
	if got := <-done; got != "hello" {
		t.Errorf("nc -lU printed %q", got)
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("the socket is left behind: %v", err)
	}
}
