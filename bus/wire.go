package bus

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"

	"github.com/nats-io/nkeys"
)

// wire is a bare NATS protocol client: the consumer proxy's listener. The
// proxy must see a request's header block byte for byte, as nats-server
// stamped it, to know which Nats-Request-Info line the server appended
// (see requestInfo); nats.go hands out only headers it has already parsed,
// splitting lines on a bare LF where nats-server does not. So the proxy
// subscribes through this client and answers through nats.go.
type wire struct {
	conn net.Conn
	r    *bufio.Reader
	mu   sync.Mutex // writes
}

// wireMsg is one delivered message, its header block raw.
type wireMsg struct {
	Subject, Reply string
	Header, Data   []byte
}

// dialWire authenticates on conn (a fresh connection to the server) with
// kp, the way every NKey client does: the signature of the nonce of the
// server's INFO.
func dialWire(conn net.Conn, kp nkeys.KeyPair, name string) (*wire, error) {
	w := &wire{conn: conn, r: bufio.NewReaderSize(conn, 64<<10)}
	line, err := w.line()
	if err != nil {
		return nil, err
	}
	info, ok := strings.CutPrefix(line, "INFO ")
	if !ok {
		return nil, fmt.Errorf("bus wire: expected INFO, got %q", line)
	}
	var si struct {
		Nonce string `json:"nonce"`
	}
	if err := json.Unmarshal([]byte(info), &si); err != nil {
		return nil, fmt.Errorf("bus wire: INFO: %w", err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return nil, err
	}
	sig, err := kp.Sign([]byte(si.Nonce))
	if err != nil {
		return nil, err
	}
	connect, _ := json.Marshal(map[string]any{
		"verbose": false, "pedantic": false, "lang": "go", "name": name, "protocol": 1,
		"headers": true, "no_responders": true, "nkey": pub, "sig": base64.RawURLEncoding.EncodeToString(sig),
	})
	if err := w.write("CONNECT " + string(connect) + "\r\nPING\r\n"); err != nil {
		return nil, err
	}
	if err := w.pong(); err != nil {
		return nil, err
	}
	return w, nil
}

func (w *wire) write(s string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, err := io.WriteString(w.conn, s)
	return err
}

// line reads one protocol line without its CRLF.
func (w *wire) line() (string, error) {
	l, err := w.r.ReadString('\n')
	if err != nil {
		return "", err
	}
	return strings.TrimRight(l, "\r\n"), nil
}

// pong waits for the PONG that answers a PING, failing on -ERR.
func (w *wire) pong() error {
	for {
		l, err := w.line()
		if err != nil {
			return err
		}
		switch {
		case l == "PONG":
			return nil
		case l == "PING":
			if err := w.write("PONG\r\n"); err != nil {
				return err
			}
		case strings.HasPrefix(l, "-ERR"):
			return fmt.Errorf("bus wire: %s", l)
		}
	}
}

// sub subscribes to subject and waits until the server has it.
func (w *wire) sub(subject string, sid int) error {
	if err := w.write(fmt.Sprintf("SUB %s %d\r\nPING\r\n", subject, sid)); err != nil {
		return err
	}
	return w.pong()
}

// hpub publishes data with a header block sent exactly as given (it must
// start with NATS/1.0 and end with an empty line to be one).
func (w *wire) hpub(subject, reply string, hdr, data []byte) error {
	if reply != "" {
		reply = " " + reply
	}
	return w.write(fmt.Sprintf("HPUB %s%s %d %d\r\n%s%s\r\n", subject, reply, len(hdr), len(hdr)+len(data), hdr, data))
}

// next returns the next message, answering the server's PINGs on the way.
// It fails when the connection ends or the server reports an error.
func (w *wire) next() (wireMsg, error) {
	for {
		l, err := w.line()
		if err != nil {
			return wireMsg{}, err
		}
		switch {
		case l == "PING":
			if err := w.write("PONG\r\n"); err != nil {
				return wireMsg{}, err
			}
			continue
		case l == "PONG" || l == "+OK" || strings.HasPrefix(l, "INFO "):
			continue
		case strings.HasPrefix(l, "-ERR"):
			return wireMsg{}, fmt.Errorf("bus wire: %s", l)
		}
		f := strings.Fields(l)
		var m wireMsg
		var hlen, tlen int
		switch {
		case len(f) >= 4 && f[0] == "MSG":
			m.Subject = f[1]
			if len(f) == 5 {
				m.Reply = f[3]
			}
			hlen, tlen = 0, atoi(f[len(f)-1])
		case len(f) >= 5 && f[0] == "HMSG":
			m.Subject = f[1]
			if len(f) == 6 {
				m.Reply = f[3]
			}
			hlen, tlen = atoi(f[len(f)-2]), atoi(f[len(f)-1])
		default:
			return wireMsg{}, fmt.Errorf("bus wire: unexpected %q", l)
		}
		if hlen < 0 || tlen < hlen {
			return wireMsg{}, fmt.Errorf("bus wire: bad sizes in %q", l)
		}
		buf := make([]byte, tlen+2)
		if _, err := io.ReadFull(w.r, buf); err != nil {
			return wireMsg{}, err
		}
		m.Header, m.Data = buf[:hlen:hlen], buf[hlen:tlen:tlen]
		return m, nil
	}
}

func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return -1
	}
	return n
}

func (w *wire) close() error { return w.conn.Close() }

// errNoRequestInfo: the header block carries no identity the server set.
var errNoRequestInfo = errors.New("no client information set by the bus on the request")
