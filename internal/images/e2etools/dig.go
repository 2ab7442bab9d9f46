package main

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// resolvConf is read for dig's servers and search list (a variable for
// tests).
var resolvConf = "/etc/resolv.conf"

// digOptions are the dig arguments the e2e specs use (test/e2e/network
// dns_common.go): `dig +notcp|+tcp +noall +answer +search NAME TYPE`,
// `dig +short NAME TYPE`, `dig +short +search NAME`, `dig +short @SERVER
// [-p PORT] NAME`, `dig +short -x ADDR`.
type digOptions struct {
	name         string
	qtype        dnsmessage.Type
	server, port string
	tcp, search  bool
	short        bool
	answerOnly   bool // +noall +answer
	timeout      time.Duration
	tries        int
	ndots        int
	searchList   []string
	servers      []string
}

var digTypes = map[string]dnsmessage.Type{
	"A": dnsmessage.TypeA, "AAAA": dnsmessage.TypeAAAA, "CNAME": dnsmessage.TypeCNAME,
	"PTR": dnsmessage.TypePTR, "SRV": dnsmessage.TypeSRV, "TXT": dnsmessage.TypeTXT,
	"MX": dnsmessage.TypeMX, "NS": dnsmessage.TypeNS, "SOA": dnsmessage.TypeSOA,
	"ANY": dnsmessage.TypeALL,
}

func dig(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	o, err := parseDig(args)
	if err != nil {
		fmt.Fprintf(stderr, "dig: %v\n", err)
		return 1
	}
	servers := o.servers
	if o.server != "" {
		servers = []string{o.server}
	}
	var last *dnsmessage.Message
	for _, name := range o.candidates() {
		m, err := o.ask(servers, name)
		if err != nil {
			// dig prints this on stdout and exits 9.
			fmt.Fprintf(stdout, ";; connection timed out; no servers could be reached\n")
			return 9
		}
		last = m
		// +search goes on to the next domain only when the name does not
		// exist, as dig does.
		if m.RCode != dnsmessage.RCodeNameError {
			break
		}
	}
	if last != nil {
		o.print(stdout, last)
	}
	return 0
}

func parseDig(args []string) (*digOptions, error) {
	o := &digOptions{qtype: dnsmessage.TypeA, port: "53", timeout: 5 * time.Second, tries: 3, ndots: 1}
	o.readResolvConf()
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case strings.HasPrefix(a, "@"):
			o.server = a[1:]
		case a == "-p" || a == "-x" || a == "-t":
			if i+1 >= len(args) {
				return nil, fmt.Errorf("%s needs an argument", a)
			}
			i++
			switch a {
			case "-p":
				o.port = args[i]
			case "-t":
				t, ok := digTypes[strings.ToUpper(args[i])]
				if !ok {
					return nil, fmt.Errorf("type %q is not known to this dig stand-in", args[i])
				}
				o.qtype = t
			case "-x":
				rev, err := reverseName(args[i])
				if err != nil {
					return nil, err
				}
				o.name, o.qtype = rev, dnsmessage.TypePTR
			}
		case strings.HasPrefix(a, "+"):
			if err := o.plus(a[1:]); err != nil {
				return nil, err
			}
		case strings.HasPrefix(a, "-"):
			// -4, -6 and the like change nothing the specs look at.
		default:
			// A type's name after the name is the type, as in dig.
			if t, ok := digTypes[strings.ToUpper(a)]; ok && o.name != "" {
				o.qtype = t
			} else if strings.EqualFold(a, "IN") {
				// The only class there is.
			} else {
				o.name = a
			}
		}
	}
	if o.name == "" {
		o.name = "." // dig with no name asks for the root's NS
		o.qtype = dnsmessage.TypeNS
	}
	return o, nil
}

// plus applies one +option.
func (o *digOptions) plus(opt string) error {
	key, val, _ := strings.Cut(opt, "=")
	switch key {
	case "tcp", "vc":
		o.tcp = true
	case "notcp", "novc":
		o.tcp = false
	case "search":
		o.search = true
	case "nosearch":
		o.search = false
	case "short":
		o.short = true
	case "noall":
		o.answerOnly = true
	case "time":
		n, err := strconv.Atoi(val)
		if err != nil {
			return fmt.Errorf("+time=%q", val)
		}
		o.timeout = time.Duration(n) * time.Second
	case "tries", "retry":
		n, err := strconv.Atoi(val)
		if err != nil {
			return fmt.Errorf("+%s=%q", key, val)
		}
		if key == "retry" {
			n++
		}
		o.tries = max(n, 1)
	}
	// +answer and the rest: with +noall only the answer is printed anyway.
	return nil
}

// readResolvConf takes nameservers, the search list and ndots from
// /etc/resolv.conf, as dig does.
func (o *digOptions) readResolvConf() {
	f, err := os.Open(resolvConf)
	if err != nil {
		o.servers = []string{"127.0.0.1"}
		return
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) < 2 || strings.HasPrefix(fields[0], "#") || strings.HasPrefix(fields[0], ";") {
			continue
		}
		switch fields[0] {
		case "nameserver":
			o.servers = append(o.servers, fields[1])
		case "search", "domain":
			o.searchList = fields[1:]
		case "options":
			for _, opt := range fields[1:] {
				if v, ok := strings.CutPrefix(opt, "ndots:"); ok {
					if n, err := strconv.Atoi(v); err == nil {
						o.ndots = n
					}
				}
			}
		}
	}
	if len(o.servers) == 0 {
		o.servers = []string{"127.0.0.1"}
	}
}

// candidates are the absolute names to ask, in order: with +search a
// relative name is tried as is first when it has at least ndots dots, then
// under each search domain, then as is.
func (o *digOptions) candidates() []string {
	name := o.name
	if strings.HasSuffix(name, ".") {
		return []string{name}
	}
	if !o.search || len(o.searchList) == 0 {
		return []string{name + "."}
	}
	var out []string
	asIs := strings.Count(name, ".") >= o.ndots
	if asIs {
		out = append(out, name+".")
	}
	for _, d := range o.searchList {
		out = append(out, name+"."+strings.TrimSuffix(d, ".")+".")
	}
	if !asIs {
		out = append(out, name+".")
	}
	return out
}

// ask sends one query to the servers in turn, each tried o.tries times over
// UDP (retried over TCP when the answer is truncated) or once over TCP.
func (o *digOptions) ask(servers []string, name string) (*dnsmessage.Message, error) {
	qname, err := dnsmessage.NewName(name)
	if err != nil {
		return nil, err
	}
	q := dnsmessage.Message{
		Header:    dnsmessage.Header{ID: uint16(rand.Uint32()), RecursionDesired: true},
		Questions: []dnsmessage.Question{{Name: qname, Type: o.qtype, Class: dnsmessage.ClassINET}},
	}
	packed, err := q.Pack()
	if err != nil {
		return nil, err
	}
	err = errors.New("no servers")
	for _, s := range servers {
		addr := net.JoinHostPort(s, o.port)
		tries := o.tries
		if o.tcp {
			tries = 1
		}
		for range tries {
			var m *dnsmessage.Message
			if m, err = exchange(addr, o.tcp, packed, q.ID, o.timeout); err != nil {
				continue
			}
			if m.Truncated && !o.tcp {
				if m, err = exchange(addr, true, packed, q.ID, o.timeout); err != nil {
					continue
				}
			}
			return m, nil
		}
	}
	return nil, err
}

func exchange(addr string, tcp bool, query []byte, id uint16, timeout time.Duration) (*dnsmessage.Message, error) {
	network := "udp"
	if tcp {
		network = "tcp"
	}
	c, err := net.DialTimeout(network, addr, timeout)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	if tcp {
		framed := binary.BigEndian.AppendUint16(nil, uint16(len(query)))
		if _, err := c.Write(append(framed, query...)); err != nil {
			return nil, err
		}
		var l [2]byte
		if _, err := io.ReadFull(c, l[:]); err != nil {
			return nil, err
		}
		buf := make([]byte, binary.BigEndian.Uint16(l[:]))
		if _, err := io.ReadFull(c, buf); err != nil {
			return nil, err
		}
		return unpack(buf, id)
	}
	if _, err := c.Write(query); err != nil {
		return nil, err
	}
	buf := make([]byte, 65535)
	for {
		n, err := c.Read(buf)
		if err != nil {
			return nil, err
		}
		if m, err := unpack(buf[:n], id); err == nil {
			return m, nil
		}
		// Not our answer: keep waiting for it.
	}
}

func unpack(b []byte, id uint16) (*dnsmessage.Message, error) {
	var m dnsmessage.Message
	if err := m.Unpack(b); err != nil {
		return nil, err
	}
	if m.ID != id || !m.Response {
		return nil, errors.New("not the answer to our query")
	}
	return &m, nil
}

// print writes the answer as dig does: +short the records' data, one a
// line; +noall +answer the answer section's records; otherwise a header,
// the question and the answer.
func (o *digOptions) print(w io.Writer, m *dnsmessage.Message) {
	if o.short {
		for _, rr := range m.Answers {
			if d := rdata(rr.Body); d != "" {
				fmt.Fprintln(w, d)
			}
		}
		return
	}
	if !o.answerOnly {
		fmt.Fprintf(w, ";; ->>HEADER<<- opcode: QUERY, status: %s, id: %d\n", rcodeName(m.RCode), m.ID)
		fmt.Fprintf(w, ";; QUERY: %d, ANSWER: %d, AUTHORITY: %d, ADDITIONAL: %d\n\n", len(m.Questions), len(m.Answers), len(m.Authorities), len(m.Additionals))
		fmt.Fprintln(w, ";; QUESTION SECTION:")
		for _, q := range m.Questions {
			fmt.Fprintf(w, ";%s\t\tIN\t%s\n", q.Name, typeName(q.Type))
		}
		if len(m.Answers) > 0 {
			fmt.Fprintln(w, "\n;; ANSWER SECTION:")
		}
	}
	for _, rr := range m.Answers {
		fmt.Fprintf(w, "%s\t%d\tIN\t%s\t%s\n", rr.Header.Name, rr.Header.TTL, typeName(rr.Header.Type), rdata(rr.Body))
	}
}

// rdata is a record's data in dig's presentation form.
func rdata(b dnsmessage.ResourceBody) string {
	switch r := b.(type) {
	case *dnsmessage.AResource:
		return net.IP(r.A[:]).String()
	case *dnsmessage.AAAAResource:
		return net.IP(r.AAAA[:]).String()
	case *dnsmessage.CNAMEResource:
		return r.CNAME.String()
	case *dnsmessage.PTRResource:
		return r.PTR.String()
	case *dnsmessage.NSResource:
		return r.NS.String()
	case *dnsmessage.MXResource:
		return fmt.Sprintf("%d %s", r.Pref, r.MX)
	case *dnsmessage.SRVResource:
		return fmt.Sprintf("%d %d %d %s", r.Priority, r.Weight, r.Port, r.Target)
	case *dnsmessage.TXTResource:
		q := make([]string, len(r.TXT))
		for i, t := range r.TXT {
			q[i] = strconv.Quote(t)
		}
		return strings.Join(q, " ")
	case *dnsmessage.SOAResource:
		return fmt.Sprintf("%s %s %d %d %d %d %d", r.NS, r.MBox, r.Serial, r.Refresh, r.Retry, r.Expire, r.MinTTL)
	}
	return ""
}

func typeName(t dnsmessage.Type) string {
	for n, v := range digTypes {
		if v == t {
			return n
		}
	}
	return strings.TrimPrefix(t.String(), "Type")
}

func rcodeName(r dnsmessage.RCode) string {
	switch r {
	case dnsmessage.RCodeSuccess:
		return "NOERROR"
	case dnsmessage.RCodeNameError:
		return "NXDOMAIN"
	case dnsmessage.RCodeServerFailure:
		return "SERVFAIL"
	case dnsmessage.RCodeRefused:
		return "REFUSED"
	}
	return strings.ToUpper(strings.TrimPrefix(r.String(), "RCode"))
}

// reverseName is dig -x's name: 4.3.2.1.in-addr.arpa. or the nibbles of
// an IPv6 address under ip6.arpa.
func reverseName(addr string) (string, error) {
	ip := net.ParseIP(addr)
	if ip == nil {
		return "", fmt.Errorf("-x %q: not an IP address", addr)
	}
	if v4 := ip.To4(); v4 != nil {
		return fmt.Sprintf("%d.%d.%d.%d.in-addr.arpa.", v4[3], v4[2], v4[1], v4[0]), nil
	}
	const hex = "0123456789abcdef"
	var b strings.Builder
	for i := len(ip) - 1; i >= 0; i-- {
		b.WriteByte(hex[ip[i]&0xf])
		b.WriteByte('.')
		b.WriteByte(hex[ip[i]>>4])
		b.WriteByte('.')
	}
	return b.String() + "ip6.arpa.", nil
}
