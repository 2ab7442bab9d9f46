package main

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// fakeDNS is a DNS server on 127.0.0.1 (UDP and TCP on one port) that
// answers from records: name → type → resource bodies; other names are
// NXDOMAIN. Every name it was asked is kept, in order.
type fakeDNS struct {
	port    string
	records map[string]map[dnsmessage.Type][]dnsmessage.ResourceBody
	asked   chan string
}

func startFakeDNS(t *testing.T, records map[string]map[dnsmessage.Type][]dnsmessage.ResourceBody) *fakeDNS {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(pc.LocalAddr().String())
	l, err := net.Listen("tcp", "127.0.0.1:"+port)
	if err != nil {
		pc.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close(); l.Close() })
	d := &fakeDNS{port: port, records: records, asked: make(chan string, 100)}
	go func() {
		buf := make([]byte, 65535)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if out := d.answer(buf[:n]); out != nil {
				_, _ = pc.WriteTo(out, from)
			}
		}
	}()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				var n [2]byte
				if _, err := io.ReadFull(c, n[:]); err != nil {
					return
				}
				q := make([]byte, binary.BigEndian.Uint16(n[:]))
				if _, err := io.ReadFull(c, q); err != nil {
					return
				}
				if out := d.answer(q); out != nil {
					_, _ = c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(out))), out...))
				}
			}()
		}
	}()
	return d
}

func (d *fakeDNS) answer(query []byte) []byte {
	var q dnsmessage.Message
	if err := q.Unpack(query); err != nil || len(q.Questions) != 1 {
		return nil
	}
	question := q.Questions[0]
	name := strings.ToLower(question.Name.String())
	d.asked <- name
	m := dnsmessage.Message{
		Header:    dnsmessage.Header{ID: q.ID, Response: true, RecursionDesired: true, RecursionAvailable: true},
		Questions: q.Questions,
	}
	byType, ok := d.records[name]
	if !ok {
		m.RCode = dnsmessage.RCodeNameError
	}
	for _, body := range byType[question.Type] {
		m.Answers = append(m.Answers, dnsmessage.Resource{
			Header: dnsmessage.ResourceHeader{Name: question.Name, Type: question.Type, Class: dnsmessage.ClassINET, TTL: 30},
			Body:   body,
		})
	}
	out, err := m.Pack()
	if err != nil {
		return nil
	}
	return out
}

// names drains what the server was asked so far.
func (d *fakeDNS) names() []string {
	var out []string
	for {
		select {
		case n := <-d.asked:
			out = append(out, n)
		default:
			return out
		}
	}
}

// useResolvConf points dig at a resolv.conf with these contents.
func useResolvConf(t *testing.T, contents string) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(p, []byte(contents), 0o644); err != nil {
		t.Fatal(err)
	}
	old := resolvConf
	resolvConf = p
	t.Cleanup(func() { resolvConf = old })
}

// useFakeResolver sends getent's DNS lookups to d, with search domains.
func useFakeResolver(t *testing.T, d *fakeDNS) {
	t.Helper()
	old := resolver
	resolver = &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var dl net.Dialer
		return dl.DialContext(ctx, network, "127.0.0.1:"+d.port)
	}}
	t.Cleanup(func() { resolver = old })
}

func name(t *testing.T, s string) dnsmessage.Name {
	t.Helper()
	n, err := dnsmessage.NewName(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// runTool runs one tool as the image's link to it would.
func runTool(t *testing.T, stdin string, argv ...string) (code int, stdout, stderr string) {
	t.Helper()
	var o, e strings.Builder
	code = run(argv, strings.NewReader(stdin), &o, &e)
	return code, o.String(), e.String()
}
